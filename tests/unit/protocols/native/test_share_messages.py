"""Hypothesis fuzz of the native share-group APIs' decoders (ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch, ShareAcknowledge, Create/Alter/Delete/ListShareGroups): every message round-trips between
client and server, and garbage, truncated or mutated frames raise only the typed protocol error."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.exceptions import ProtocolError
from mqbroker.protocols.native import codec
from mqbroker.protocols.native.connection import ClientConnection, RequestReceived, ResponseReceived, ServerConnection
from mqbroker.protocols.native.messages import APIS, ApiKey
from tests.unit.protocols.native.strategies import messages

SHARE_APIS = (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
              ApiKey.SHARE_ACKNOWLEDGE, ApiKey.CREATE_SHARE_GROUP, ApiKey.ALTER_SHARE_GROUP,
              ApiKey.DELETE_SHARE_GROUP, ApiKey.LIST_SHARE_GROUPS)


def _request_body(api_key: ApiKey, request: object) -> bytes:
    return codec.encode_request(api_key, 0, 1, "fuzz", request)[4:]


@settings(max_examples=150)
@given(data=st.data(), api_key=st.sampled_from(SHARE_APIS))
def test_share_messages_round_trip_between_client_and_server(data: st.DataObject, api_key: ApiKey) -> None:
    """What a share client sends the broker receives, and the broker's answer reaches the client intact."""
    request = data.draw(messages(APIS[api_key].request_type))
    response = data.draw(messages(APIS[api_key].response_type))
    client, server = ClientConnection("fuzz"), ServerConnection()
    correlation_id, frame = client.send_request(request)
    (received,) = server.receive_data(frame)
    assert isinstance(received, RequestReceived) and received.request == request
    (answered,) = client.receive_data(server.reply(received.header, response))
    assert isinstance(answered, ResponseReceived) and answered.correlation_id == correlation_id
    assert answered.response == response


@settings(max_examples=300)
@given(api_key=st.sampled_from(SHARE_APIS), body=st.binary(max_size=300))
def test_garbage_share_request_bodies_raise_only_the_protocol_error(api_key: ApiKey, body: bytes) -> None:
    """Any bytes after a valid share-API header decode or raise ProtocolError naming the request."""
    header = struct.pack(">hhi", api_key, 0, 7) + struct.pack(">h", 4) + b"fuzz"
    try:
        codec.decode_request(header + body)
    except ProtocolError as error:
        assert error.header is not None and error.header.correlation_id == 7


@settings(max_examples=300)
@given(api_key=st.sampled_from(SHARE_APIS), body=st.binary(max_size=300))
def test_garbage_share_responses_raise_only_the_protocol_error(api_key: ApiKey, body: bytes) -> None:
    """A hostile broker's answer to a share request decodes or raises ProtocolError in the client."""
    try:
        codec.decode_response(api_key, 0, struct.pack(">ihh", 0, 0, -1) + body)
    except ProtocolError:
        pass  # the typed refusal is the expected outcome for most garbage


@settings(max_examples=300)
@given(data=st.data(), api_key=st.sampled_from(SHARE_APIS))
def test_mutated_share_requests_and_responses_raise_only_the_protocol_error(data: st.DataObject,
                                                                            api_key: ApiKey) -> None:
    """Bytes of real share frames flipped and cut: deep into the decoders, never past ProtocolError."""
    request = data.draw(messages(APIS[api_key].request_type))
    response = data.draw(messages(APIS[api_key].response_type))
    for body, decode in ((bytearray(_request_body(api_key, request)), codec.decode_request),
                         (bytearray(codec.encode_response(1, api_key, 0, response)[4:]),
                          lambda raw: codec.decode_response(api_key, 0, raw))):
        for _ in range(data.draw(st.integers(1, 4))):
            position = data.draw(st.integers(0, len(body) - 1))
            body[position] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(body)))
        try:
            decode(bytes(body[:cut]))
        except ProtocolError:
            pass  # the typed refusal is the expected outcome for most mutations
