"""Reply lines the Redis client refuses before txredisapi reads (or buffers) them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker import limits
from mqbroker.connectors.redis.client import reply_line_problem


@pytest.mark.parametrize("line", ["+OK", "-ERR unknown command", ":42", "$5", "$-1", "*2", "*-1", "*0", ""])
def test_redis_reply_lines_pass(line: str) -> None:
    assert reply_line_problem(line) is None


@pytest.mark.parametrize("line, problem", [
    ("HTTP/1.1 400 Bad Request", "not RESP"),
    ("$abc", "not a number"),
    (f"${limits.redis_reply_bulk_bytes_max + 1}", "a bulk string of"),
    (f"*{limits.redis_reply_array_items_max + 1}", "an array of"),
    ("$-2", "a bulk string of -2"),
])
def test_what_is_not_a_redis_reply_line_is_named(line: str, problem: str) -> None:
    assert problem in (reply_line_problem(line) or "")


@given(st.text(max_size=60))
def test_any_line_is_read_or_refused_never_an_exception(line: str) -> None:
    problem = reply_line_problem(line)
    assert problem is None or isinstance(problem, str)
