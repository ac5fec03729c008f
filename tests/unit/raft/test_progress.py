"""Per-follower replication progress: probe, replicate, snapshot and the in-flight window."""

from __future__ import annotations

from mqbroker.raft.progress import Inflights, Progress, ProgressState


def new_progress(next_index: int = 5, window: int = 3) -> Progress:
    return Progress(next_index=next_index, inflight_messages_max=window, learner=False)


def test_probe_sends_one_append_then_pauses_until_an_answer() -> None:
    progress = new_progress()
    assert not progress.paused()
    progress.sent_entries(6, commit_index=0)
    assert progress.paused()
    assert progress.next_index == 5  # probing does not move next optimistically


def test_acknowledgement_unpauses_and_replicate_pipelines_optimistically() -> None:
    progress = new_progress()
    progress.sent_entries(6, commit_index=0)
    assert progress.maybe_update(6)
    progress.become_replicate()
    assert (progress.state, progress.next_index) == (ProgressState.REPLICATE, 7)
    progress.sent_entries(8, commit_index=0)
    progress.sent_entries(9, commit_index=0)
    assert progress.next_index == 10
    assert len(progress.inflights) == 2


def test_replicate_pauses_when_the_window_is_full_and_resumes_on_acknowledgement() -> None:
    progress = new_progress(window=2)
    progress.maybe_update(4)
    progress.become_replicate()
    progress.sent_entries(6, commit_index=0)
    progress.sent_entries(8, commit_index=0)
    assert progress.paused()
    progress.inflights.free_up_to(6)
    assert not progress.paused()


def test_stale_acknowledgement_is_not_an_update() -> None:
    progress = new_progress()
    assert progress.maybe_update(7)
    assert not progress.maybe_update(6)
    assert progress.match_index == 7


def test_probe_rejection_backs_off_to_the_hint() -> None:
    progress = new_progress(next_index=10)
    progress.sent_entries(10, commit_index=0)
    assert progress.maybe_decrement_to(9, hint_index=3)
    assert progress.next_index == 4
    assert not progress.paused()


def test_rejection_of_an_older_probe_is_ignored() -> None:
    progress = new_progress(next_index=10)
    assert not progress.maybe_decrement_to(5, hint_index=2)
    assert progress.next_index == 10


def test_replicate_rejection_falls_back_to_just_after_the_match() -> None:
    progress = new_progress()
    progress.maybe_update(4)
    progress.become_replicate()
    progress.sent_entries(9, commit_index=0)
    assert not progress.maybe_decrement_to(3, hint_index=0)  # already matched beyond it
    assert progress.maybe_decrement_to(7, hint_index=0)
    assert progress.next_index == 5


def test_snapshot_state_pauses_and_probes_after_the_snapshot() -> None:
    progress = new_progress()
    progress.become_snapshot(20)
    assert progress.paused()
    progress.become_probe()
    assert (progress.state, progress.next_index) == (ProgressState.PROBE, 21)


def test_inflights_free_first_reopens_a_full_window() -> None:
    inflights = Inflights(2)
    inflights.add(3)
    inflights.add(5)
    assert inflights.full()
    inflights.free_first()
    assert not inflights.full()
    inflights.free_up_to(10)
    assert len(inflights) == 0
