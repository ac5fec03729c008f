"""The error a fetch reply held for the application, shared by the consumer and share-consumer cores."""

from __future__ import annotations

from mqbroker.errors import BrokerError


class HeldFailure:
    """Keeps the first error of a fetch reply until the driver raises it with ``raise_failure``: from the poll that
    has no records to return, or else from the next poll (as Kafka's consumer does), so the records the same reply
    brought for other partitions are not lost behind it."""

    _failure: BrokerError | None = None

    def _hold_failure(self, error: BrokerError) -> None:
        """Keep ``error`` unless an earlier one waits."""
        if self._failure is None:
            self._failure = error

    def raise_failure(self) -> None:
        """Raise the held error, once."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
