"""Redis commands in RESP, encoded in one pass: the sink's scripts carry thousands of arguments. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: What a command argument may be: bytes as they are, text as UTF-8, numbers in decimal.
Argument = bytes | str | int | float


@dataclass(frozen=True, slots=True)
class EncodedArguments:
    """``count`` arguments already encoded as RESP bulk strings, spliced into a command by ``encode_command``."""

    count: int
    data: bytes


def encode_arguments(arguments: Sequence[Argument]) -> EncodedArguments:
    """``arguments`` as RESP bulk strings."""
    parts = []
    append = parts.append
    for argument in arguments:
        if isinstance(argument, str):
            argument = argument.encode("utf-8")
        elif isinstance(argument, int):
            argument = b"%d" % argument
        elif isinstance(argument, float):
            argument = repr(argument).encode("ascii")
        append(b"$%d\r\n%b\r\n" % (len(argument), argument))
    return EncodedArguments(len(arguments), b"".join(parts))


def encode_command(arguments: Sequence[Argument | EncodedArguments]) -> bytes:
    """``arguments`` (some perhaps encoded already) as one RESP array of bulk strings."""
    count = 0
    parts = [b""]
    for argument in arguments:
        encoded = argument if isinstance(argument, EncodedArguments) else encode_arguments((argument,))
        count += encoded.count
        parts.append(encoded.data)
    parts[0] = b"*%d\r\n" % count
    return b"".join(parts)


class RespProtocolError(Exception):
    """Bytes that are not RESP2 replies, or a reply past the bounds ``RespReader`` was given."""


class RespErrorReply(Exception):
    """A Redis error reply (``-ERR ...``): the command was refused."""


#: The most bytes a reply line (status, error, integer, or a header) may take before its CRLF.
REPLY_LINE_BYTES_MAX = 16 * 1024


class RespReader:
    """Parses RESP2 replies incrementally from the bytes a connection receives.

    ``feed`` returns every reply completed by the new bytes: status replies as ``str``, errors as
    ``error_factory(message)`` (``RespErrorReply`` by default), integers as ``int``, bulk strings as
    ``bytes`` (``None`` for a null one), arrays as ``list`` (``None`` for a null one), nested as
    sent. Parsing resumes where it stopped: no byte is looked at twice, however the replies are
    split. Raises ``RespProtocolError`` for bytes that are not RESP2, a line over
    ``REPLY_LINE_BYTES_MAX``, or a bulk string or array announced larger than the bounds; the
    reader is unusable afterwards (close the connection).
    """

    def __init__(self, *, bulk_bytes_max: int, array_items_max: int,
                 error_factory: type[Exception] = RespErrorReply) -> None:
        self._bulk_bytes_max = bulk_bytes_max
        self._array_items_max = array_items_max
        self._error_factory = error_factory
        self._buffer = bytearray()
        #: Arrays being filled: [items so far, items still to come].
        self._arrays: list[list[object]] = []
        #: The length of the bulk string whose bytes are awaited (None: a line is awaited).
        self._bulk_length: int | None = None

    def feed(self, data: bytes) -> list[object]:
        """Take ``data``; the replies it completes, in order."""
        buffer = self._buffer
        buffer += data
        replies: list[object] = []
        position = 0
        end = len(buffer)
        while position < end:
            if self._bulk_length is not None:
                stop = position + self._bulk_length
                if stop + 2 > end:
                    break
                if buffer[stop:stop + 2] != b"\r\n":
                    raise RespProtocolError("a bulk string not followed by CRLF")
                value: object = bytes(buffer[position:stop])
                position = stop + 2
                self._bulk_length = None
            else:
                line_end = buffer.find(b"\r\n", position, position + REPLY_LINE_BYTES_MAX + 2)
                if line_end < 0:
                    if end - position > REPLY_LINE_BYTES_MAX:
                        raise RespProtocolError(f"a line of more than {REPLY_LINE_BYTES_MAX} bytes")
                    break
                line = bytes(buffer[position:line_end])
                position = line_end + 2
                token, rest = line[:1], line[1:]
                if token == b"$":
                    length = self._length(rest, self._bulk_bytes_max, "a bulk string")
                    if length >= 0:
                        self._bulk_length = length
                        continue
                    value = None
                elif token == b"*":
                    length = self._length(rest, self._array_items_max, "an array")
                    if length > 0:
                        self._arrays.append([[], length])
                        continue
                    value = [] if length == 0 else None
                elif token == b"+":
                    value = rest.decode("utf-8", "replace")
                elif token == b"-":
                    value = self._error_factory(rest.decode("utf-8", "replace"))
                elif token == b":":
                    value = self._length(rest, None, "an integer")
                else:
                    raise RespProtocolError(f"a line that is not RESP ({line[:40]!r})")
            self._complete(value, replies)
        del buffer[:position]
        return replies

    def _complete(self, value: object, replies: list[object]) -> None:
        """Put a finished value into the array being filled (closing arrays it completes) or out as a reply."""
        arrays = self._arrays
        while arrays:
            top = arrays[-1]
            items = top[0]
            assert isinstance(items, list) and isinstance(top[1], int)
            items.append(value)
            top[1] -= 1
            if top[1]:
                return
            arrays.pop()
            value = items
        replies.append(value)

    @staticmethod
    def _length(text: bytes, bound: int | None, what: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise RespProtocolError(f"{what} header that is not a number ({text[:40]!r})") from None
        if bound is not None and not -1 <= number <= bound:
            raise RespProtocolError(f"{what} of {number} (at most {bound} is read)")
        return number
