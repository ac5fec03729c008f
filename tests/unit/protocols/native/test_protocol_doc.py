"""docs/protocol.md shows every API's layout exactly as the message types define it.

The per-API tables are generated from the dataclasses; set MQBROKER_REWRITE=1 to regenerate
them after changing a message.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import types
import typing
from typing import Annotated, Any, Union

from mqbroker.errors import ErrorCode
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native.messages import APIS

DOCUMENT = pathlib.Path(__file__).resolve().parents[4] / "docs" / "protocol.md"
BEGIN = "<!-- BEGIN GENERATED: tests/unit/protocols/native/test_protocol_doc.py -->"
END = "<!-- END GENERATED -->"
_FIXED = {"b": "int8", "h": "int16", "i": "int32", "q": "int64"}


def _type_name(annotation: Any) -> str:
    """How a field annotation reads in the tables."""
    if typing.get_origin(annotation) is Annotated:
        marker = annotation.__metadata__[0]
        return _FIXED[marker.format] if hasattr(marker, "format") else "records"
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _type_name(inner) + "?"
    if typing.get_origin(annotation) is tuple:
        return "[" + _type_name(args[0]) + "]"
    if typing.get_origin(annotation) is dict:
        return "map<" + _type_name(args[0]) + ", " + _type_name(args[1]) + ">"
    if dataclasses.is_dataclass(annotation):
        return annotation.__name__
    return {bool: "bool", str: "string", bytes: "bytes"}[annotation]


def _nested_type(annotation: Any) -> type | None:
    """The struct inside an array (or nullable array) annotation, if any."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is tuple and dataclasses.is_dataclass(typing.get_args(candidate)[0]):
            return typing.get_args(candidate)[0]
    return None


def _default(field: dataclasses.Field[Any]) -> str:
    """The default a sender may leave out, as Python writes it."""
    if field.default is not dataclasses.MISSING:
        value = field.default
        return repr(int(value)) if isinstance(value, int) and not isinstance(value, bool) else repr(value)
    if field.default_factory is not dataclasses.MISSING:
        return repr(field.default_factory())
    return ""


def _rows(cls: type, prefix: str) -> list[str]:
    """Table rows for ``cls``'s fields, nested structs flattened with ``outer[].inner`` names."""
    hints = typing.get_type_hints(cls, include_extras=True)
    rows = []
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        rows.append(f"| `{prefix}{field.name}` | {_type_name(annotation)} | {_default(field)} |")
        nested = _nested_type(annotation)
        if nested is not None:
            rows.extend(_rows(nested, f"{prefix}{field.name}[]."))
    return rows


def _table(cls: type) -> list[str]:
    """A markdown table of one message, headed by its docstring."""
    lines = [f"`{cls.__name__}`: {cls.__doc__}", ""]
    rows = _rows(cls, "")
    if not rows:
        return lines + ["(no fields: the body is empty)", ""]
    return lines + ["| field | type | default |", "|---|---|---|", *rows, ""]


def render() -> str:
    """The generated part of docs/protocol.md."""
    lines = [BEGIN, "", "## 9. API reference (generated from `messages.py`)", ""]
    for key, api in sorted(APIS.items()):
        title = "".join(word.capitalize() for word in key.name.split("_"))
        lines += [f"### {title} — key {int(key)}, versions {api.min_version}–{api.max_version}", ""]
        lines += [f"**Request, versions {api.min_version}–{api.max_version}**", ""] + _table(api.request_type)
        lines += [f"**Response, versions {api.min_version}–{api.max_version}**", ""] + _table(api.response_type)
    lines += ["## 10. Consumer protocol formats (generated)", ""]
    lines += ["Each is prefixed by an int16 version, currently "
              f"{consumer_protocol.CONSUMER_PROTOCOL_VERSION}.", ""]
    lines += _table(consumer_protocol.ConsumerSubscription) + _table(consumer_protocol.ConsumerAssignment)
    lines += _table(consumer_protocol.TopicPartitions)
    lines += ["## 11. Error codes (generated from `mqbroker.errors.ErrorCode`)", "",
              "| code | name |", "|---|---|"]
    lines += [f"| {int(code)} | `{code.name}` |" for code in sorted(ErrorCode)]
    return "\n".join(lines + ["", END])


def test_protocol_document_matches_the_message_types() -> None:
    """Changing a message without regenerating the document fails here."""
    text = DOCUMENT.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    expected = head + render() + tail
    if os.environ.get("MQBROKER_REWRITE") == "1":
        DOCUMENT.write_text(expected, encoding="utf-8")
        return
    assert text == expected, "docs/protocol.md is stale; run with MQBROKER_REWRITE=1 to regenerate it"
