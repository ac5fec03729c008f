"""The Kafka codec: every served API and version round-trips, agrees byte for byte with an independent
implementation (kafka-python's, also built from Kafka's specifications), and garbage ends in the typed error."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import struct
from typing import Any

import kafka.protocol
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqbroker.protocols.exceptions import ProtocolError, UnknownApiKeyError, UnsupportedVersionError
from mqbroker.protocols.kafka import codec
from mqbroker.protocols.kafka.messages.apis import APIS, ApiKey
from mqbroker.protocols.kafka.messages.cluster import ApiVersionsRequest, MetadataRequest
from mqbroker.protocols.schema import compile_message, encode_into
from tests.unit.protocols.kafka.strategies import messages

#: Every (API, version) mqbroker advertises.
SERVED = [(key, version) for key, api in sorted(APIS.items()) for version in range(api.min_version, api.max_version + 1)]
_IDS = [f"{key.name}-v{version}" for key, version in SERVED]


def _kafka_python_classes() -> dict[tuple[int, bool], type]:
    """kafka-python's message classes by (API key, is request)."""
    found: dict[tuple[int, bool], type] = {}
    for module in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" in module.name:
            continue
        for name, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if getattr(cls, "_valid_versions", None) and name.endswith(("Request", "Response")) and hasattr(cls, "API_KEY"):
                found[(cls.API_KEY, name.endswith("Request"))] = cls
    return found


KAFKA_PYTHON = _kafka_python_classes()
#: Messages kafka-python 3 cannot re-encode on its own (its DeleteTopicsRequest lacks a header attribute).
KAFKA_PYTHON_CANNOT_ENCODE = {(ApiKey.DELETE_TOPICS, True)}


def _body(value: Any, version: int, flexible: bool) -> bytes:
    parts: list[bytes | memoryview] = []
    encode_into(compile_message(type(value), version, flexible), value, parts)
    return b"".join(parts)


def _request_frame_body(key: ApiKey, version: int, request: Any, correlation_id: int = 7) -> bytes:
    return codec.encode_request(key, version, correlation_id, "tester", request)[4:]


_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


def _for_every_example(check: Any, key: ApiKey, version: int, examples: int) -> None:
    """Run ``check(key, version, data)`` under hypothesis (one search per API and version)."""
    @settings(max_examples=examples, suppress_health_check=_SLOW, deadline=None)
    @given(data=st.data())
    def search(data: st.DataObject) -> None:
        check(key, version, data)

    search()


@pytest.mark.parametrize(("key", "version"), SERVED, ids=_IDS)
def test_every_request_and_response_round_trips(key: ApiKey, version: int) -> None:
    _for_every_example(_round_trip, key, version, 12)


def _round_trip(key: ApiKey, version: int, data: st.DataObject) -> None:
    api = APIS[key]
    request = data.draw(messages(api.request_type, version, api.flexible(version)))
    header, decoded = codec.decode_request(_request_frame_body(key, version, request))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (key, version, 7, "tester")
    assert decoded == request
    response = data.draw(messages(api.response_type, version, api.flexible(version)))
    frame = codec.encode_response(header, response)
    assert codec.decode_response(key, version, frame[4:]) == (7, response)


@pytest.mark.parametrize(("key", "version"), SERVED, ids=_IDS)
def test_kafka_python_reads_and_writes_the_same_bytes(key: ApiKey, version: int) -> None:
    """An independent reading of the specification: what we write, kafka-python decodes and re-encodes identically."""
    _for_every_example(_agree_with_kafka_python, key, version, 10)


def _agree_with_kafka_python(key: ApiKey, version: int, data: st.DataObject) -> None:
    api = APIS[key]
    for message_type, is_request in ((api.request_type, True), (api.response_type, False)):
        if (key, is_request) in KAFKA_PYTHON_CANNOT_ENCODE:
            continue
        value = data.draw(messages(message_type, version, api.flexible(version)))
        if key == ApiKey.API_VERSIONS and not is_request:  # kafka-python reads failed ones as version 0 (KIP-511)
            value = dataclasses.replace(value, error_code=0)
        body = _body(value, version, api.flexible(version))
        theirs = KAFKA_PYTHON[(int(key), is_request)][version].decode(body)
        assert bytes(theirs.encode()) == body, (message_type.__name__, theirs)
        _assert_same_fields(value, theirs.to_dict())


