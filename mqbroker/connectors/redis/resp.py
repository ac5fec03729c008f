"""Redis commands in RESP, encoded in one pass: the sink's scripts carry thousands of arguments. Pure."""

from __future__ import annotations

from collections.abc import Sequence

#: What a command argument may be: bytes as they are, text as UTF-8, numbers in decimal.
Argument = bytes | str | int | float


def encode_command(arguments: Sequence[Argument]) -> bytes:
    """``arguments`` as one RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(arguments)]
    append = parts.append
    for argument in arguments:
        if isinstance(argument, str):
            argument = argument.encode("utf-8")
        elif isinstance(argument, int):
            argument = b"%d" % argument
        elif isinstance(argument, float):
            argument = repr(argument).encode("ascii")
        append(b"$%d\r\n%b\r\n" % (len(argument), argument))
    return b"".join(parts)
