"""The consumer core handing out values only: the same records, in the same order, as ``fetch_completed``'s
messages, with the positions advanced the same way (markers, aborted transactions and gaps included)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.client.consumer import ConsumerConfig, ConsumerCore, FetchedValues, OffsetReset, decode_values_of
from mqbroker.errors import CorruptMessageError
from mqbroker.protocols.native.messages import (
    FetchAbortedTransaction,
    FetchPartitionResult,
    FetchResponse,
    FetchTopicResult,
)
from mqbroker.records import decoder
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.header import stamp
from mqbroker.records.readable import UnreadableBatch
from tests.poison import poison_batch

EVENTS_0 = ("events", 0)
EVENTS_1 = ("events", 1)


def _at(batch: bytes, offset: int) -> bytes:
    stamped = bytearray(batch)
    stamp(stamped, 0, offset, 0)
    return bytes(stamped)


def _data(offset: int, values: list[bytes | None], producer_id: int = -1, gap: int = 1) -> bytes:
    """A batch at ``offset`` of ``values`` ``gap`` offsets apart (a compacted batch's gaps)."""
    builder = BatchBuilder(base_offset=offset, producer_id=producer_id, producer_epoch=0,
                           base_sequence=0 if producer_id >= 0 else -1, is_transactional=producer_id >= 0)
    for index, value in enumerate(values):
        builder.append_at(index * gap, 1000, b"k%d" % index, value, [("h", b"v")])
    return builder.build()


def _marker(offset: int, producer_id: int, committed: bool) -> bytes:
    kind = ControlType.COMMIT if committed else ControlType.ABORT
    return _at(encode_control_batch(kind, producer_id, 0, 0, 0), offset)


def _core(positions: dict[tuple[str, int], int], on_unreadable=None) -> ConsumerCore:
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.EARLIEST), on_unreadable)
    core.assign(positions)
    for partition, offset in positions.items():
        core.seek(partition, offset)
    return core


def _reply(partition: int, records: bytes, aborted: list[tuple[int, int]] | None = None) -> FetchPartitionResult:
    return FetchPartitionResult(
        partition_index=partition, error_code=0, high_watermark=99, records=records,
        aborted_transactions=None if aborted is None else tuple(
            FetchAbortedTransaction(producer_id=producer_id, first_offset=first) for producer_id, first in aborted))


def _both_ways(positions: dict[tuple[str, int], int], replies: list[FetchPartitionResult], with_keys: bool = False,
               on_unreadable=None):
    """(messages, their positions after), (values, their positions after) from twin cores fed one reply."""
    response = FetchResponse(topics=(FetchTopicResult(name="events", partitions=tuple(replies)),))
    outcomes = []
    for values in (False, True):
        core = _core(positions, on_unreadable)
        (plan,) = core.fetch_plans(lambda topic, partition: 1)
        taken = core.fetch_completed_values(plan, response, with_keys) if values else core.fetch_completed(plan, response)
        outcomes.append((taken, {partition: core.position(partition) for partition in positions}, core))
    return outcomes


