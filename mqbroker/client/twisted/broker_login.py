"""The inter-broker login on a native connection: SCRAM as the inter-broker user acting as ``Broker:<id>``.

The replica fetcher and the peer connections run it after ApiVersions when brokers prove who
they are with the inter-broker password rather than with certificates (``cluster_auth``
decides which).
"""

from __future__ import annotations

import os

from mqbroker.client.twisted.protocol import NativeClientProtocol
from mqbroker.protocols.native import messages as m
from mqbroker.security.inter_broker import INTER_BROKER_MECHANISM, InterBrokerLogin
from mqbroker.security.scram import ScramClient


async def log_in_as_broker(protocol: NativeClientProtocol, login: InterBrokerLogin, node_id: int) -> None:
    """SCRAM on a native connection as the inter-broker user acting as ``Broker:<node_id>``.

    Raises the broker's typed error (SASL_AUTHENTICATION_FAILED) when refused, or
    ``SaslAuthenticationError`` when the leader does not prove it knows the credential.
    """
    await protocol.request(m.SaslHandshakeRequest(mechanism=INTER_BROKER_MECHANISM.value))
    client = ScramClient(INTER_BROKER_MECHANISM, login.username, login.password, os.urandom,
                         authorization_id=str(node_id))
    first = await protocol.request(m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    final = await protocol.request(m.SaslAuthenticateRequest(auth_bytes=client.respond(first.auth_bytes)))
    client.finish(final.auth_bytes)
