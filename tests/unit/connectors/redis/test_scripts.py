"""The sink scripts' per-record arguments, as the Lua scripts read them."""

from __future__ import annotations

from mqbroker.connectors.redis.resp import encode_arguments, encode_command
from mqbroker.connectors.redis.scripts import keys_arguments, position_field, pubsub_arguments, stream_arguments


def test_stream_arguments_flag_what_follows() -> None:
    records = [(5, b"k", b"v", (("h", b"1"), ("n", None)), 100), (6, None, None, (), 101), (7, None, b"w", (), 102),
               (8, b"k", b"", (), 103)]
    assert stream_arguments(records, with_headers=True) == encode_arguments(
        [5, 100, 7, b"k", b"v", 2, "h", b"1", "n", b"", 6, 101, 0, 7, 102, 2, b"w", 8, 103, 3, b"k", b""])
    assert stream_arguments(records, with_headers=False) == encode_arguments(
        [5, 100, 3, b"k", b"v", 6, 101, 0, 7, 102, 2, b"w", 8, 103, 3, b"k", b""])


def test_encoded_arguments_are_spliced_into_a_command() -> None:
    spliced = encode_command([b"EVALSHA", encode_arguments([1, b"x"]), "y"])
    assert spliced == encode_command([b"EVALSHA", 1, b"x", "y"]) == b"*4\r\n$7\r\nEVALSHA\r\n$1\r\n1\r\n$1\r\nx\r\n$1\r\ny\r\n"


def test_keys_arguments_leave_out_keyless_records_and_mark_tombstones() -> None:
    arguments, keyless = keys_arguments([(1, b"a", b"x", (), 0), (2, None, b"y", (), 0), (3, b"a", None, (), 0)])
    assert arguments == [1, 2, b"a", b"x", 3, 0, b"a"] and keyless == 1


def test_pubsub_arguments_send_an_empty_message_for_a_tombstone() -> None:
    assert pubsub_arguments([(1, b"a", b"x", (), 0), (2, b"a", None, (), 0)]) == [1, b"x", 2, b""]


def test_the_position_field_names_topic_and_partition() -> None:
    assert position_field("a.b", 3) == "a.b/3"


def test_commands_are_one_resp_array_of_bulk_strings() -> None:
    assert encode_command([b"SET", "ké", 12, 0.5]) == b"*4\r\n$3\r\nSET\r\n$3\r\nk\xc3\xa9\r\n$2\r\n12\r\n$3\r\n0.5\r\n"
