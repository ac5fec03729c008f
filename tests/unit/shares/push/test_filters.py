"""Push filters: any text parses or raises ValueError, and a parsed filter judges any record (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.shares.push.filters import FILTER_LENGTH_MAX, parse_filter

record_headers = st.lists(st.tuples(st.sampled_from(["type", "region", "x"]), st.none() | st.binary(max_size=8)),
                          max_size=4)
fragments = st.sampled_from(['key', 'header.type', '!', '=', '!=', '^=', '"', '\\', '&&', ' ', '"paid"', 'paid',
                             'header.', 'key = "a\\"b"', '&', 'é'])


@settings(max_examples=500)
@given(text=st.one_of(st.text(max_size=80), st.lists(fragments, max_size=12).map("".join)),
       key=st.none() | st.binary(max_size=8), headers=record_headers)
def test_any_text_parses_or_raises_value_error_and_judges_any_record(text: str, key: bytes | None,
                                                                     headers: list) -> None:
    """The broker stores only filters that parse; those never fail on a record."""
    try:
        record_filter = parse_filter(text)
    except ValueError as error:
        assert str(error)
        return
    assert isinstance(record_filter.matches(key, headers), bool)


def test_clauses_must_all_hold() -> None:
    """``&&`` joins clauses that all hold; quotes protect ``&&`` and escapes."""
    record_filter = parse_filter('header.type = "a && b" && key ^= order- && !header.test')
    assert record_filter.matches(b"order-1", [("type", b"a && b")])
    assert not record_filter.matches(b"order-1", [("type", b"a && b"), ("test", None)])
    assert not record_filter.matches(b"refund-1", [("type", b"a && b")])


def test_long_filters_are_refused() -> None:
    """A stored filter is evaluated per record: its length is bounded."""
    try:
        parse_filter("key = a && " * FILTER_LENGTH_MAX)
    except ValueError as error:
        assert str(FILTER_LENGTH_MAX) in str(error)
    else:
        raise AssertionError("an unbounded filter parsed")
