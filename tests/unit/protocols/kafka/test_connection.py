"""The sans-I/O Kafka connection: responses leave in request order, acks=0 gets none, ApiVersions is
answered at once (KIP-511 fallback included), and any byte stream yields events, never exceptions."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.protocols.kafka import codec
from mqbroker.protocols.kafka.connection import ConnectionFailed, ConnectionState, RequestReceived, ServerConnection
from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.protocols.kafka.messages.cluster import ApiVersionsRequest, MetadataRequest, MetadataResponse
from mqbroker.protocols.kafka.messages.groups import HeartbeatRequest, HeartbeatResponse
from mqbroker.protocols.kafka.messages.produce_fetch import PartitionProduceData, ProduceRequest, TopicProduceData


def _metadata(correlation_id: int) -> bytes:
    return codec.encode_request(ApiKey.METADATA, 12, correlation_id, "c", MetadataRequest(topics=None))


def _correlation_ids(data: bytes) -> list[int]:
    """The correlation ids of the response frames in ``data``, in order."""
    found, position = [], 0
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position)
        found.append(struct.unpack_from(">i", data, position + 4)[0])
        position += 4 + length
    return found


def test_responses_leave_in_request_order_whichever_finishes_first() -> None:
    connection = ServerConnection()
    events = connection.receive_data(_metadata(1) + _metadata(2) + _metadata(3))
    assert [event.header.correlation_id for event in events] == [1, 2, 3]
    connection.respond(events[2].sequence, MetadataResponse(brokers=(), topics=()))
    connection.respond(events[1].sequence, MetadataResponse(brokers=(), topics=()))
    assert connection.data_to_send() == b""  # the first is still unanswered
    connection.respond(events[0].sequence, MetadataResponse(brokers=(), topics=()))
    assert _correlation_ids(connection.data_to_send()) == [1, 2, 3]
    assert connection.unanswered_requests == 0


def test_a_produce_with_acks_zero_takes_no_place_in_the_order() -> None:
    connection = ServerConnection()
    produce = ProduceRequest(acks=0, timeout_ms=100, topic_data=(
        TopicProduceData(name="t", partition_data=(PartitionProduceData(index=0, records=b""),)),))
    heartbeat = HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
    events = connection.receive_data(codec.encode_request(ApiKey.PRODUCE, 9, 1, "c", produce)
                                     + codec.encode_request(ApiKey.HEARTBEAT, 4, 2, "c", heartbeat))
    assert events[0].sequence is None
    connection.respond(events[1].sequence, HeartbeatResponse(error_code=0))
    assert _correlation_ids(connection.data_to_send()) == [2]


def test_api_versions_is_answered_in_its_place_without_an_event() -> None:
    connection = ServerConnection()
    events = connection.receive_data(_metadata(1) + codec.encode_request(ApiKey.API_VERSIONS, 3, 2, "c", ApiVersionsRequest()))
    assert [event.header.correlation_id for event in events] == [1]
    assert connection.data_to_send() == b""  # behind the unanswered Metadata
    connection.respond(events[0].sequence, MetadataResponse(brokers=(), topics=()))
    assert _correlation_ids(connection.data_to_send()) == [1, 2]


def test_an_api_versions_request_of_a_newer_version_gets_the_version_zero_fallback() -> None:
    connection = ServerConnection()
    request = struct.pack(">hhih", ApiKey.API_VERSIONS, 9, 5, 1) + b"c" + b"\x00" + b"\x07garbage"
    assert connection.receive_data(struct.pack(">i", len(request)) + request) == []
    correlation_id, answer = codec.decode_response(ApiKey.API_VERSIONS, 0, connection.data_to_send()[4:])
    assert (correlation_id, answer.error_code) == (5, 35) and answer.api_keys


def test_an_unsupported_version_of_another_api_fails_the_connection() -> None:
    connection = ServerConnection()
    request = struct.pack(">hhih", ApiKey.FETCH, 2, 5, -1)
    events = connection.receive_data(struct.pack(">i", len(request)) + request)
    assert isinstance(events[-1], ConnectionFailed) and connection.state is ConnectionState.FAILED
    assert connection.receive_data(_metadata(1)) == []


def test_a_frame_longer_than_the_bound_fails_the_connection_before_its_body_arrives() -> None:
    connection = ServerConnection(frame_bytes_max=1000)
    events = connection.receive_data(struct.pack(">i", 1001))
    assert isinstance(events[0], ConnectionFailed) and "1001" in events[0].error.message


@given(chunks=st.lists(st.binary(max_size=64), max_size=8))
def test_any_byte_stream_yields_only_events(chunks: list[bytes]) -> None:
    connection = ServerConnection(frame_bytes_max=4096)
    for chunk in [_metadata(1)[:7], *chunks]:
        for event in connection.receive_data(chunk):
            assert isinstance(event, (RequestReceived, ConnectionFailed))
