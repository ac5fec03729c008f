"""Hypothesis strategies for AMQP values, methods and content properties."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

from hypothesis import strategies as st

from mqbroker.protocols.amqp.spec import BASIC_PROPERTIES, BasicProperties, Kind, Method

shortstrs = st.text(max_size=40).filter(lambda text: len(text.encode("utf-8", "surrogateescape")) <= 255)
timestamps = st.datetimes(
    min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(2200, 1, 1), timezones=st.just(datetime.timezone.utc)
).map(lambda moment: moment.replace(microsecond=0))
decimals = st.builds(
    lambda value, scale: decimal.Decimal(value).scaleb(-scale),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 20),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    decimals,
    st.text(max_size=20),
    st.binary(max_size=20),
    timestamps,
)
field_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(shortstrs, children, max_size=4)),
    max_leaves=10,
)
tables = st.dictionaries(shortstrs, field_values, max_size=6)

_BY_KIND: dict[Kind, st.SearchStrategy[Any]] = {
    Kind.OCTET: st.integers(0, 255),
    Kind.SHORT: st.integers(0, 2**16 - 1),
    Kind.LONG: st.integers(0, 2**32 - 1),
    Kind.LONGLONG: st.integers(0, 2**64 - 1),
    Kind.TIMESTAMP: st.integers(0, 2**64 - 1),
    Kind.SHORTSTR: shortstrs,
    Kind.LONGSTR: st.binary(max_size=40),
    Kind.BIT: st.booleans(),
    Kind.TABLE: tables,
}


def methods_of(method_class: type[Method]) -> st.SearchStrategy[Method]:
    """Any instance of ``method_class``."""
    return st.builds(method_class, **{argument.name: _BY_KIND[argument.kind] for argument in method_class.ARGUMENTS})


properties = st.builds(
    BasicProperties, **{argument.name: st.none() | _BY_KIND[argument.kind] for argument in BASIC_PROPERTIES}
)
