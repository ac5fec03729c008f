"""Byte-rate quotas throttle (never drop) so that the rate converges to the quota; connection limits."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker import limits
from mqbroker.config import ConfigError, build_config
from mqbroker.security.quotas import (
    Admission,
    ByteRateQuota,
    ConnectionLimiter,
    QuotaKind,
    QuotaManager,
    QuotaOverride,
    QuotaScope,
    TokenBucket,
    parse_quota_overrides,
)
from mqbroker.security.service import quota_manager


def simulate(manager, kind, request_bytes, duration_ms, principal="User:alice", client_id="app", gap_ms=1):
    """A client that sends as fast as it may: the next request goes out when the throttle ends."""
    now_ms = 0
    sent_bytes = 0
    while now_ms < duration_ms:
        delay_ms = manager.record(kind, principal, client_id, request_bytes, now_ms)
        sent_bytes += request_bytes
        now_ms += delay_ms + gap_ms
    return sent_bytes * 1000 / now_ms


@pytest.mark.parametrize("request_bytes", [1_000, 16_384, 250_000])
@pytest.mark.parametrize("kind", list(QuotaKind))
def test_a_fast_client_converges_to_within_20_percent_of_its_principal_quota(kind, request_bytes):
    quota = 100_000.0
    limits = ByteRateQuota(produce_bytes_per_second=quota, fetch_bytes_per_second=quota)
    manager = QuotaManager(principal_quotas={"User:alice": limits})
    rate = simulate(manager, kind, request_bytes, duration_ms=120_000)
    assert abs(rate - quota) / quota < 0.20, rate


def test_client_id_quota_applies_and_the_stricter_quota_wins():
    manager = QuotaManager(
        principal_quotas={"User:alice": ByteRateQuota(produce_bytes_per_second=500_000)},
        client_quotas={"slow-app": ByteRateQuota(produce_bytes_per_second=50_000)},
    )
    rate = simulate(manager, QuotaKind.PRODUCE, 10_000, duration_ms=120_000, client_id="slow-app")
    assert abs(rate - 50_000) / 50_000 < 0.20, rate


def test_default_quota_covers_principals_without_their_own():
    manager = QuotaManager(default_principal_quota=ByteRateQuota(fetch_bytes_per_second=20_000))
    rate = simulate(manager, QuotaKind.FETCH, 4_000, duration_ms=120_000, principal="User:anyone")
    assert abs(rate - 20_000) / 20_000 < 0.20, rate


def test_no_quota_means_no_throttle_and_produce_quota_does_not_limit_fetch():
    manager = QuotaManager(principal_quotas={"User:alice": ByteRateQuota(produce_bytes_per_second=1)})
    assert manager.record(QuotaKind.FETCH, "User:alice", "app", 10**9, 0) == 0
    assert manager.record(QuotaKind.PRODUCE, "User:bob", "app", 10**9, 0) == 0


def test_removing_a_quota_reverts_to_the_default():
    manager = QuotaManager(principal_quotas={"User:alice": ByteRateQuota(produce_bytes_per_second=1)})
    assert manager.record(QuotaKind.PRODUCE, "User:alice", "app", 10_000, 0) > 0
    manager.set_principal_quota("User:alice", None)
    assert manager.record(QuotaKind.PRODUCE, "User:alice", "app", 10_000, 1) == 0


def test_idle_rates_are_forgotten():
    manager = QuotaManager(client_quotas={"app": ByteRateQuota(produce_bytes_per_second=10)})
    manager.record(QuotaKind.PRODUCE, "User:alice", "app", 100, 0)
    assert manager.expire_idle(3_600_001) == 1


@pytest.mark.parametrize("duration_ms", [3_000, 8_000, 15_000])
def test_a_fast_client_stays_near_its_quota_over_a_few_seconds_too(duration_ms):
    """One burst (a second of quota) at most: no start-up allowance of many seconds, no bursts as time passes."""
    manager = QuotaManager(default_client_quota=ByteRateQuota(produce_bytes_per_second=200_000))
    rate = simulate(manager, QuotaKind.PRODUCE, 16_384, duration_ms=duration_ms)
    assert abs(rate - 200_000) / 200_000 <= 1000 / duration_ms + 0.05, rate


def test_an_idle_client_may_burst_one_second_of_its_quota_then_waits():
    bucket = TokenBucket(burst_ms=1000)
    assert bucket.record(100_000, 100_000.0, 0) == 0
    assert bucket.record(50_000, 100_000.0, 0) == 500
    assert bucket.record(10_000, 100_000.0, 600) == 0  # 100 ms later than the debt was paid: 10 KB of credit
    assert bucket.record(10_000, 100_000.0, 10_000_000) == 0


@given(
    amounts=st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 5_000)), max_size=50),
    limit=st.floats(min_value=1, max_value=1e9),
)
def test_throttle_is_never_negative_and_never_longer_than_the_maximum(amounts, limit):
    bucket = TokenBucket()
    now_ms = 0
    for byte_count, step_ms in amounts:
        now_ms += step_ms
        assert 0 <= bucket.record(byte_count, limit, now_ms) <= limits.throttle_ms_max


def test_quota_overrides_parse_and_keep_the_default_for_flows_they_do_not_name():
    [alice, reports] = parse_quota_overrides(" principal User:alice produce=1000000 , client reports fetch=0")
    assert alice == QuotaOverride(scope=QuotaScope.PRINCIPAL, name="User:alice", produce_bytes_per_second=1_000_000)
    default = ByteRateQuota(produce_bytes_per_second=10.0, fetch_bytes_per_second=20.0)
    assert alice.applied_to(default) == ByteRateQuota(produce_bytes_per_second=1e6, fetch_bytes_per_second=20.0)
    assert reports.applied_to(default) == ByteRateQuota(produce_bytes_per_second=10.0)  # fetch=0: unlimited
    assert parse_quota_overrides("") == []


@pytest.mark.parametrize("text", ["user alice produce=1", "principal User:alice", "client x produce=-1",
                                  "client x speed=1", "client x produce=1 produce=2", "principal produce=1"])
def test_a_bad_quota_override_is_a_config_error_naming_the_key(text):
    with pytest.raises(ConfigError, match="quotas.overrides"):
        build_config({"quotas.overrides": text})


def test_configured_overrides_apply_per_principal_and_per_client_id():
    config = build_config({
        "quotas.client_produce_bytes_per_second": "1000",
        "quotas.overrides": ["principal User:bulk produce=0", "client fast-app produce=0", "principal User:slow fetch=10"],
    })
    manager = quota_manager(config)
    assert manager.has_quotas
    assert manager.record(QuotaKind.PRODUCE, "User:alice", "app", 10_000, 0) > 0  # the default client quota
    assert manager.record(QuotaKind.PRODUCE, "User:alice", "fast-app", 10_000, 0) == 0
    assert manager.record(QuotaKind.FETCH, "User:slow", "app", 10_000, 0) > 0
    assert not quota_manager(build_config({"quotas.overrides": "client x produce=0"})).has_quotas


def test_connection_limits_per_host_and_total():
    limiter = ConnectionLimiter(total_max=3, per_host_max=2, per_host_overrides={"10.0.0.9": 0})
    assert limiter.admit("10.0.0.1") is Admission.ACCEPTED
    assert limiter.admit("10.0.0.1") is Admission.ACCEPTED
    assert limiter.admit("10.0.0.1") is Admission.TOO_MANY_FROM_HOST
    assert limiter.admit("10.0.0.9") is Admission.TOO_MANY_FROM_HOST
    assert limiter.admit("10.0.0.2") is Admission.ACCEPTED
    assert limiter.admit("10.0.0.3") is Admission.TOO_MANY_TOTAL
    limiter.release("10.0.0.1")
    assert limiter.open_connections("10.0.0.1") == 1 and limiter.open_connections() == 2
    assert limiter.admit("10.0.0.3") is Admission.ACCEPTED


def test_releasing_a_connection_never_admitted_is_a_programming_error():
    with pytest.raises(AssertionError):
        ConnectionLimiter(total_max=1, per_host_max=1).release("10.0.0.1")


def test_setting_and_resetting_a_quota_turns_the_bookkeeping_on_and_off():
    manager = QuotaManager()
    assert not manager.has_quotas
    manager.set_client_quota("app", ByteRateQuota(produce_bytes_per_second=1000))
    assert manager.has_quotas
    manager.set_client_quota("app", None)
    assert not manager.has_quotas
    manager.set_principal_quota("User:alice", ByteRateQuota(fetch_bytes_per_second=1000))
    assert manager.has_quotas
