"""Data-driven group coordinator scripts: ``tests/interaction/testdata/groups_*.txt``.

Each case is command lines, ``----``, then everything the coordinator said: join replies,
direct answers, typed errors (by code), evictions, records for ``__consumer_offsets`` and group
state changes. A blank line ends a case; ``#`` lines are comments. ``MQBROKER_REWRITE=1`` rewrites
the expected parts from what the coordinator does now (review the diff before committing).

Members are named by the script; the runner remembers each name's member id, generation and
instance id from the replies. Commands (``k=v`` options, all optional):

  coordinator partitions=events:6,logs:2 delay=0 session=10000 poll=30000 retention=60000 check=600000
                                         a fresh coordinator (ids: ``<name>-<n>``), clock at 0
  time <ms>                              move the clock and run ``tick`` (prints ``next deadline``)
  join <name> [instance=I] [topics=a,b] [assignors=x,y] [session=ms] [poll=ms]
                                         a known name rejoins with its member id (and remembered topics
                                         and assignors); a new name joins with an empty member id;
                                         ``member=ID`` poses with a made-up member id
  sync <name> | heartbeat <name> [nopoll] | leave <name>   (each takes generation=N to pose as a zombie)
  commit <name>|- <topic>-<partition>:<offset>[:metadata] ... [generation=N]   (``-``: standalone)
  written                                the last commit's records became durable
  fetch [partitions...] | describe | list | delete
  topics-changed <topic>... [partitions=events:8]   partition counts changed
  failover                               a new coordinator replays every record written so far
"""

from __future__ import annotations

import itertools
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from mqbroker.errors import BrokerError
from mqbroker.groups.coordinator import GroupCoordinator
from mqbroker.groups.messages import (
    GroupConfig,
    GroupState,
    JoinRequest,
    MemberRequest,
    OffsetCommitRequest,
    PartitionCommit,
)
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import (
    GroupKey,
    OffsetsRecord,
    OffsetStore,
    decode_group_value,
    decode_key,
    decode_offset_value,
)

TESTDATA = pathlib.Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("groups_*.txt"))
REWRITE = os.environ.get("MQBROKER_REWRITE") == "1"
GROUP = "g"


@dataclass(slots=True)
class Identity:
    """What the script knows of one named member."""

    member_id: str = ""
    generation_id: int = -1
    instance: str | None = None
    topics: frozenset[str] = frozenset({"events"})
    assignors: tuple[str, ...] = ("cooperative-sticky",)


@dataclass(slots=True)
class Case:
    """One block of a script: commands (with comments) and the expected output."""

    commands: list[str]
    expected: list[str] = field(default_factory=list)


def parse(text: str) -> list[Case]:
    """Split a script into cases."""
    cases: list[Case] = []
    current: Case | None = None
    in_output = False
    for line in text.splitlines():
        if current is None:
            if not line.strip():
                continue
            current = Case(commands=[])
        if line == "----":
            in_output = True
        elif in_output and not line.strip():
            cases.append(current)
            current, in_output = None, False
        elif in_output:
            current.expected.append(line)
        else:
            current.commands.append(line)
    if current is not None:
        cases.append(current)
    return cases


def render(cases: list[Case]) -> str:
    """Write cases back in the script format."""
    blocks = ["\n".join([*case.commands, "----", *case.expected]) for case in cases]
    return "\n\n".join(blocks) + "\n"


def options(words: list[str]) -> tuple[list[str], dict[str, str]]:
    """Split words into positional arguments and ``k=v`` options."""
    positional = [word for word in words if "=" not in word]
    named = dict(word.split("=", 1) for word in words if "=" in word)
    return positional, named


def partition_list(partitions: frozenset[TopicPartition] | tuple[TopicPartition, ...]) -> str:
    """``events-0,1,2 logs-0`` style, compact and sorted."""
    by_topic: dict[str, list[int]] = {}
    for topic_partition in sorted(partitions):
        by_topic.setdefault(topic_partition.topic, []).append(topic_partition.partition)
    return " ".join(f"{topic}-{','.join(map(str, numbers))}" for topic, numbers in by_topic.items()) or "(none)"