# A transactional log: a plain batch, an aborted transaction with its marker, a committed one, gaps.
READ_COMMITTED_LOG = b"".join([
    _data(0, [b"plain-0", b"plain-1"]),
    _data(2, [b"p1-aborted-2", b"p1-aborted-3"], producer_id=1),
    _data(4, [b"p2-committed-4"], producer_id=2),
    _marker(5, 1, committed=False),
    _data(6, [b"p1-next-6"], producer_id=1),
    _marker(7, 2, committed=True),
    _marker(8, 1, committed=True),
    _data(9, [b"compacted-9", None, b"compacted-13"], gap=2),
])


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("read_committed", [False, True])
def test_values_skip_markers_and_aborted_transactions_as_messages_do(
    read_committed: bool, compiled: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not compiled:  # the pure-Python fallback, as where the extension is not built
        monkeypatch.setattr(decoder, "decode_section_values", decoder.decode_section_values_python)
    aborted = [(1, 2)] if read_committed else None
    (messages, message_positions, _), (fetched, value_positions, _) = _both_ways(
        {EVENTS_0: 0}, [_reply(0, READ_COMMITTED_LOG, aborted)])
    (only,) = fetched
    assert only == FetchedValues("events", 0, 0, 14, [message.value for message in messages])
    assert value_positions == message_positions == {EVENTS_0: 14}
    assert (b"p1-aborted-2" in only.values) is not read_committed
    assert b"p2-committed-4" in only.values and b"p1-next-6" in only.values


@given(
    batches=st.lists(st.tuples(st.lists(st.none() | st.binary(max_size=20), min_size=1, max_size=5),
                               st.integers(min_value=1, max_value=3)), min_size=1, max_size=6),
    start=st.integers(min_value=0, max_value=40), cut=st.integers(min_value=0, max_value=60),
    with_keys=st.booleans(),
)
def test_values_and_positions_match_the_messages_of_any_fetch(
    batches: list[tuple[list[bytes | None], int]], start: int, cut: int, with_keys: bool,
) -> None:
    """Batches with gaps, a fetch from inside any of them, a reply cut short anywhere in its last batch."""
    data, offset = b"", 0
    for values, gap in batches:
        data += _data(offset, values, gap=gap)
        offset += (len(values) - 1) * gap + 1
    data = data[: max(0, len(data) - cut)]
    start = min(start, offset)
    (messages, message_positions, _), (fetched, value_positions, _) = _both_ways(
        {EVENTS_0: start, EVENTS_1: 0}, [_reply(0, data), _reply(1, _data(0, [b"other"]))], with_keys)
    assert value_positions == message_positions
    expected = {}
    for message in messages:
        expected.setdefault(message.partition, []).append(message)
    assert [(item.topic, item.partition) for item in fetched] == [("events", partition) for partition in expected]
    for item in fetched:
        rows = expected[item.partition]
        assert item.first_offset == rows[0].offset and item.next_offset == value_positions[("events", item.partition)]
        assert item.values == [(row.key, row.value) if with_keys else row.value for row in rows]


def test_a_poison_batch_is_held_or_passed_over_as_with_messages() -> None:
    poison = bytearray(poison_batch(records_count=2))
    stamp(poison, 0, 1, 0)
    fetched = _data(0, [b"a"]) + bytes(poison) + _data(3, [b"d"])
    (_, positions, _), (values, value_positions, core) = _both_ways({EVENTS_0: 0}, [_reply(0, fetched)])
    assert values == [] and value_positions == positions == {EVENTS_0: 0}
    with pytest.raises(CorruptMessageError):
        core.raise_failure()
    skipped: list[UnreadableBatch] = []
    (_, _, _), (values, value_positions, _) = _both_ways({EVENTS_0: 0}, [_reply(0, fetched)],
                                                         on_unreadable=skipped.append)
    assert values == [FetchedValues("events", 0, 0, 4, [b"a", b"d"])] and value_positions == {EVENTS_0: 4}
    assert [(batch.first_offset, batch.last_offset) for batch in skipped] == [(1, 2)] * 2


def test_values_that_never_reached_the_application_are_read_again() -> None:
    core = _core({EVENTS_0: 3, EVENTS_1: 0})
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    response = FetchResponse(topics=(FetchTopicResult(name="events", partitions=(
        _reply(0, _data(2, [b"x", b"y", b"z"])), _reply(1, _data(0, [b"w"])))),))
    fetched = core.fetch_completed_values(plan, response)
    assert [(item.first_offset, item.next_offset) for item in fetched] == [(3, 5), (0, 1)]
    core.unread_values(fetched)
    assert core.position(EVENTS_0) == 3 and core.position(EVENTS_1) == 0


@given(garbage=st.binary(max_size=300), with_keys=st.booleans())
def test_garbage_records_raise_only_the_typed_error(garbage: bytes, with_keys: bool) -> None:
    with contextlib.suppress(CorruptMessageError):
        decode_values_of("events", 0, garbage, 0, with_keys)
