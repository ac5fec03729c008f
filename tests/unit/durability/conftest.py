"""Durability tests close the logs and files they open (the check of the storage tests)."""

from tests.unit.storage.conftest import no_leaked_descriptors

__all__ = ["no_leaked_descriptors"]
