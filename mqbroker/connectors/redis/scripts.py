"""The Redis sink's writes: one Lua script per mode, and the arguments each run of records becomes. Pure.

Every write is one script call for a run of records of one topic partition. The script reads
the last offset written for that partition from the positions hash, applies only the records
past it, and stores the run's last offset — atomically, inside Redis. A replay after a crash
(the task resumes from an older checkpoint) therefore writes nothing twice: no duplicate Stream
entry, no repeated PUBLISH, no key set back to an older value.

Arguments common to the three scripts: ``KEYS[1]`` the positions hash, ``KEYS[2]`` the Stream
key (or the channel / key prefix, passed as a key so scripts name every key they touch);
``ARGV[1]`` the hash field (``<topic>/<partition>``), ``ARGV[2]`` the run's last offset,
``ARGV[3]`` a mode parameter (MAXLEN, TTL); then each record's fields.
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker.connectors.redis.resp import Argument, EncodedArguments, encode_arguments
from mqbroker.records.record import RecordHeader

#: One decoded record as the sink carries it: (offset, key, value, headers, timestamp_ms).
SinkRecord = tuple[int, bytes | None, bytes | None, tuple[RecordHeader, ...], int]

_PROLOGUE = """
local done = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
local parameter = tonumber(ARGV[3])
local i = 4
local written = 0
"""
_EPILOGUE = """
if tonumber(ARGV[2]) > done then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return written
"""

#: Per record: offset, timestamp, flags (1: key follows, 2: value follows, 4: header count and pairs follow).
#: The entry's fields: partition, offset, timestamp, key, value, header.<name>. Records without headers
#: (flags 2 and 3, nearly all) are added without building a Lua table, and the Stream is trimmed
#: (``MAXLEN ~``) once per run rather than at every entry: Redis spends most of a run in the script.
#: Offsets ascend within a run, so once one is past what was written, every later one is too.
STREAM_SCRIPT = _PROLOGUE + """
local partition = string.match(ARGV[1], '/(%d+)$')
local stream = KEYS[2]
local count = #ARGV
local fresh = false
while i <= count do
  local offset = ARGV[i]
  local flags = ARGV[i + 2]
  if not fresh then fresh = tonumber(offset) > done end
  if flags == '2' then
    if fresh then
      redis.call('XADD', stream, '*', 'partition', partition, 'offset', offset, 'timestamp', ARGV[i + 1],
                 'value', ARGV[i + 3])
      written = written + 1
    end
    i = i + 4
  elseif flags == '3' then
    if fresh then
      redis.call('XADD', stream, '*', 'partition', partition, 'offset', offset, 'timestamp', ARGV[i + 1],
                 'key', ARGV[i + 3], 'value', ARGV[i + 4])
      written = written + 1
    end
    i = i + 5
  else
    flags = tonumber(flags)
    local fields = {'partition', partition, 'offset', offset, 'timestamp', ARGV[i + 1]}
    i = i + 3
    if flags % 2 == 1 then fields[#fields + 1] = 'key'; fields[#fields + 1] = ARGV[i]; i = i + 1 end
    if math.floor(flags / 2) % 2 == 1 then fields[#fields + 1] = 'value'; fields[#fields + 1] = ARGV[i]; i = i + 1 end
    if math.floor(flags / 4) % 2 == 1 then
      local headers = tonumber(ARGV[i]); i = i + 1
      for _ = 1, headers do
        fields[#fields + 1] = 'header.' .. ARGV[i]; fields[#fields + 1] = ARGV[i + 1]; i = i + 2
      end
    end
    if fresh then
      redis.call('XADD', stream, '*', unpack(fields))
      written = written + 1
    end
  end
end
if written > 0 and parameter > 0 then redis.call('XTRIM', stream, 'MAXLEN', '~', parameter) end
""" + _EPILOGUE

#: Per record: offset, flags (2: value follows), key, value. No value (a tombstone) deletes the key.
KEYS_SCRIPT = _PROLOGUE + """
while i <= #ARGV do
  local offset = tonumber(ARGV[i])
  local has_value = tonumber(ARGV[i + 1]) == 2
  local key = KEYS[2] .. ARGV[i + 2]
  if offset > done then
    if not has_value then
      redis.call('DEL', key)
    elseif parameter > 0 then
      redis.call('SET', key, ARGV[i + 3], 'PX', parameter)
    else
      redis.call('SET', key, ARGV[i + 3])
    end
    written = written + 1
  end
  if has_value then i = i + 4 else i = i + 3 end
end
""" + _EPILOGUE

#: Per record: offset, message (the value; empty for a tombstone).
PUBSUB_SCRIPT = _PROLOGUE + """
while i <= #ARGV do
  if tonumber(ARGV[i]) > done then
    redis.call('PUBLISH', KEYS[2], ARGV[i + 1])
    written = written + 1
  end
  i = i + 2
end
""" + _EPILOGUE

SCRIPTS = {"stream": STREAM_SCRIPT, "keys": KEYS_SCRIPT, "pubsub": PUBSUB_SCRIPT}


def position_field(topic: str, partition: int) -> str:
    """The positions hash field of one topic partition."""
    return f"{topic}/{partition}"


def stream_arguments(records: Sequence[SinkRecord], with_headers: bool) -> EncodedArguments:
    """The per-record arguments of ``STREAM_SCRIPT``, encoded (header values that are null become empty).

    A record with a value and no headers to write (nearly every one) is encoded in one step; the
    others go through ``encode_arguments``.
    """
    parts: list[bytes] = []
    append = parts.append
    count = 0
    for offset, key, value, headers, timestamp_ms in records:
        if value is None or (headers and with_headers):
            flags = (key is not None) | (value is not None) << 1 | (bool(headers) and with_headers) << 2
            arguments: list[Argument] = [offset, timestamp_ms, flags]
            if key is not None:
                arguments.append(key)
            if value is not None:
                arguments.append(value)
            if flags & 4:
                arguments.append(len(headers))
                for name, header_value in headers:
                    arguments.extend((name, header_value or b""))
            encoded = encode_arguments(arguments)
            append(encoded.data)
            count += encoded.count
            continue
        offset_text, timestamp_text = b"%d" % offset, b"%d" % timestamp_ms
        if key is None:
            append(b"$%d\r\n%b\r\n$%d\r\n%b\r\n$1\r\n2\r\n$%d\r\n%b\r\n" % (
                len(offset_text), offset_text, len(timestamp_text), timestamp_text, len(value), value))
            count += 4
        else:
            append(b"$%d\r\n%b\r\n$%d\r\n%b\r\n$1\r\n3\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
                len(offset_text), offset_text, len(timestamp_text), timestamp_text, len(key), key, len(value), value))
            count += 5
    return EncodedArguments(count, b"".join(parts))


def keys_arguments(records: Sequence[SinkRecord]) -> tuple[list[Argument], int]:
    """The per-record arguments of ``KEYS_SCRIPT``, and how many records were left out (they have no key)."""
    arguments: list[Argument] = []
    extend = arguments.extend
    keyless = 0
    for offset, key, value, _, _ in records:
        if key is None:
            keyless += 1
        elif value is None:
            extend((offset, 0, key))
        else:
            extend((offset, 2, key, value))
    return arguments, keyless


def pubsub_arguments(records: Sequence[SinkRecord]) -> list[Argument]:
    """The per-record arguments of ``PUBSUB_SCRIPT``."""
    arguments: list[Argument] = []
    extend = arguments.extend
    for offset, _, value, _, _ in records:
        extend((offset, value if value is not None else b""))
    return arguments
