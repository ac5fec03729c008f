"""The native codec: every message round-trips between a client and a server connection in
memory, and every kind of bad input ends in the typed protocol error with the right code."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.errors import ErrorCode, LeaderNotAvailableError, NotCoordinatorError
from mqbroker.protocols.native import codec
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.protocols.native.connection import (
    ClientConnection,
    ConnectionFailed,
    ConnectionState,
    RequestReceived,
    RequestRejected,
    ResponseReceived,
    ServerConnection,
)
from mqbroker.protocols.exceptions import (
    FrameTooLargeError,
    LocalProtocolError,
    MalformedMessageError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from mqbroker.protocols.native.messages import (
    APIS,
    ApiKey,
    ApiVersionRange,
    ApiVersionsResponse,
    FetchPartitionResult,
    FetchResponse,
    FetchTopicResult,
    MetadataRequest,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)
from tests.unit.protocols.native.strategies import messages

ALL_APIS = sorted(APIS)


def _produce(acks: int = 1, records: bytes = b"batch") -> ProduceRequest:
    """A one-partition produce request."""
    partition = ProducePartition(partition_index=0, records=records)
    return ProduceRequest(acks=acks, timeout_ms=1000, topics=(ProduceTopic(name="events", partitions=(partition,)),))


def _raw_request(api_key: int, version: int, correlation_id: int, body: bytes = b"", client_id: bytes = b"c") -> bytes:
    """A request frame body built by hand, for keys and versions the encoder refuses."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + body


def _exchange(request: object, response: object) -> tuple[object, object]:
    """Send ``request`` client -> server and answer ``response`` server -> client."""
    client, server = ClientConnection("tester"), ServerConnection()
    correlation_id, data = client.send_request(request)
    (received,) = server.receive_data(data)
    assert isinstance(received, RequestReceived)
    assert received.header.correlation_id == correlation_id
    (answered,) = client.receive_data(server.reply(received.header, response))
    assert isinstance(answered, ResponseReceived) and answered.correlation_id == correlation_id
    assert client.inflight_correlation_ids == () and server.inflight_requests == 0
    return received.request, answered.response


# pytest-twisted cannot run a parametrized @given test, so each example covers every API.
@settings(max_examples=40)
@given(data=st.data())
def test_every_api_round_trips_between_client_and_server(data: st.DataObject) -> None:
    """What the client sends the server receives, and the server's answer reaches the client intact."""
    for api_key in ALL_APIS:
        request = data.draw(messages(APIS[api_key].request_type).filter(codec.expects_response))
        response = data.draw(messages(APIS[api_key].response_type))
        received_request, received_response = _exchange(request, response)
        assert received_request == request
        assert received_response == response


@settings(max_examples=5)
@given(data=st.data())
def test_an_error_response_decodes_for_every_api(data: st.DataObject) -> None:
    """A request failed as a whole comes back as ErrorResponse whatever its API."""
    error = NotCoordinatorError("group 'g' is coordinated by broker 2")
    for api_key in ALL_APIS:
        request = data.draw(messages(APIS[api_key].request_type).filter(codec.expects_response))
        _, response = _exchange(request, codec.error_response(error))
        assert response == ErrorResponse(error_code=ErrorCode.NOT_COORDINATOR, error_message=error.message)


def test_responses_arriving_out_of_order_are_matched_by_correlation_id() -> None:
    """A slow fetch does not hold up a later metadata request."""
    client, server = ClientConnection("tester"), ServerConnection()
    first_id, first = client.send_request(MetadataRequest(topics=("a",)))
    second_id, second = client.send_request(_produce())
    first_event, second_event = server.receive_data(first + second)
    produce_answer = server.reply_error(second_event.header, LeaderNotAvailableError("electing"))
    metadata_answer = server.reply_error(first_event.header, LeaderNotAvailableError("electing"))
    events = client.receive_data(produce_answer + metadata_answer)
    assert [(event.correlation_id, event.api_key) for event in events] == [
        (second_id, ApiKey.PRODUCE),
        (first_id, ApiKey.METADATA),
    ]


