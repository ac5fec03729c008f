"""The definitions fence: publishes wait for a round of catching up that started after they arrived, in shared
rounds (one catch-up at a time), and a round that fails releases them."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker import errors, limits
from mqbroker.protocols.amqp.definitions_fence import DefinitionsFence


class CatchUps:
    """A catch-up the test finishes by hand."""

    def __init__(self) -> None:
        self.pending: list[Deferred[None]] = []

    def __call__(self) -> Deferred[None]:
        self.pending.append(Deferred())
        return self.pending[-1]

    def finish(self, error: Exception | None = None) -> None:
        catch_up = self.pending.pop(0)
        if error is None:
            catch_up.callback(None)
        else:
            catch_up.errback(error)


def _fired(deferred: Deferred[None]) -> bool:
    fired: list[None] = []
    deferred.addCallback(fired.append)
    return bool(fired)


def test_publishes_that_arrived_before_a_round_started_share_it() -> None:
    catch_ups = CatchUps()
    fence = DefinitionsFence(catch_ups, Clock())
    ticket = fence.ticket()
    assert not fence.covers(ticket)
    waits = [fence.wait(ticket) for _ in range(100)]
    assert len(catch_ups.pending) == 1, "one round for every publish waiting"
    catch_ups.finish()
    assert all(_fired(wait) for wait in waits)
    assert fence.covers(ticket) and fence.rounds == 1


def test_a_publish_arriving_during_a_round_waits_for_the_next() -> None:
    """The running round may have read the log's end before the publish arrived: it does not cover it."""
    catch_ups = CatchUps()
    fence = DefinitionsFence(catch_ups, Clock())
    first = fence.wait(fence.ticket())
    late_ticket = fence.ticket()  # taken while the first round runs
    late = fence.wait(late_ticket)
    assert len(catch_ups.pending) == 1, "one round in flight at a time"
    catch_ups.finish()
    assert _fired(first) and not _fired(late) and not fence.covers(late_ticket)
    assert len(catch_ups.pending) == 1, "the next round started for the late publish"
    catch_ups.finish()
    assert _fired(late) and fence.covers(late_ticket)
    assert fence.rounds == 2


def test_no_round_runs_while_nothing_waits() -> None:
    catch_ups = CatchUps()
    fence = DefinitionsFence(catch_ups, Clock())
    fence.ticket()
    assert not catch_ups.pending


def test_a_round_that_cannot_catch_up_releases_its_publishes() -> None:
    """No leader for the definitions: the publishes are routed by what is known (they are not held for ever)."""
    catch_ups = CatchUps()
    fence = DefinitionsFence(catch_ups, Clock())
    first = fence.wait(fence.ticket())
    catch_ups.finish(errors.LeaderNotAvailableError("no leader of __amqp_metadata"))
    assert _fired(first)
    second = fence.wait(fence.ticket())
    catch_ups.finish(RuntimeError("a bug"))
    assert _fired(second)
    third = fence.wait(fence.ticket())
    catch_ups.finish()
    assert _fired(third) and fence.rounds == 3


def test_a_round_whose_follower_does_not_get_there_releases_its_publishes_after_the_reroute_bound() -> None:
    """A follower that cannot fetch must not hold every publish of the broker for ever."""
    catch_ups, clock = CatchUps(), Clock()
    fence = DefinitionsFence(catch_ups, clock)
    waiting = fence.wait(fence.ticket())
    clock.advance(limits.reroute_ms_max / 1000 - 0.001)
    assert not _fired(waiting)
    clock.advance(0.001)
    assert _fired(waiting) and fence.rounds == 1


def test_a_round_that_is_already_caught_up_releases_at_once() -> None:
    """On the leader of ``__amqp_metadata`` with nothing new, catching up needs no wait: the publish goes on."""
    fence = DefinitionsFence(lambda: Deferred.fromCoroutine(_nothing()), Clock())
    ticket = fence.ticket()
    assert _fired(fence.wait(ticket)) and fence.covers(ticket)


async def _nothing() -> None:
    return None
