"""Publish admission for ``x-overflow`` reject-publish(-dlx), pure: how many waiting publishes a queue takes.

RabbitMQ judges each publish at the queue's leader, against its exact count. Here a publish may
arrive at any broker of a cluster, and a share queue's count is known to its share group's host
(records available in the group's region) and to its log's leader (the log's end). So each broker
judges the publishes it receives for a queue **in rounds**: the messages that arrived since the
last round wait; once none of this broker's admitted messages is still on its way into the log,
it asks for the queue's ready count (one describe of the group and one ListOffsets: state that is
correct wherever it is asked), and takes the oldest waiting messages up to ``x-max-length`` minus
that count; the rest are rejected. Waiting for the broker's own appends to land makes the count
exact for what this broker published; what other brokers admit during the same round is not in
it (the precision is documented in docs/queues.md).

``AdmissionLedger`` is that decision; ``share_admission.PublishGate`` drives it with a reactor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(slots=True)
class AdmissionLedger:
    """One queue's admission rounds at one broker: when to ask for the count, and how many to take."""

    max_length: int
    #: Admitted messages not yet in the log (or refused): a count asked now might not include them.
    in_flight: int = 0
    #: A round is asking for the queue's ready count.
    asking: bool = False

    def __post_init__(self) -> None:
        assert self.max_length >= 0, "x-max-length is a non-negative count"

    def round_due(self, waiting: int) -> bool:
        """Whether to ask for the count now: messages wait, no round is asking, none admitted is in flight."""
        return waiting > 0 and not self.asking and self.in_flight == 0

    def start_round(self) -> None:
        """The count is being asked for."""
        assert not self.asking and self.in_flight == 0, "a round starts alone, with nothing of ours in flight"
        self.asking = True

    def decide(self, waiting: int, ready: int) -> int:
        """The queue holds ``ready`` messages: how many of the ``waiting`` ones (oldest first) it takes."""
        assert self.asking, "a verdict answers a round"
        assert waiting >= 0 and ready >= 0
        self.asking = False
        admitted = max(0, min(waiting, self.max_length - ready))
        self.in_flight += admitted
        return admitted

    def round_failed(self) -> None:
        """The count could not be had: the round's messages are all rejected (none was stored)."""
        assert self.asking, "a failure ends a round"
        self.asking = False

    def landed(self, admitted: int) -> None:
        """``admitted`` messages of one round are in the log (or were refused): a new round may count them."""
        assert 0 <= admitted <= self.in_flight, "only what was admitted lands"
        self.in_flight -= admitted


def rejected_here_before(headers: Mapping[str, Any] | None, queue: str) -> bool:
    """Whether a message already died of ``maxlen`` in ``queue``: its dead-letter exchange led it back to the queue
    that rejected it, so dead-lettering it again would go round for as long as the queue stays full (RabbitMQ drops
    such a cycle too)."""
    deaths = (headers or {}).get("x-death")
    if not isinstance(deaths, Sequence):
        return False
    return any(isinstance(death, Mapping) and death.get("queue") == queue and death.get("reason") == "maxlen"
               for death in deaths)


def split_run(count: int, verdicts: Sequence[tuple[int, bool]]) -> list[tuple[int, int, bool]]:
    """A run of ``count`` confirmed publishes went to several batches; each batch took the first ``taken`` of them
    and says whether those are ``stored``. A publish is confirmed only if every batch took and stored it: the run's
    ``(first, last, confirmed)`` pieces, relative to the run (one or two pieces)."""
    taken = min((min(count, max(0, batch_taken)) for batch_taken, _ in verdicts), default=count)
    stored = all(batch_stored for _, batch_stored in verdicts)
    pieces = []
    if taken > 0:
        pieces.append((0, taken - 1, stored))
    if taken < count:
        pieces.append((taken, count - 1, False))
    return pieces