def test_produce_without_acks_expects_no_response() -> None:
    """acks=0 is fire and forget on both sides."""
    client, server = ClientConnection("tester"), ServerConnection()
    _, data = client.send_request(_produce(acks=0))
    (event,) = server.receive_data(data)
    assert isinstance(event, RequestReceived) and event.request.acks == 0
    assert client.inflight_correlation_ids == () and server.inflight_requests == 0


def test_produce_records_are_not_copied_when_decoded() -> None:
    """The broker gets a view of the frame, not a fresh copy of a megabyte of records."""
    records = bytes(range(256)) * 4096
    header, request = codec.decode_request(codec.encode_request(ApiKey.PRODUCE, 0, 9, "c", _produce(records=records))[4:])
    decoded = request.topics[0].partitions[0].records
    assert isinstance(decoded, memoryview) and decoded.readonly and decoded == records
    assert header.correlation_id == 9


def test_fetch_response_carries_records_verbatim() -> None:
    """Record batches travel as opaque bytes in both directions."""
    records = b"\x00" * 61 + b"not parsed by the codec"
    partition = FetchPartitionResult(partition_index=3, high_watermark=10, records=records)
    response = FetchResponse(topics=(FetchTopicResult(name="t", partitions=(partition,)),))
    frame = codec.encode_response(5, ApiKey.FETCH, 0, response)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    correlation_id, decoded = codec.decode_response(ApiKey.FETCH, 0, frame[4:])
    assert correlation_id == 5 and bytes(decoded.topics[0].partitions[0].records) == records


def test_unknown_api_key_is_rejected_with_its_correlation_id_and_the_connection_stays_open() -> None:
    """The broker answers UNKNOWN_API_KEY and keeps serving the connection."""
    server = ServerConnection()
    body = _raw_request(api_key=999, version=0, correlation_id=41)
    (event,) = server.receive_data(struct.pack(">i", len(body)) + body)
    assert isinstance(event, RequestRejected) and isinstance(event.error, UnknownApiKeyError)
    assert event.error.code == ErrorCode.UNKNOWN_API_KEY and event.header.correlation_id == 41
    answer = server.reply_error(event.header, event.error)
    assert codec.decode_response(ApiKey.METADATA, 0, answer[4:]) == (
        41, ErrorResponse(error_code=ErrorCode.UNKNOWN_API_KEY, error_message=event.error.message))
    _, data = ClientConnection("tester").send_request(MetadataRequest(topics=None))
    assert server.state is ConnectionState.OPEN
    assert isinstance(server.receive_data(data)[0], RequestReceived)


def test_unsupported_version_is_rejected_naming_the_supported_range() -> None:
    """A version outside the API's range is answered, not decoded."""
    with pytest.raises(UnsupportedVersionError) as caught:
        codec.decode_request(_raw_request(api_key=ApiKey.FETCH, version=7, correlation_id=3, body=b"junk"))
    assert caught.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert caught.value.header.api_key is ApiKey.FETCH and caught.value.header.correlation_id == 3
    assert "versions 0 to 1" in caught.value.message


def test_truncated_request_is_malformed_and_keeps_its_header() -> None:
    """A body cut short is MALFORMED_REQUEST, answerable with the right correlation id."""
    body = codec.encode_request(ApiKey.PRODUCE, 0, 77, "c", _produce())[4:]
    with pytest.raises(MalformedMessageError) as caught:
        codec.decode_request(body[:-3])
    assert caught.value.code == ErrorCode.MALFORMED_REQUEST and caught.value.header.correlation_id == 77


def test_trailing_bytes_after_a_request_are_malformed() -> None:
    """Bytes after the last field mean sender and receiver disagree on the layout."""
    body = codec.encode_request(ApiKey.METADATA, 0, 1, "c", MetadataRequest(topics=None))[4:]
    with pytest.raises(MalformedMessageError, match="trailing"):
        codec.decode_request(body + b"\x00")


