"""Every ``@implementer`` in mqbroker provides what its interface declares (verifyObject / verifyClass)."""

from __future__ import annotations

from twisted.internet.interfaces import IPushProducer
from twisted.plugin import IPlugin, getPlugins
from zope.interface.verify import verifyClass, verifyObject

import twisted.plugins
from mqbroker.config import BrokerConfig
from mqbroker.core.broker import Broker
from mqbroker.interfaces import (
    IAuthenticationAudit,
    IAuthenticator,
    IAuthorizer,
    IBroker,
    IByteRateQuotas,
    IFrontEnd,
    ISecurityAdmin,
)
from mqbroker.protocols.adapter import CodecProtocol
from mqbroker.security.acl import AllowEverything
from mqbroker.security.service import AuthenticationAudit, SecurityServices
from tests.fake_broker import FakeBroker


def test_the_broker_provides_the_broker_api() -> None:
    assert verifyClass(IBroker, Broker)


def test_allow_everything_is_an_authorizer() -> None:
    assert verifyObject(IAuthorizer, AllowEverything())


def test_the_security_services_provide_what_the_core_and_the_front_ends_use() -> None:
    services = SecurityServices(BrokerConfig())
    assert verifyObject(ISecurityAdmin, services)
    assert verifyObject(IByteRateQuotas, services.quotas)
    assert verifyObject(IAuthenticationAudit, AuthenticationAudit())
    assert verifyObject(IAuthenticator, services.authenticator)


def test_every_installed_front_end_is_a_plugin_providing_the_front_end_interface() -> None:
    front_ends = list(getPlugins(IFrontEnd, twisted.plugins))
    assert {front_end.name for front_end in front_ends} >= {"native", "mqtt", "amqp"}
    for front_end in front_ends:
        assert verifyObject(IFrontEnd, front_end)
        assert verifyObject(IPlugin, front_end)


def test_the_codec_adapter_is_a_push_producer() -> None:
    assert verifyObject(IPushProducer, CodecProtocol(session=None, idle_timeout_s=None))  # type: ignore[arg-type]


def test_the_shared_fake_broker_provides_the_broker_api() -> None:
    assert verifyObject(IBroker, FakeBroker())
