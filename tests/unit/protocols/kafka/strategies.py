"""Hypothesis strategies for any Kafka message in any version, derived from the field annotations."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Annotated, Any, Union

from hypothesis import strategies as st

from mqbroker.protocols.schema import WireVersions

_INTEGER_BITS = {"b": 8, "h": 16, "i": 32, "q": 64}


def _for_annotation(annotation: Any, version: int, flexible: bool, nullable_allowed: bool = True) -> st.SearchStrategy[Any]:
    """Values of one field annotation in one version, small enough to keep examples fast."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        (inner,) = [arg for arg in args if arg is not type(None)]
        values = _for_annotation(inner, version, flexible)
        return st.none() | values if nullable_allowed else values
    if typing.get_origin(annotation) is Annotated:
        marker = annotation.__metadata__[0]
        format_character = getattr(marker, "format", None)
        if format_character in _INTEGER_BITS:
            bits = _INTEGER_BITS[format_character]
            return st.integers(min_value=-(2 ** (bits - 1)), max_value=2 ** (bits - 1) - 1)
        if format_character == "H":
            return st.integers(0, 2**16 - 1)
        if format_character == "d":
            return st.floats(allow_nan=False)
        if format_character == "16s":
            return st.binary(min_size=16, max_size=16)
        return st.binary(max_size=64)  # records
    if typing.get_origin(annotation) is tuple:
        return st.lists(_for_annotation(args[0], version, flexible), max_size=2).map(tuple)
    if annotation is bool:
        return st.booleans()
    if annotation is str:
        return st.text(max_size=8)
    if annotation is bytes:
        return st.binary(max_size=16)
    assert dataclasses.is_dataclass(annotation), annotation
    return messages(annotation, version, flexible)


@functools.cache
def messages(cls: type, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    """Instances of a message dataclass as ``version`` carries them (absent fields keep their defaults)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {}
    for field in dataclasses.fields(cls):
        versions: WireVersions = field.metadata.get("wire", WireVersions())
        if not versions.present(version, flexible):
            continue
        nullable_allowed = versions.nullable_since is None or version >= versions.nullable_since
        fields[field.name] = st.deferred(
            lambda name=field.name, allowed=nullable_allowed: _for_annotation(hints[name], version, flexible, allowed))
    return st.builds(cls, **fields)
