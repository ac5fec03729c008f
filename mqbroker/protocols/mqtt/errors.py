"""The one exception a peer's bad MQTT input produces, carrying the reason code to report."""

from __future__ import annotations

from mqbroker.protocols.mqtt.packets import ReasonCode


class MqttProtocolError(Exception):
    """The peer broke the protocol; ``reason_code`` says how (5.0 numbering, also used for 3.1.1).

    The session turns it into the DISCONNECT (level 5) or plain close (level 4) the
    specification requires; messages cite the normative statement, e.g. [MQTT-3.1.0-2].
    """

    def __init__(self, reason_code: ReasonCode, message: str) -> None:
        super().__init__(f"{reason_code.name} (0x{reason_code:02X}): {message}")
        self.reason_code = reason_code
        self.message = message


def malformed(message: str) -> MqttProtocolError:
    """A packet that does not follow the encoding rules (0x81)."""
    return MqttProtocolError(ReasonCode.MALFORMED_PACKET, message)


def protocol_error(message: str) -> MqttProtocolError:
    """A well-formed packet that is not allowed here (0x82)."""
    return MqttProtocolError(ReasonCode.PROTOCOL_ERROR, message)