def _assert_same_fields(ours: Any, theirs: Any, path: str = "") -> None:
    """Our decoded value and kafka-python's dict agree field by field (their names are snake_case too)."""
    if dataclasses.is_dataclass(ours):
        for field in dataclasses.fields(ours):
            if field.name in theirs:
                _assert_same_fields(getattr(ours, field.name), theirs[field.name], f"{path}.{field.name}")
        return
    if isinstance(ours, tuple):
        assert len(ours) == len(theirs), path
        for index, (mine, other) in enumerate(zip(ours, theirs)):
            _assert_same_fields(mine, other, f"{path}[{index}]")
        return
    if isinstance(ours, (bytes, memoryview)) and not isinstance(theirs, (bytes, bytearray, memoryview)):
        return  # kafka-python parses records and uuids into objects; the byte comparison covers them
    if isinstance(ours, int) and (isinstance(theirs, (list, set, frozenset)) or (theirs is None and ours == -(2**31))):
        return  # kafka-python expands authorized-operation bit fields (None: not requested); the bytes cover them
    if isinstance(ours, (bytes, memoryview)):
        assert bytes(ours) == bytes(theirs), path
        return
    assert ours == theirs, path


# -- the headers and the ApiVersions fallback ------------------------------------------------------


def test_flexible_requests_carry_a_tagged_header_and_responses_a_tagged_header_except_api_versions() -> None:
    flexible = _request_frame_body(ApiKey.METADATA, 9, MetadataRequest(topics=None))
    rigid = _request_frame_body(ApiKey.METADATA, 8, MetadataRequest(topics=None))
    # api key, version, correlation id, client id "tester"; then header v2's (empty) tagged-field section
    assert flexible[:2] == rigid[:2] and flexible[4:16] == rigid[4:16] and flexible[16:17] == b"\x00"
    header, _ = codec.decode_request(_request_frame_body(ApiKey.API_VERSIONS, 3, ApiVersionsRequest()))
    frame = codec.encode_response(header, codec.api_versions_response())
    assert struct.unpack_from(">ihi", frame, 4)[:2] == (7, 0)  # header v0: correlation id, then the error code


def test_an_api_versions_request_of_an_unknown_version_gets_a_version_zero_answer_with_the_ranges() -> None:
    frame = codec.encode_unsupported_api_versions(12)
    correlation_id, answer = codec.decode_response(ApiKey.API_VERSIONS, 0, frame[4:])
    assert correlation_id == 12 and answer.error_code == 35
    assert {entry.api_key for entry in answer.api_keys} == {int(key) for key in APIS}


def test_unknown_apis_and_versions_are_refused_with_the_header() -> None:
    with pytest.raises(UnknownApiKeyError) as unknown:
        codec.decode_request(struct.pack(">hhih", 57, 0, 5, -1))  # UpdateFeatures: not served
    assert unknown.value.header.correlation_id == 5
    with pytest.raises(UnsupportedVersionError) as unsupported:
        codec.decode_request(struct.pack(">hhih", 1, 3, 6, -1))  # Fetch v3: below the served range
    assert unsupported.value.header.api_key == ApiKey.FETCH


# -- garbage in: only the typed protocol error comes out --------------------------------------------


@given(body=st.binary(max_size=200))
def test_garbage_request_frames_raise_only_the_protocol_error(body: bytes) -> None:
    try:
        codec.decode_request(body)
    except ProtocolError:
        pass  # the typed refusal is the expected outcome for most garbage


@pytest.mark.parametrize(("key", "version"), SERVED, ids=_IDS)
def test_garbage_after_a_valid_header_raises_only_the_protocol_error(key: ApiKey, version: int) -> None:
    """Every API's and version's body decoder is fed garbage, behind a header that gets it there."""
    _for_every_example(_feed_garbage, key, version, 25)


def _feed_garbage(key: ApiKey, version: int, data: st.DataObject) -> None:
    body = data.draw(st.binary(max_size=160))
    header = struct.pack(">hhih", key, version, 9, 1) + b"c" + (b"\x00" if APIS[key].flexible(version) else b"")
    try:
        codec.decode_request(header + body)
    except ProtocolError as error:
        assert error.header is not None and error.header.correlation_id == 9
    try:
        codec.decode_response(key, version, struct.pack(">i", 9) + body)
    except ProtocolError:
        pass


@pytest.mark.parametrize(("key", "version"), SERVED, ids=_IDS)
def test_mutated_valid_requests_raise_only_the_protocol_error(key: ApiKey, version: int) -> None:
    """Flipping bytes of real frames reaches deep into the decoders without escaping them."""
    _for_every_example(_mutate, key, version, 12)


def _mutate(key: ApiKey, version: int, data: st.DataObject) -> None:
    api = APIS[key]
    body = bytearray(_request_frame_body(key, version, data.draw(messages(api.request_type, version, api.flexible(version)))))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.integers(0, 255))
    try:
        codec.decode_request(bytes(body[:data.draw(st.integers(0, len(body)))]))
    except ProtocolError:
        pass
