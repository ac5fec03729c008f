"""Hypothesis strategies for any native message type, derived from its field annotations."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Annotated, Any, Union

from hypothesis import strategies as st

_BITS = {"b": 8, "h": 16, "i": 32, "q": 64}


def _for_annotation(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of one field annotation, small enough to keep examples fast."""
    if typing.get_origin(annotation) is Annotated:
        marker = annotation.__metadata__[0]
        if hasattr(marker, "format"):
            bits = _BITS[marker.format]
            return st.integers(min_value=-(2 ** (bits - 1)), max_value=2 ** (bits - 1) - 1)
        return st.binary(max_size=64)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        (inner,) = [arg for arg in args if arg is not type(None)]
        return st.none() | _for_annotation(inner)
    if typing.get_origin(annotation) is tuple:
        return st.lists(_for_annotation(args[0]), max_size=3).map(tuple)
    if typing.get_origin(annotation) is dict:
        return st.dictionaries(_for_annotation(args[0]), _for_annotation(args[1]), max_size=3)
    if annotation is bool:
        return st.booleans()
    if annotation is str:
        return st.text(max_size=12)
    if annotation is bytes:
        return st.binary(max_size=32)
    assert dataclasses.is_dataclass(annotation), annotation
    return messages(annotation)


@functools.cache
def messages(cls: type) -> st.SearchStrategy[Any]:
    """Instances of a message dataclass with every field drawn."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {field.name: st.deferred(lambda name=field.name: _for_annotation(hints[name])) for field in dataclasses.fields(cls)}
    return st.builds(cls, **fields)
