"""Which records a push subscription delivers: a filter over record keys and headers, pure.

A filter is clauses joined by ``&&``, all of which must hold (an empty filter matches everything)::

    key = "order-1"          the key is exactly this (UTF-8)      key != "x"     key ^= "order-"  (starts with)
    header.type = "paid"     some header ``type`` has this value  header.type != "x"   header.type ^= "pa"
    header.type              a header ``type`` is present         !header.type   it is absent

Values are double-quoted (``\\"`` and ``\\\\`` escape) or bare words without spaces. Records that do
not match are acknowledged without being pushed, as Pub/Sub does with filtered messages.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Sequence

#: Longest filter text accepted (it is stored with the group and evaluated per record).
FILTER_LENGTH_MAX = 1024

_CLAUSE = re.compile(
    r'\s*(?P<negated>!)?\s*(?P<field>key|header\.[^\s=!^&]+)\s*'
    r'(?:(?P<op>=|!=|\^=)\s*(?P<value>"(?:[^"\\]|\\.)*"|[^\s"&]+))?\s*'
)


class Operator(enum.Enum):
    """How a clause compares."""

    EQUALS = "="
    NOT_EQUALS = "!="
    STARTS_WITH = "^="
    PRESENT = "present"
    ABSENT = "absent"


@dataclasses.dataclass(frozen=True, slots=True)
class Clause:
    """One condition on the key (``header`` None) or on a header."""

    header: str | None
    operator: Operator
    value: bytes = b""

    def holds(self, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> bool:
        """Whether a record with this key and these headers satisfies the clause."""
        if self.header is None:
            values: list[bytes | None] = [key] if key is not None else []
        else:
            values = [value for name, value in headers if name == self.header]
        if self.operator is Operator.PRESENT:
            return bool(values)
        if self.operator is Operator.ABSENT:
            return not values
        if self.operator is Operator.NOT_EQUALS:
            return all(value != self.value for value in values)
        if self.operator is Operator.EQUALS:
            return any(value == self.value for value in values)
        return any(value is not None and value.startswith(self.value) for value in values)


@dataclasses.dataclass(frozen=True, slots=True)
class RecordFilter:
    """All clauses of a filter."""

    clauses: tuple[Clause, ...] = ()

    def matches(self, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> bool:
        """Whether a record passes the filter."""
        return all(clause.holds(key, headers) for clause in self.clauses)


def _unquote(text: str) -> str:
    if text.startswith('"'):
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def parse_filter(text: str) -> RecordFilter:
    """Parse a filter; ``ValueError`` says what is wrong and where."""
    if len(text) > FILTER_LENGTH_MAX:
        raise ValueError(f"a filter has at most {FILTER_LENGTH_MAX} characters, this one {len(text)}")
    if not text.strip():
        return RecordFilter()
    clauses = []
    for part in _split_clauses(text):
        match = _CLAUSE.fullmatch(part)
        if match is None:
            raise ValueError(f"cannot read clause {part.strip()!r}: write key = \"v\", header.NAME ^= \"p\", "
                             "header.NAME or !header.NAME")
        field, negated, op, value = match["field"], match["negated"], match["op"], match["value"]
        header = None if field == "key" else field[len("header."):]
        if op is None:
            operator = Operator.ABSENT if negated else Operator.PRESENT
            clauses.append(Clause(header, operator))
            continue
        if negated:
            raise ValueError(f"clause {part.strip()!r}: '!' only negates presence (use != to compare)")
        clauses.append(Clause(header, Operator(op), _unquote(value).encode("utf-8")))
    return RecordFilter(tuple(clauses))


def _split_clauses(text: str) -> list[str]:
    """Split at ``&&`` outside quotes."""
    parts, current, quoted, index = [], [], False, 0
    while index < len(text):
        char = text[index]
        if quoted and char == "\\" and index + 1 < len(text):
            current.append(text[index : index + 2])
            index += 2
            continue
        if char == '"':
            quoted = not quoted
        if not quoted and text.startswith("&&", index):
            parts.append("".join(current))
            current = []
            index += 2
            continue
        current.append(char)
        index += 1
    if quoted:
        raise ValueError("a quoted value is not closed")
    parts.append("".join(current))
    return parts