class Script:
    """Drives one coordinator through script commands and renders what came out."""

    def __init__(self) -> None:
        self.new_coordinator({})

    def new_coordinator(self, named: dict[str, str], store: OffsetStore | None = None) -> None:
        """A coordinator with the script's settings (kept across ``failover``)."""
        if store is None:
            self.settings = named
            self.log: list[OffsetsRecord] = []
            self.members: dict[str, Identity] = {}
            self.now_ms = 0
            self.pending_commit: list[OffsetsRecord] = []
        self.counts = parse_counts(self.settings.get("partitions", "events:6"))
        ids = itertools.count(1)
        self.coordinator = GroupCoordinator(
            config=GroupConfig(
                initial_rebalance_delay_ms=int(self.settings.get("delay", "0")),
                offsets_retention_ms=int(self.settings.get("retention", "60000")),
                offsets_retention_check_interval_ms=int(self.settings.get("check", "600000")),
            ),
            partitions_per_topic=lambda topic: self.counts.get(topic, 0),
            new_member_id=lambda client_id: f"{client_id}-{next(ids)}",
            store=store,
            now_ms=self.now_ms,
        )
        self.states: dict[str, GroupState] = {}

    def run(self, command: str) -> list[str]:
        """Execute one command; return its output lines."""
        verb, *words = command.split()
        positional, named = options(words)
        try:
            lines = getattr(self, "do_" + verb.replace("-", "_"))(positional, named)
        except BrokerError as error:
            lines = [f"error {error.code.name}: {error.message}"]
        return lines + self.drain()

    def drain(self) -> list[str]:
        """Join replies, records and state changes since the last command."""
        lines = []
        ready = self.coordinator.ready()
        for reply in ready.replies:
            name = str(reply.request_key)
            if reply.error is not None:
                lines.append(f"reply {name}: error {reply.error.code.name}: {reply.error.message}")
                continue
            response = reply.response
            assert response is not None
            identity = self.members[name]
            identity.member_id, identity.generation_id = response.member_id, response.generation_id
            lines.append(f"reply {name}: member={response.member_id} generation={response.generation_id} "
                         f"assignor={response.assignor}")
        for eviction in ready.evictions:
            lines.append(f"evicted {eviction.member_id} from {eviction.group_id}: {eviction.reason}")
        for record in ready.records:
            self.log.append(record)
            lines.append(describe_record(record))
        for listing in self.coordinator.list_groups():
            if self.states.get(listing.group_id) is not listing.state:
                lines.append(f"group {listing.group_id}: {listing.state.value}")
                self.states[listing.group_id] = listing.state
        return lines

    def request(self, name: str, named: dict[str, str]) -> MemberRequest:
        """The identity a named member sends (``generation=N`` overrides the one it knows)."""
        identity = self.members[name]
        return MemberRequest(group_id=GROUP, member_id=identity.member_id, group_instance_id=identity.instance,
                             generation_id=int(named.get("generation", identity.generation_id)))

    def do_coordinator(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.new_coordinator(named)
        return []

    def do_failover(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.new_coordinator(self.settings, store=OffsetStore.replay(self.log))
        return [f"replayed {len(self.log)} records"]

    def do_time(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.now_ms = int(positional[0])
        self.coordinator.tick(self.now_ms)
        return [f"next deadline {self.coordinator.next_deadline_ms()}"]

    def do_join(self, positional: list[str], named: dict[str, str]) -> list[str]:
        name = positional[0]
        identity = self.members.setdefault(name, Identity(instance=named.get("instance")))
        identity.member_id = named.get("member", identity.member_id)
        if "topics" in named:
            identity.topics = frozenset(named["topics"].split(","))
        if "assignors" in named:
            identity.assignors = tuple(named["assignors"].split(","))
        request = JoinRequest(
            group_id=GROUP,
            member_id=identity.member_id,
            group_instance_id=identity.instance,
            client_id=name,
            client_host=f"/{name}.example",
            session_timeout_ms=int(named.get("session", self.settings.get("session", "10000"))),
            rebalance_timeout_ms=int(named.get("poll", self.settings.get("poll", "30000"))),
            topics=identity.topics,
            assignors=identity.assignors,
        )
        self.coordinator.join(request, name, self.now_ms)
        return []

    def do_sync(self, positional: list[str], named: dict[str, str]) -> list[str]:
        response = self.coordinator.sync(self.request(positional[0], named), self.now_ms)
        return [f"{positional[0]} assigned {partition_list(response.assignment)}"]

    def do_heartbeat(self, positional: list[str], named: dict[str, str]) -> list[str]:
        polled = "nopoll" not in positional[1:]
        code = self.coordinator.heartbeat(self.request(positional[0], named), polled=polled, now_ms=self.now_ms)
        return [f"{positional[0]} heartbeat {code.name}"]

    def do_leave(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.coordinator.leave(self.request(positional[0], named), self.now_ms)
        return []

    def do_commit(self, positional: list[str], named: dict[str, str]) -> list[str]:
        name, *items = positional
        commits = []
        for item in items:
            where, _, rest = item.partition(":")
            offset, _, metadata = rest.partition(":")
            topic, _, partition = where.rpartition("-")
            commits.append(PartitionCommit(topic_partition=TopicPartition(topic, int(partition)),
                                           offset=int(offset), metadata=metadata))
        if name == "-":
            request = OffsetCommitRequest(group_id=GROUP, offsets=tuple(commits))
        else:
            identity = self.members[name]
            request = OffsetCommitRequest(
                group_id=GROUP, member_id=identity.member_id, group_instance_id=identity.instance,
                generation_id=int(named.get("generation", identity.generation_id)), offsets=tuple(commits))
        self.pending_commit = self.coordinator.commit_offsets(request, self.now_ms)
        return [f"commit accepted: {len(self.pending_commit)} records to append"]

    def do_written(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.coordinator.offsets_written(self.pending_commit)
        lines = [describe_record(record) for record in self.pending_commit]
        self.log += self.pending_commit
        self.pending_commit = []
        return lines

    def do_fetch(self, positional: list[str], named: dict[str, str]) -> list[str]:
        wanted = None
        if positional:
            wanted = [TopicPartition(t, int(p)) for t, _, p in (w.rpartition("-") for w in positional)]
        fetched = self.coordinator.fetch_offsets(GROUP, wanted)
        return [
            f"offset {tp}: " + ("none" if committed is None else
                                 f"{committed.offset} metadata={committed.metadata!r} at={committed.commit_timestamp_ms}")
            for tp, committed in sorted(fetched.items())
        ] or ["no offsets"]

    def do_describe(self, positional: list[str], named: dict[str, str]) -> list[str]:
        description = self.coordinator.describe_group(GROUP)
        lines = [f"{description.group_id} {description.state.value} generation={description.generation_id} "
                 f"assignor={description.assignor or '-'}"]
        for member in sorted(description.members, key=lambda m: m.member_id):
            lines.append(f"  {member.member_id} instance={member.group_instance_id or '-'} client={member.client_id} "
                         f"host={member.client_host} {partition_list(member.assignment)}")
        return lines

    def do_list(self, positional: list[str], named: dict[str, str]) -> list[str]:
        return [f"{g.group_id} {g.state.value} {g.protocol_type or '-'}" for g in self.coordinator.list_groups()]

    def do_delete(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.coordinator.delete_group(GROUP, self.now_ms)
        return []

    def do_topics_changed(self, positional: list[str], named: dict[str, str]) -> list[str]:
        if "partitions" in named:
            self.settings = {**self.settings, "partitions": named["partitions"]}
            self.counts = parse_counts(named["partitions"])
        self.coordinator.topics_changed(positional, self.now_ms)
        return []


def parse_counts(text: str) -> dict[str, int]:
    """``events:6,logs:2`` -> partition counts."""
    return {topic: int(count) for topic, count in (item.split(":") for item in text.split(","))}


def describe_record(record: OffsetsRecord) -> str:
    """One ``__consumer_offsets`` record, readable."""
    key = decode_key(record.key)
    if isinstance(key, GroupKey):
        if record.value is None:
            return f"record group {key.group_id}: tombstone"
        metadata = decode_group_value(record.value)
        members = "; ".join(f"{m.member_id} {partition_list(m.assignment)}" for m in metadata.members)
        return f"record group {key.group_id}: generation={metadata.generation_id} members=[{members}]"
    if record.value is None:
        return f"record offset {key.group_id} {key.topic_partition}: tombstone"
    committed = decode_offset_value(record.value)
    return f"record offset {key.group_id} {key.topic_partition}: {committed.offset} at={committed.commit_timestamp_ms}"


def replay_script(path: pathlib.Path, run: Callable[[str], list[str]]) -> None:
    """Run each case's commands through ``run``; the output must match the script's (rewritten under REWRITE)."""
    cases = parse(path.read_text())
    actual_cases = []
    for case in cases:
        output: list[str] = []
        for command in case.commands:
            if command.strip() and not command.startswith("#"):
                output += run(command)
        actual_cases.append(Case(commands=case.commands, expected=output))
    if REWRITE:
        path.write_text(render(actual_cases))
        return
    for case, actual in zip(cases, actual_cases):
        assert actual.expected == case.expected, "\n".join(case.commands)


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_group_script(path: pathlib.Path) -> None:
    """Replay a script; its output must match (or is rewritten under MQBROKER_REWRITE=1)."""
    replay_script(path, Script().run)


def test_there_are_group_scripts() -> None:
    """The scripts exist (a missing testdata directory must not pass silently)."""
    assert len(SCRIPTS) >= 5
