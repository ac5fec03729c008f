"""Reading an endpoint's HTTP/1.1 responses off one persistent connection, in order. Pure.

A push connection sends requests and reads their answers in the order sent (pipelined when more
than one is outstanding). ``ResponseReader.feed`` takes the bytes as they arrive and returns the
status of each response completed by them. Framing follows RFC 9112: interim (1xx) responses are
skipped; a body is delimited by ``Transfer-Encoding: chunked``, else ``Content-Length``, else (not
for HEAD-like statuses 204 and 304) by the connection's end, which makes the connection unusable
for another request. The head of a response is bounded (``RESPONSE_HEAD_BYTES_MAX``); a body longer
than ``limits.push_response_bytes_max`` is not read: its status stands and the connection must
close (``must_close``). Bytes that are not an HTTP/1.x response raise ``PushResponseError`` and
nothing else: the connection must close.
"""

from __future__ import annotations

from mqbroker import limits


class PushResponseError(Exception):
    """An endpoint's bytes are not an HTTP/1.x response (never sent to a client: the push is retried, its text
    is the delivery's last error)."""


#: Bytes of a response's status line and headers (an endpoint answers a POST with a few hundred).
RESPONSE_HEAD_BYTES_MAX = 64 * 1024
#: Bytes of a chunk-size line with its extensions.
_CHUNK_LINE_BYTES_MAX = 1024


class ResponseReader:
    """Splits a connection's incoming bytes into responses; their statuses in order."""

    def __init__(self, body_bytes_max: int = limits.push_response_bytes_max) -> None:
        self._body_bytes_max = body_bytes_max
        self._buffer = bytearray()
        self._status = 0  # of the response whose body is being read (0: reading a head)
        self._remaining = 0  # body bytes still to skip (Content-Length or the current chunk)
        self._chunked = False
        self._chunk_state = 0  # 0 size line, 1 chunk data, 2 CRLF after data, 3 trailers
        self._body_read = 0
        self._until_close = False
        #: The connection must not carry another request (``Connection: close``, an unbounded or oversize body).
        self.must_close = False

    def feed(self, data: bytes) -> list[int]:
        """The statuses of the responses ``data`` completes (raises ``PushResponseError`` on bytes that are not one)."""
        if self.must_close and not self._status:
            return []  # what follows a closing response is not read
        self._buffer += data
        completed: list[int] = []
        while self._buffer:
            if not self._status:
                if not self._read_head():
                    break
                if not self._status:
                    continue  # an interim response
                if self._remaining == 0 and not self._chunked and not self._until_close:
                    completed.append(self._finish())
                    continue
            if not self._read_body():
                break
            completed.append(self._finish())
            if self.must_close:
                self._buffer.clear()
                break
        return completed

    @property
    def in_response(self) -> bool:
        """Whether a response's body is being read (one delimited by the connection's end waits for it)."""
        return self._status != 0

    def connection_ended(self) -> int | None:
        """The connection closed: the status of a response delimited by that end (None: nothing was complete)."""
        if self._status and self._until_close:
            return self._finish()
        return None

    def _finish(self) -> int:
        status, self._status = self._status, 0
        self._chunked = self._until_close = False
        self._remaining = self._body_read = self._chunk_state = 0
        return status

    def _read_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > RESPONSE_HEAD_BYTES_MAX:
                raise PushResponseError(f"the endpoint sent a response head over {RESPONSE_HEAD_BYTES_MAX} bytes")
            return False
        if end > RESPONSE_HEAD_BYTES_MAX:
            raise PushResponseError(f"the endpoint sent a response head over {RESPONSE_HEAD_BYTES_MAX} bytes")
        head = bytes(self._buffer[:end])
        del self._buffer[: end + 4]
        lines = head.split(b"\r\n")
        status = _status(lines[0])
        length: int | None = None
        chunked = False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise PushResponseError(f"the endpoint sent a malformed header line {line[:80]!r}")
            name, value = name.lower(), value.strip()
            if name == b"content-length":
                length = _content_length(value, length)
            elif name == b"transfer-encoding":
                chunked = value.lower().split(b",")[-1].strip() == b"chunked"
                if not chunked:
                    raise PushResponseError(f"the endpoint sent an unsupported transfer coding {value[:80]!r}")
            elif name == b"connection" and b"close" in value.lower():
                self.must_close = True
        if 100 <= status < 200:
            return True  # interim: the real response follows
        self._status = status
        if status in (204, 304):
            return True
        if chunked:
            self._chunked = True
        elif length is not None:
            self._remaining = length
        else:
            self._until_close = self.must_close = True
        return True

    def _read_body(self) -> bool:
        """Skip body bytes; whether the body ended."""
        if self._until_close:
            self._skip(len(self._buffer))
            return not self._until_close  # cut short once oversize
        if not self._chunked:
            self._skip(min(self._remaining, len(self._buffer)))
            return self._remaining == 0
        return self._read_chunks()

    def _skip(self, count: int) -> None:
        del self._buffer[:count]
        self._remaining -= count
        self._body_read += count
        if self._body_read > self._body_bytes_max:
            # Not read further: the status stands, the connection closes.
            self._until_close = self._chunked = False
            self._remaining = 0
            self.must_close = True

    def _read_chunks(self) -> bool:
        while True:
            if self._chunk_state == 1:
                self._skip(min(self._remaining, len(self._buffer)))
                if not self._chunked:
                    return True  # oversize: cut short
                if self._remaining:
                    return False
                self._chunk_state = 2
            line_end = self._buffer.find(b"\r\n")
            if line_end < 0:
                if len(self._buffer) > _CHUNK_LINE_BYTES_MAX:
                    raise PushResponseError("the endpoint sent a chunk line over 1024 bytes")
                return False
            line = bytes(self._buffer[:line_end])
            del self._buffer[: line_end + 2]
            if self._chunk_state == 2:
                if line:
                    raise PushResponseError("the endpoint sent chunk data longer than its size")
                self._chunk_state = 0
            elif self._chunk_state == 0:
                self._remaining = _chunk_size(line)
                self._chunk_state = 1 if self._remaining else 3
            elif not line:  # the blank line after the last chunk's trailers
                return True


def _status(line: bytes) -> int:
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit() or rest[3:4] not in (b"", b" "):
        raise PushResponseError(f"the endpoint sent {line[:80]!r}, not an HTTP/1.x status line")
    return int(code)


def _content_length(value: bytes, before: int | None) -> int:
    if not value.isdigit() or len(value) > 18:
        raise PushResponseError(f"the endpoint sent Content-Length {value[:40]!r}")
    length = int(value)
    if before is not None and before != length:
        raise PushResponseError("the endpoint sent two different Content-Length headers")
    return length


def _chunk_size(line: bytes) -> int:
    size = line.partition(b";")[0].strip()
    if not size or len(size) > 15 or any(byte not in b"0123456789abcdefABCDEF" for byte in size):
        raise PushResponseError(f"the endpoint sent chunk size {line[:40]!r}")
    return int(size, 16)
