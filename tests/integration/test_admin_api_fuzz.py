"""Schemathesis against a real broker: generated requests to every read route of the admin API's document.

Each answer must be documented (status and schema) and the broker must not fail (no 500);
write routes are left out of the fuzzing (they would create topics of up to 10,000 partitions)
and are exercised one by one in ``test_admin_api.py``. A request valid by the document must be
accepted, save one rule no portable JSON Schema pattern can state: names the broker checks
whole (``security/names.py``: group ids, user names) may not hold a format, private-use or
unassigned character, which the document says in words and the broker refuses with 400.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from mqbroker.security.names import name_problem
from tests.integration.brokerprocess import BrokerProcess, running

#: The error codes of a name refused whole by the broker (``security/names.py``).
NAME_REFUSALS = {"INVALID_GROUP_ID", "INVALID_REQUEST"}


@schemathesis.check
def valid_requests_accepted(ctx: schemathesis.CheckContext, response: schemathesis.Response,
                            case: schemathesis.Case) -> bool | None:
    """A 400 only for a path parameter (sent percent-encoded) the broker refuses as a name (an unprintable
    character): the rule the document states in words; everything else valid by the document must not be refused."""
    if response.status_code != 400:
        return None
    names = [urllib.parse.unquote(value) for value in (case.path_parameters or {}).values() if isinstance(value, str)]
    unprintable = [name for name in names if name_problem(name, len(name))]
    if unprintable and response.json()["error"]["code"] in NAME_REFUSALS:
        return None
    raise AssertionError(f"a request valid by the document was refused: {response.status_code} {response.text}")


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
            case.call_and_validate(excluded_checks=[positive_data_acceptance],
                                   additional_checks=[valid_requests_accepted])

        answered_as_documented()
