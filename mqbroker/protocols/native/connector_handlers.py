"""The native connector APIs: CreateConnector, AlterConnector, DescribeConnectors → ``IConnectorAdmin``."""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.protocols.native.connector_wire import describe_response
from mqbroker.model import Principal
from mqbroker.protocols.native import messages as m

CONNECTOR_APIS = frozenset({m.ApiKey.CREATE_CONNECTOR, m.ApiKey.ALTER_CONNECTOR, m.ApiKey.DESCRIBE_CONNECTORS})


async def handle_connector_request(admin: Any, principal: Principal, request: Any) -> Any:
    """Answer one of ``CONNECTOR_APIS`` through ``admin`` (an ``IConnectorAdmin``; None: connectors are off)."""
    if admin is None:
        raise errors.InvalidRequestError("connectors are disabled on this broker (connectors.enabled = false)")
    if isinstance(request, m.CreateConnectorRequest):
        await admin.create(principal, request.name, request.configs)
        return m.CreateConnectorResponse()
    if isinstance(request, m.AlterConnectorRequest):
        try:
            action = m.ConnectorAction(request.action)
        except ValueError:
            raise errors.InvalidRequestError(f"unknown connector action {request.action}") from None
        change = {m.ConnectorAction.PAUSE: admin.pause, m.ConnectorAction.RESUME: admin.resume,
                  m.ConnectorAction.DELETE: admin.delete}[action]
        await change(principal, request.name)
        return m.AlterConnectorResponse()
    return describe_response(await admin.describe(principal, request.names))
