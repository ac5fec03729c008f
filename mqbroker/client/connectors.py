"""The connector admin requests and how their answers read (pure; the drivers send them to any broker)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mqbroker.connector_model import ConnectorDescription
from mqbroker.protocols.native.connector_wire import descriptions_from
from mqbroker.errors import UnknownServerError
from mqbroker.protocols.native import messages as m

#: The actions of ``alter_connector_request``, by name.
ACTIONS = {"pause": m.ConnectorAction.PAUSE, "resume": m.ConnectorAction.RESUME, "delete": m.ConnectorAction.DELETE}


def create_connector_request(name: str, config: Mapping[str, str]) -> m.CreateConnectorRequest:
    """Create connector ``name`` with ``config``."""
    return m.CreateConnectorRequest(name=name, configs=dict(config))


def alter_connector_request(name: str, action: str) -> m.AlterConnectorRequest:
    """``action`` (pause, resume or delete) connector ``name``."""
    return m.AlterConnectorRequest(name=name, action=ACTIONS[action])


def describe_connectors_request(names: Sequence[str] | None) -> m.DescribeConnectorsRequest:
    """Describe connectors ``names`` (None: all)."""
    return m.DescribeConnectorsRequest(names=None if names is None else tuple(names))


def describe_connectors_result(response: m.DescribeConnectorsResponse) -> list[ConnectorDescription]:
    """The descriptions of a DescribeConnectors answer."""
    try:
        return descriptions_from(response)
    except ValueError as error:
        raise UnknownServerError(f"the broker described a connector this client cannot read: {error}") from None
