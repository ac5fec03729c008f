"""Schemathesis against a real broker: generated requests to every read route of the admin API's document.

Each answer must be documented (status and schema) and the broker must not fail (no 500);
write routes are left out of the fuzzing (they would create topics of up to 10,000 partitions)
and are exercised one by one in ``test_admin_api.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.integration.brokerprocess import BrokerProcess, running


@pytest.fixture(scope="module")
def fuzzed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with one topic, so that generated topic names sometimes exist."""
    broker = BrokerProcess(data_dir=tmp_path_factory.mktemp("admin-api-fuzz") / "data")
    for started in running(broker):
        yield started


@pytest.fixture(scope="module")
def admin_api_schema(fuzzed_broker: BrokerProcess) -> schemathesis.BaseSchema:
    """The document as the broker serves it, restricted to the read routes."""
    schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{fuzzed_broker.ports['http']}/api/openapi.json")
    return schema.include(method="GET")


def test_generated_reads_are_answered_as_documented(admin_api_schema: schemathesis.BaseSchema) -> None:
    """Every read operation, 15 generated requests each (schemathesis's pytest plugin is not used: it does not
    run under this pytest)."""
    operations = [result.ok() for result in admin_api_schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def answered_as_documented(case: schemathesis.Case) -> None:
            case.call_and_validate()

        answered_as_documented()