def test_malformed_request_fails_the_server_connection_after_earlier_requests() -> None:
    """Requests before the bad frame still arrive; the failure is last; later bytes are ignored."""
    server = ServerConnection()
    _, good = ClientConnection("tester").send_request(MetadataRequest(topics=None))
    bad = _raw_request(api_key=ApiKey.METADATA, version=0, correlation_id=8, body=b"\x00\x00")
    events = server.receive_data(good + struct.pack(">i", len(bad)) + bad)
    assert isinstance(events[0], RequestReceived) and isinstance(events[1], ConnectionFailed)
    assert events[1].error.code == ErrorCode.MALFORMED_REQUEST and events[1].error.header.correlation_id == 8
    assert server.state is ConnectionState.FAILED and server.receive_data(good) == []
    assert codec.peek_correlation_id(server.reply_error(events[1].error.header, events[1].error)[4:]) == 8


def test_oversized_frame_fails_the_connection_before_its_body_arrives() -> None:
    """A frame longer than the bound is refused from its length alone."""
    server = ServerConnection(frame_bytes_max=1024)
    (event,) = server.receive_data(struct.pack(">i", 1025))
    assert isinstance(event, ConnectionFailed) and isinstance(event.error, FrameTooLargeError)
    assert event.error.code == ErrorCode.FRAME_TOO_LARGE and event.error.header is None
    assert server.state is ConnectionState.FAILED


def test_client_fails_on_a_response_nobody_asked_for() -> None:
    """A correlation id that is not in flight means the stream cannot be trusted."""
    client = ClientConnection("tester")
    (event,) = client.receive_data(codec.encode_response(12, ApiKey.METADATA, 0, ErrorResponse(error_code=5)))
    assert isinstance(event, ConnectionFailed) and "not in flight" in event.error.message
    with pytest.raises(LocalProtocolError):
        client.send_request(MetadataRequest(topics=None))


def test_client_bounds_requests_in_flight() -> None:
    """The client refuses to queue unbounded unanswered requests."""
    client = ClientConnection("tester", inflight_requests_max=2)
    client.send_request(MetadataRequest(topics=None))
    client.send_request(MetadataRequest(topics=None))
    with pytest.raises(LocalProtocolError, match="in flight"):
        client.send_request(MetadataRequest(topics=None))


def test_client_drops_apis_the_broker_does_not_support() -> None:
    """After ApiVersions the client sends only what both sides speak."""
    client = ClientConnection("tester")
    broker = ApiVersionsResponse(api_keys=(ApiVersionRange(api_key=ApiKey.METADATA, min_version=0, max_version=3),))
    client.use_broker_versions(broker)
    client.send_request(MetadataRequest(topics=None))
    with pytest.raises(LocalProtocolError, match="PRODUCE"):
        client.send_request(_produce())


def test_supported_versions_list_every_api() -> None:
    """ApiVersions describes exactly the codec's table."""
    listed = {entry.api_key: (entry.min_version, entry.max_version) for entry in codec.supported_api_versions().api_keys}
    assert listed == {key: (api.min_version, api.max_version) for key, api in APIS.items()}


def test_values_the_wire_cannot_carry_are_refused_locally() -> None:
    """An int16 field out of range or an over-long string is the sender's mistake."""
    with pytest.raises(LocalProtocolError):
        codec.encode_request(ApiKey.PRODUCE, 0, 1, "c", _produce(acks=40_000))
    with pytest.raises(LocalProtocolError):
        codec.encode_request(ApiKey.METADATA, 0, 1, "c", MetadataRequest(topics=("x" * 40_000,)))
    with pytest.raises(LocalProtocolError):
        codec.encode_request(ApiKey.FETCH, 0, 1, "c", MetadataRequest(topics=None))


# -- garbage in: only ProtocolError comes out -------------------------------------------------


@given(body=st.binary(max_size=200))
def test_garbage_request_bodies_raise_only_the_protocol_error(body: bytes) -> None:
    """No input makes decode_request fail with anything but ProtocolError."""
    try:
        codec.decode_request(body)
    except ProtocolError:
        pass  # the typed refusal is the expected outcome for most garbage


@given(api_key=st.sampled_from(ALL_APIS), version=st.integers(-1, 1), body=st.binary(max_size=120))
def test_garbage_after_a_valid_header_raises_only_the_protocol_error(api_key: ApiKey, version: int, body: bytes) -> None:
    """Body parsing of every API is exercised, not just the header check."""
    try:
        codec.decode_request(_raw_request(api_key, version, 1, body))
    except ProtocolError as error:
        assert error.header is not None and error.header.correlation_id == 1


