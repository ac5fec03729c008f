"""Suite-wide test configuration: hypothesis profiles sized for a 2-core CI machine."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", deadline=None, max_examples=5000)
settings.load_profile("ci")

#: Grouping, ordering and the ``alone`` lock for pytest-xdist workers (scripts/test.sh runs the suite in three).
pytest_plugins = ["tests.parallel"]
