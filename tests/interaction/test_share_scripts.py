"""Data-driven share-partition scripts: ``tests/interaction/testdata/share_*.txt``.

Each case is command lines, ``----``, then everything the share partition said: acquired ranges,
acknowledgement outcomes, dead letters, scheduled records, delay-entry changes and what was
written. A blank line ends a case; ``#`` lines are comments; ``MQBROKER_REWRITE=1`` rewrites the
expected parts (review the diff before committing).

The runner plays the broker's part: outputs are drained after every command, ``write`` stores the
region's snapshot and the delay entries as ``__share_group_state`` records (through the real
codec), and ``failover`` builds a new partition from what was stored, as a new leader's replay does
(leases gone, delivery counts kept; a delay entry counts only where the snapshot confirms it).

Commands (``k=v`` options, all optional):

  partition start=0 attempts=3 inflight=100   a fresh share partition, clock at 0, nothing stored
  time <ms>                                   move the clock and tick (prints the next deadline)
  read <first>..<last> [<offset>@<deliver-at ms> ...]   records read from the log
  skip <first>..<last>                        offsets with nothing to deliver (control batches)
  acquire <member> <count> [lease=ms] [readable=offset]   (lease 1000, everything readable by default)
  ack <member> <first>..<last> accept|release|reject|renew [error=text] [lease=ms] [at=ms]
  leave <member>                              the member is gone: its records are released
  trim <max> [unread=n]                       drop-head: at most <max> ready, n more in the log not read yet
  due                                         stored delay entries whose time has come are loaded
  dead-lettered <first>..<last>               their copies on the dead-letter topic are durable
  log-start <offset>                          retention deleted the log below <offset>
  state | stats                               the runs, or the counts
  write [cut]                                 store what changed: delay entries, then the snapshot (cut: not it)
  failover                                    a new leader replays what was stored
"""

from __future__ import annotations

import pathlib

import pytest

from mqbroker.model import AcknowledgeType
from mqbroker.shares.partition import SharePartition
from mqbroker.shares.partition_values import DueEntry, RecordState
from mqbroker.shares.state_records import (
    DelayKey,
    PartitionKey,
    decode_delay_value,
    decode_key,
    decode_partition_value,
    delay_record,
    partition_record,
    tombstone,
)
from tests.interaction.test_group_scripts import options, replay_script

TESTDATA = pathlib.Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("share_*.txt"))
KEY = PartitionKey("g", "events", 0)


def span(text: str) -> tuple[int, int]:
    """``3..7`` (or ``5``) as a pair."""
    first, _, last = text.partition("..")
    return int(first), int(last or first)


def show(first: int, last: int) -> str:
    return f"{first}" if first == last else f"{first}..{last}"