@given(api_key=st.sampled_from(ALL_APIS), success=st.booleans(), body=st.binary(max_size=120))
def test_garbage_responses_raise_only_the_protocol_error(api_key: ApiKey, success: bool, body: bytes) -> None:
    """No input makes decode_response fail with anything but ProtocolError."""
    envelope = struct.pack(">ihh", 0, 0, -1) if success else b""  # reach the body decoders too
    try:
        codec.decode_response(api_key, 0, envelope + body)
    except ProtocolError:
        pass  # the typed refusal is the expected outcome for most garbage


@settings(max_examples=60)
@given(data=st.data(), api_key=st.sampled_from(ALL_APIS))
def test_mutated_valid_requests_raise_only_the_protocol_error(data: st.DataObject, api_key: ApiKey) -> None:
    """Flipping bytes of real frames reaches deep into the decoder without escaping it."""
    request = data.draw(messages(APIS[api_key].request_type))
    body = bytearray(codec.encode_request(api_key, 0, 1, "c", request)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    try:
        codec.decode_request(bytes(body[:cut]))
    except ProtocolError:
        pass  # the typed refusal is the expected outcome for most mutations


@given(chunks=st.lists(st.binary(max_size=64), max_size=8))
def test_garbage_streams_into_connections_yield_only_events(chunks: list[bytes]) -> None:
    """A connection turns any byte stream into events; failures are events, never exceptions."""
    server, client = ServerConnection(frame_bytes_max=4096), ClientConnection("tester", frame_bytes_max=4096)
    for _ in range(3):
        client.send_request(MetadataRequest(topics=None))
    for chunk in chunks:
        for event in server.receive_data(chunk) + client.receive_data(chunk):
            assert isinstance(event, RequestReceived | RequestRejected | ConnectionFailed | ResponseReceived)


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_a_successful_answer_carries_the_envelope_the_schema_would_encode(correlation_id: int) -> None:
    """The envelope of an answer without an error is packed in one call; its bytes are the schema's."""
    parts: list[bytes | memoryview] = []
    codec.encode_into(codec._ENVELOPE, codec._ResponseEnvelope(correlation_id=correlation_id, error_code=0,
                                                               error_message=None), parts)
    assert codec._SUCCESS_ENVELOPE.pack(correlation_id, 0, -1) == b"".join(parts)


def _python_calls(function: Any, *arguments: Any) -> list[str]:
    """The Python functions ``function(*arguments)`` calls, itself first (the dataclasses' ``__init__`` aside)."""
    import sys

    calls: list[str] = []
    sys.setprofile(lambda frame, event, _: calls.append(frame.f_code.co_name)
                   if event == "call" and frame.f_code.co_name != "__init__" else None)
    try:
        function(*arguments)
    finally:
        sys.setprofile(None)
    return calls


def test_a_produce_request_and_its_response_take_one_python_call_each_way_past_the_frame() -> None:
    """On every paced message's path: no wrapper calls around the generated codec, no call per field or struct."""
    from mqbroker.protocols.native.messages import (
        ProducePartition,
        ProducePartitionResult,
        ProduceRequest,
        ProduceResponse,
        ProduceTopic,
        ProduceTopicResult,
    )

    request = ProduceRequest(acks=-1, timeout_ms=1000, topics=(
        ProduceTopic(name="t", partitions=(ProducePartition(partition_index=0, records=b"x" * 70),)),))
    body = codec.encode_request(ApiKey.PRODUCE, 1, 7, "client", request)[4:]
    assert _python_calls(codec.decode_request, body) == ["decode_request", "decode", "decode"]
    response = ProduceResponse(topics=(ProduceTopicResult(name="t", partitions=(
        ProducePartitionResult(partition_index=0, base_offset=5),)),))
    assert _python_calls(codec.encode_response, 7, ApiKey.PRODUCE, 1, response) == [
        "encode_response", "encode", "_framed"]
