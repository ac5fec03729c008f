"""``mqbroker_request_latency_seconds``: the broker's own histogram exports what a prometheus_client one would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from mqbroker.ops.metrics import LATENCY_BUCKETS_SECONDS, BrokerMetrics

_SERIES = st.sampled_from([("native", "produce"), ("native", "fetch"), ("kafka", "metadata")])
#: Bounds themselves (an observation equal to a bound is in its bucket: "le"), and anything between.
_SECONDS = st.sampled_from(LATENCY_BUCKETS_SECONDS) | st.floats(min_value=0, max_value=60, allow_nan=False)


def _without_created(exposition: bytes) -> list[str]:
    return [line for line in exposition.decode().splitlines() if "_created" not in line]


@settings(max_examples=200, deadline=None)
@given(observations=st.lists(st.tuples(_SERIES, _SECONDS), max_size=40))
def test_the_request_latency_histogram_exports_what_prometheus_clients_would(
        observations: list[tuple[tuple[str, str], float]]) -> None:
    metrics = BrokerMetrics()
    reference_registry = CollectorRegistry()
    reference = Histogram("mqbroker_request_latency_seconds",
                          "Time from a request's arrival to its reply being queued, by protocol and API.",
                          ["protocol", "api"], buckets=LATENCY_BUCKETS_SECONDS, registry=reference_registry)
    for (protocol, api), seconds in observations:
        metrics.request_latency.labels(protocol, api).observe(seconds)
        reference.labels(protocol, api).observe(seconds)
    ours = [line for line in _without_created(generate_latest(metrics.registry))
            if "mqbroker_request_latency_seconds" in line]
    assert ours == _without_created(generate_latest(reference_registry))


def test_a_latency_series_is_kept_per_protocol_and_api() -> None:
    latency = BrokerMetrics().request_latency
    assert latency.labels("native", "produce") is latency.labels("native", "produce")
    assert latency.labels("native", "produce") is not latency.labels("kafka", "produce")


def test_an_observation_is_one_python_call_and_takes_no_lock() -> None:
    """Observed on every request: a prometheus_client ``Histogram`` took eight calls, two of them a lock's."""
    import sys

    series = BrokerMetrics().request_latency.labels("native", "produce")
    calls: list[str] = []
    sys.setprofile(lambda frame, event, argument: calls.append(getattr(argument, "__name__", frame.f_code.co_name))
                   if event in ("call", "c_call") else None)
    try:
        series.observe(0.003)
    finally:
        sys.setprofile(None)
    assert calls[:-1] == ["observe", "bisect_left"]  # the last: switching the profiler off