class Script:
    """Drives one share partition through script commands and renders what came out."""

    def __init__(self) -> None:
        self.do_partition([], {})

    def run(self, command: str) -> list[str]:
        """Execute one command; return its output lines and the partition's outputs."""
        verb, *words = command.split()
        positional, named = options(words)
        lines = getattr(self, "do_" + verb.replace("-", "_"))(positional, named)
        return lines + self.drain()

    def drain(self) -> list[str]:
        """Outputs since the last command, kept as the broker keeps them until a write."""
        lines = []
        partition = self.partition
        for dead in partition.dead_letters:
            lines.append(f"dead letter {show(dead.first, dead.last)}: {dead.reason.value} after "
                         f"{dead.delivery_count} deliveries ({dead.last_error})")
        partition.dead_letters.clear()
        for scheduled in partition.scheduled:
            lines.append(f"scheduled {scheduled.offset} until {scheduled.deliver_at_ms}")
            self.pending[scheduled.offset] = DueEntry(scheduled.offset, scheduled.deliver_at_ms, 0)
        partition.scheduled.clear()
        for offset in sorted(partition.due_changed):
            entry = partition.due_entry(offset)
            lines.append(f"delay entry {offset}: " + ("done" if entry is None else f"{entry.delivery_count} deliveries"))
            self.pending[offset] = entry
        partition.due_changed.clear()
        return lines

    def do_partition(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.settings = named
        self.now_ms = 0
        self.stored: dict[bytes, bytes | None] = {}  # the compacted topic: newest value per key
        self.pending: dict[int, DueEntry | None] = {}
        self.loaded_due: set[int] = set()
        self.partition = self.fresh_partition()
        return []

    def fresh_partition(self) -> SharePartition:
        """A new share partition at the script's start offset (stored at the first write, as the broker does)."""
        partition = SharePartition(start_offset=int(self.settings.get("start", "0")),
                                   max_delivery_attempts=int(self.settings.get("attempts", "3")),
                                   inflight_records_max=int(self.settings.get("inflight", "100")))
        partition.changed = True
        return partition

    def do_time(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.now_ms = int(positional[0])
        self.partition.tick(self.now_ms)
        return [f"next deadline {self.partition.next_deadline_ms()}"]

    def do_read(self, positional: list[str], named: dict[str, str]) -> list[str]:
        first, last = span(positional[0])
        deliver_at = {int(offset): int(at) for offset, _, at in (word.partition("@") for word in positional[1:])}
        self.partition.extend(first, last, self.now_ms, deliver_at)
        return []

    def do_skip(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.partition.skip(*span(positional[0]))
        return []

    def do_acquire(self, positional: list[str], named: dict[str, str]) -> list[str]:
        member, count = positional[0], int(positional[1])
        readable = int(named.get("readable", str(self.partition.end_offset)))
        acquired = self.partition.acquire(member, count, self.now_ms, int(named.get("lease", "1000")), readable)
        ranges = " ".join(f"{show(r.first, r.last)}(#{r.delivery_count})" for r in acquired) or "nothing"
        return [f"{member} acquired {ranges}"]

    def do_ack(self, positional: list[str], named: dict[str, str]) -> list[str]:
        member, where, kind = positional[0], positional[1], AcknowledgeType[positional[2].upper()]
        first, last = span(where)
        settled = self.partition.acknowledge(member, first, last, kind, self.now_ms, lease_ms=int(named.get("lease", "1000")),
                                             error=named.get("error", "").replace("_", " "),
                                             available_at_ms=int(named.get("at", "0")))
        return [f"{member} {kind.name.lower()} {where}: " + ("ok" if settled else "refused (not all leased to it)")]

    def do_leave(self, positional: list[str], named: dict[str, str]) -> list[str]:
        released = self.partition.release_member(positional[0], "the member left")
        return [f"{positional[0]} left: {released} released"]

    def do_trim(self, positional: list[str], named: dict[str, str]) -> list[str]:
        dropped = self.partition.trim(int(positional[0]), int(named.get("unread", "0")))
        return [f"trimmed {dropped}"]

    def do_due(self, positional: list[str], named: dict[str, str]) -> list[str]:
        lines = []
        for raw_key, value in sorted(self.stored.items()):
            key = decode_key(raw_key)
            if not isinstance(key, DelayKey) or value is None or key.offset in self.loaded_due:
                continue
            entry = decode_delay_value(value, key.offset)
            if entry.deliver_at_ms <= self.now_ms:
                self.partition.add_due(entry.offset, entry.deliver_at_ms, entry.delivery_count)
                self.loaded_due.add(entry.offset)
                lines.append(f"due {entry.offset} ({entry.delivery_count} deliveries)")
        return lines or ["nothing due"]

    def do_dead_lettered(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.partition.dead_lettered(*span(positional[0]))
        return []

    def do_log_start(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.partition.note_log_start(int(positional[0]))
        return []

    def do_state(self, positional: list[str], named: dict[str, str]) -> list[str]:
        partition = self.partition
        parts = []
        for run in partition.runs():
            text = f"{show(run.first, run.last)} {run.state.value}"
            if run.state is RecordState.ACQUIRED:
                text += f"({run.owner} #{run.delivery_count} until {run.deadline_ms})"
            elif run.state is not RecordState.DONE:
                text += f"(#{run.delivery_count}" + (f" from {run.deadline_ms}" if run.deadline_ms else "") + ")"
            parts.append(("due " if run.due else "") + text)
        return [f"region {partition.start_offset}..{partition.end_offset}: " + (", ".join(parts) or "empty")]

    def do_stats(self, positional: list[str], named: dict[str, str]) -> list[str]:
        stats = self.partition.stats()
        counts = " ".join(f"{count}x{records}" for count, records in stats.delivery_counts.items()) or "-"
        return [f"available {stats.available} acquired {stats.acquired} dead-lettering {stats.dead_lettering} "
                f"due {stats.due} undone {self.partition.undone_count()} delivery counts {counts}"]

    def do_write(self, positional: list[str], named: dict[str, str]) -> list[str]:
        """Store the delay entries, then the snapshot (``write cut``: the write stops after the entries)."""
        records = [delay_record(KEY, entry) if entry is not None
                   else tombstone(DelayKey(KEY.group_id, KEY.topic, KEY.partition, offset))
                   for offset, entry in sorted(self.pending.items())]
        self.pending.clear()
        if self.partition.changed and positional != ["cut"]:
            self.partition.changed = False
            records.append(partition_record(KEY, self.partition.snapshot()))
        for record in records:
            self.stored[record.key] = record.value
        return [f"wrote {len(records)} records"]

    def do_failover(self, positional: list[str], named: dict[str, str]) -> list[str]:
        snapshot_value = self.stored.get(partition_record(KEY, self.partition.snapshot()).key)
        self.pending.clear()
        self.loaded_due = set()
        if snapshot_value is None:
            for raw_key in [raw_key for raw_key in self.stored if isinstance(decode_key(raw_key), DelayKey)]:
                del self.stored[raw_key]  # no region stored: nothing confirms an entry
            self.partition = self.fresh_partition()
            return ["nothing stored: the partition starts afresh"]
        snapshot = decode_partition_value(snapshot_value)
        self.partition = SharePartition.restore(snapshot, max_delivery_attempts=int(self.settings.get("attempts", "3")),
                                                inflight_records_max=int(self.settings.get("inflight", "100")))
        done = [(run.first, run.last) for run in snapshot.runs if run.done]
        for raw_key, value in list(self.stored.items()):
            key = decode_key(raw_key)
            confirmed = isinstance(key, DelayKey) and (
                key.offset < snapshot.start_offset or any(first <= key.offset <= last for first, last in done))
            if isinstance(key, DelayKey) and value is not None and not confirmed:
                del self.stored[raw_key]  # the region reads that record again
        return [f"restored region {snapshot.start_offset}..{snapshot.end_offset}"]


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_share_script(path: pathlib.Path) -> None:
    """Replay a script; its output must match (or is rewritten under MQBROKER_REWRITE=1)."""
    replay_script(path, Script().run)


def test_there_are_share_scripts() -> None:
    """The scripts exist (a missing testdata directory must not pass silently)."""
    assert len(SCRIPTS) >= 5
