"""The written-out codec (``schema_inline``) against the step-wise one: the same bytes, values and errors.

Every native and Kafka message in every non-flexible version is encoded, decoded, and decoded again
truncated and with bytes overwritten, by both codecs; they must agree on each outcome (the value and
where it ends, or the exception's type and message).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqbroker.protocols.kafka.codec import RequestHeader as KafkaRequestHeader
from mqbroker.protocols.kafka.codec import ResponseHeader as KafkaResponseHeader
from mqbroker.protocols.kafka.messages.apis import APIS as KAFKA_APIS
from mqbroker.protocols.native.codec import ErrorResponse, RequestHeader
from mqbroker.protocols.native.consumer_protocol import ConsumerAssignment, ConsumerSubscription
from mqbroker.protocols.native.messages import APIS as NATIVE_APIS
from mqbroker.protocols.schema import (
    Int8,
    Int32,
    Int64,
    Records,
    compile_message,
    decode_value,
    encode_into,
    message,
    wire,
)
from tests.unit.protocols.kafka import strategies as kafka_strategies
from tests.unit.protocols.native import strategies as native_strategies


@message
class _Inner:
    """A struct inside others."""

    id: Int32
    tags: tuple[str | None, ...]


@message
class _EveryKind:
    """The wire forms real messages use rarely or not at all."""

    maybe_inner: _Inner | None
    inner: _Inner
    numbers: tuple[Int64, ...] | None
    flags: tuple[bool, ...]
    nested: tuple[tuple[_Inner, ...] | None, ...]
    mapping: dict[str, str | None]
    blob: bytes | None
    records: Records | None
    note: str | None = wire(nullable_since=1)
    late: Int8 = wire(since=1, default=0)
    early: bytes = wire(until=0, default=b"")


def _native_cases() -> list[tuple[type, int]]:
    cases = [(RequestHeader, 0), (ErrorResponse, 0), (ConsumerSubscription, 0), (ConsumerAssignment, 0)]
    for api in NATIVE_APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            cases += [(api.request_type, version), (api.response_type, version)]
    return cases


def _kafka_cases() -> list[tuple[type, int]]:
    cases = [(KafkaRequestHeader, 0), (KafkaResponseHeader, 0)]
    for api in KAFKA_APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            if not api.flexible(version):
                cases += [(api.request_type, version), (api.response_type, version)]
    return cases


def _outcome(action: Any) -> tuple[str, Any]:
    """What ``action()`` returned, or the type and message of what it raised."""
    try:
        return "value", action()
    except Exception as error:  # noqa: BLE001 - compared, not handled
        return "error", (type(error), str(error))


def _encoded(cls: type, version: int, inline: bool, value: Any) -> tuple[str, Any]:
    def encode() -> bytes:
        parts: list[bytes | memoryview] = []
        encode_into(compile_message(cls, version, inline=inline), value, parts)
        return b"".join(parts)

    return _outcome(encode)


def _decoded(cls: type, version: int, inline: bool, data: bytes) -> tuple[str, Any]:
    codec = compile_message(cls, version, inline=inline)
    return _outcome(lambda: decode_value(codec, memoryview(data), 0, cls.__name__))


def _same_both_ways(cls: type, version: int, value: Any, damage: st.DataObject) -> None:
    """Both codecs encode ``value`` alike and decode its bytes, and the bytes damaged, alike."""
    step_wise = _encoded(cls, version, False, value)
    assert _encoded(cls, version, True, value) == step_wise
    if step_wise[0] == "error":  # a null the version does not allow yet
        return
    data: bytes = step_wise[1]
    assert _decoded(cls, version, True, data) == _decoded(cls, version, False, data)
    cut = damage.draw(st.integers(0, len(data)), label="cut")
    overwrite = damage.draw(st.binary(min_size=1, max_size=4), label="overwrite")
    at = damage.draw(st.integers(0, len(data)), label="at")
    for garbage in (data[:cut], data[:at] + overwrite + data[at + len(overwrite):]):
        assert _decoded(cls, version, True, garbage) == _decoded(cls, version, False, garbage)


def _for_every_example(cls: type, version: int, values: st.SearchStrategy[Any]) -> None:
    """``_same_both_ways`` under hypothesis (one search per message type and version)."""
    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def search(data: st.DataObject) -> None:
        _same_both_ways(cls, version, data.draw(values, label="value"), data)

    search()


@pytest.mark.parametrize(("cls", "version"), _native_cases(), ids=lambda case: getattr(case, "__name__", str(case)))
def test_native_messages_encode_and_decode_alike_written_out_and_step_wise(cls: type, version: int) -> None:
    _for_every_example(cls, version, native_strategies.messages(cls))


@pytest.mark.parametrize(("cls", "version"), _kafka_cases(), ids=lambda case: getattr(case, "__name__", str(case)))
def test_kafka_messages_encode_and_decode_alike_written_out_and_step_wise(cls: type, version: int) -> None:
    _for_every_example(cls, version, kafka_strategies.messages(cls, version, False))


@pytest.mark.parametrize("version", [0, 1])
def test_every_wire_form_encodes_and_decodes_alike_written_out_and_step_wise(version: int) -> None:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def search(data: st.DataObject) -> None:
        _same_both_ways(_EveryKind, version, data.draw(native_strategies.messages(_EveryKind), label="value"), data)

    search()


@settings(max_examples=300, deadline=None)
@given(version=st.integers(0, 1), data=st.binary(max_size=80))
def test_garbage_decodes_alike_written_out_and_step_wise(version: int, data: bytes) -> None:
    assert _decoded(_EveryKind, version, True, data) == _decoded(_EveryKind, version, False, data)


@pytest.mark.parametrize("value", [
    _EveryKind(maybe_inner=None, inner=None, numbers=None, flags=(), nested=(), mapping={}, blob=None,  # type: ignore[arg-type]
               records=None, note="n"),
    _EveryKind(maybe_inner=None, inner=_Inner(id=1, tags=()), numbers=None, flags=(), nested=(), mapping={},
               blob=None, records=None, note=None),
    _EveryKind(maybe_inner=None, inner=_Inner(id=2**40, tags=()), numbers=(1,), flags=(), nested=(None,), mapping={},
               blob=None, records=None, note="n"),
])
def test_values_the_wire_cannot_carry_fail_alike_written_out_and_step_wise(value: _EveryKind) -> None:
    assert _encoded(_EveryKind, 0, True, value) == _encoded(_EveryKind, 0, False, value)
    assert _encoded(_EveryKind, 0, True, value)[0] == "error"


def test_a_produce_request_is_decoded_in_one_python_call() -> None:
    """The point of writing it out: no call per field, array or struct inside (the dataclasses' own
    ``__init__`` aside)."""
    from mqbroker.protocols.native.messages import ProducePartition, ProduceRequest, ProduceTopic

    request = ProduceRequest(acks=-1, timeout_ms=1000, topics=(
        ProduceTopic(name="t", partitions=(ProducePartition(partition_index=0, records=b"x" * 70),)),))
    parts: list[bytes | memoryview] = []
    codec = compile_message(ProduceRequest, 1)
    encode_into(codec, request, parts)
    calls: list[str] = []

    def count(frame: Any, event: str, _: Any) -> None:
        if event == "call" and frame.f_code.co_name != "__init__":
            calls.append(frame.f_code.co_name)

    import sys

    sys.setprofile(count)
    try:
        decoded, _ = codec.decode(memoryview(b"".join(parts)), 0)
    finally:
        sys.setprofile(None)
    assert decoded == request
    assert calls == ["decode"]
