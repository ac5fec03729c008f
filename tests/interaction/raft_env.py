"""A scriptable cluster of RaftCores for the data-driven scripts in testdata/raft_*.txt.

Commands (one per block; the lines after ``----`` are the expected output)::

    add-nodes 3 [voters=1,2,3] [learners=4] [join=true] [pre-vote=false] [check-quorum=false]
              [election=10] [heartbeat=1] [append-entries-max=1024]
        create nodes with the next free ids; ``join`` starts them with an empty configuration
    campaign 1                  node 1 starts an election (pre-vote first if enabled)
    propose 1 data              node 1 proposes ``data``
    propose-conf 1 add-voter 4  node 1 proposes a membership change (add-voter|add-learner|remove-node)
    read-index 1 ctx            node 1 asks for a read index
    tick 1 [count]              logical time passes on node 1
    process-ready 1 [2 ...]     persist, print, queue the messages, apply and advance
    deliver-msgs 1 [2 ...]      deliver every queued message addressed to these nodes, in order
    drop-msgs 1 [2 ...]         lose every queued message addressed to these nodes
    stabilize [1 2 ...]         process-ready and deliver-msgs until nothing moves
    partition 1 2 / 3           messages between groups are lost at delivery
    heal                        end every partition
    crash 1 / restart 1         lose everything unpersisted / resume from storage
    compact 1 index             node 1 snapshots its applied state at ``index`` and drops the log before it
    status 1 / log 1            show a node's state / log
"""

from __future__ import annotations

import dataclasses
import random

from mqbroker.raft.core import RaftCore, Ready
from mqbroker.raft.settings import RaftSettings
from mqbroker.raft.errors import ConfigurationChangeRefusedError, ProposalDroppedError
from mqbroker.raft.memory_storage import MemoryRaftStorage
from mqbroker.raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Configuration,
    ConfigurationChange,
    ConfigurationChangeKind,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    VoteRequest,
    VoteResponse,
)
from mqbroker.raft.codec import decode_configuration


def describe_configuration(configuration: Configuration) -> str:
    """``voters=(1 2 3) learners=(4)``."""
    voters = " ".join(map(str, sorted(configuration.voters)))
    learners = " ".join(map(str, sorted(configuration.learners)))
    return f"voters=({voters}) learners=({learners})"


def describe_entry(entry: Entry) -> str:
    """``term/index "data"`` or ``term/index conf voters=(...)``."""
    if entry.kind is EntryKind.CONFIGURATION:
        return f"{entry.term}/{entry.index} conf {describe_configuration(decode_configuration(entry.data))}"
    return f"{entry.term}/{entry.index} {entry.data.decode()!r}"


def describe_message(message: Message) -> str:
    """One line per message, ``from->to Kind term=T ...``."""
    head = f"{message.from_id}->{message.to_id}"
    match message:
        case VoteRequest():
            kind = "PreVote" if message.pre_vote else "Vote"
            return f"{head} {kind} term={message.term} last={message.last_log_term}/{message.last_log_index}"
        case VoteResponse():
            kind = "PreVoteResponse" if message.pre_vote else "VoteResponse"
            return f"{head} {kind} term={message.term} {'granted' if message.granted else 'rejected'}"
        case AppendEntries():
            entries = ", ".join(describe_entry(entry) for entry in message.entries)
            return (
                f"{head} Append term={message.term} prev={message.previous_term}/{message.previous_index}"
                f" commit={message.commit_index} entries=[{entries}]"
            )
        case AppendEntriesResponse():
            text = f"{head} AppendResponse term={message.term} index={message.index}"
            if message.rejected:
                text += f" rejected hint={message.hint_term}/{message.hint_index}"
            return text
        case Heartbeat():
            context = f" context={message.context.decode()}" if message.context else ""
            return f"{head} Heartbeat term={message.term} commit={message.commit_index}{context}"
        case HeartbeatResponse():
            context = f" context={message.context.decode()}" if message.context else ""
            return f"{head} HeartbeatResponse term={message.term}{context}"
        case InstallSnapshot():
            metadata = message.snapshot.metadata
            return (
                f"{head} Snapshot term={message.term} at={metadata.term}/{metadata.index}"
                f" {describe_configuration(metadata.configuration)}"
            )
    raise AssertionError(message)


@dataclasses.dataclass
class ScriptNode:
    """One node of the scripted cluster: its core, its "disk" and its applied state machine."""

    settings: RaftSettings
    storage: MemoryRaftStorage
    core: RaftCore
    applied: list[str]


class InteractionEnv:
    """The cluster a script drives; ``handle(command)`` returns the command's output lines."""

    def __init__(self) -> None:
        self.nodes: dict[int, ScriptNode] = {}
        self.network: list[Message] = []
        self.groups: list[set[int]] = []

    def handle(self, command: str) -> list[str]:
        """Run one command line."""
        name, *arguments = command.split()
        handler = getattr(self, "command_" + name.replace("-", "_"))
        return handler(arguments) or ["ok"]

    # ---- building --------------------------------------------------------------------------

    def command_add_nodes(self, arguments: list[str]) -> list[str]:
        count = int(arguments[0])
        options = dict(argument.split("=") for argument in arguments[1:])
        first = max(self.nodes, default=0) + 1
        new_ids = list(range(first, first + count))
        voters = frozenset(map(int, options["voters"].split(","))) if "voters" in options else frozenset(new_ids)
        learners = frozenset(map(int, options["learners"].split(","))) if "learners" in options else frozenset()
        configuration = Configuration() if options.get("join") == "true" else Configuration(voters=voters, learners=learners)
        lines = []
        for node_id in new_ids:
            settings = RaftSettings(
                node_id=node_id,
                election_ticks=int(options.get("election", 10)),
                heartbeat_ticks=int(options.get("heartbeat", 1)),
                pre_vote=options.get("pre-vote", "true") == "true",
                check_quorum=options.get("check-quorum", "true") == "true",
                append_entries_max=int(options.get("append-entries-max", 1024)),
            )
            storage = MemoryRaftStorage(configuration)
            self.nodes[node_id] = ScriptNode(settings, storage, self._new_core(settings, storage), [])
            lines.append(f"node {node_id}: {describe_configuration(configuration)}")
        return lines

    @staticmethod
    def _new_core(settings: RaftSettings, storage: MemoryRaftStorage) -> RaftCore:
        return RaftCore(settings, storage, random.Random(settings.node_id))

    # ---- inputs ----------------------------------------------------------------------------

    def command_campaign(self, arguments: list[str]) -> list[str]:
        self.nodes[int(arguments[0])].core.campaign()
        return []

    def command_propose(self, arguments: list[str]) -> list[str]:
        try:
            index = self.nodes[int(arguments[0])].core.propose(arguments[1].encode())
        except ProposalDroppedError as error:
            return [f"error: {error.message}"]
        return [f"index {index}"]

    def command_propose_conf(self, arguments: list[str]) -> list[str]:
        change = ConfigurationChange(kind=ConfigurationChangeKind(arguments[1]), node_id=int(arguments[2]))
        try:
            index = self.nodes[int(arguments[0])].core.propose_configuration_change(change)
        except (ProposalDroppedError, ConfigurationChangeRefusedError) as error:
            return [f"error: {error.message}"]
        return [f"index {index}"]

    def command_read_index(self, arguments: list[str]) -> list[str]:
        try:
            self.nodes[int(arguments[0])].core.read_index(arguments[1].encode())
        except ProposalDroppedError as error:
            return [f"error: {error.message}"]
        return []

    def command_tick(self, arguments: list[str]) -> list[str]:
        node = self.nodes[int(arguments[0])]
        for _ in range(int(arguments[1]) if len(arguments) > 1 else 1):
            node.core.tick()
        return []

    # ---- readiness and the network ---------------------------------------------------------

    def command_process_ready(self, arguments: list[str]) -> list[str]:
        lines: list[str] = []
        for node_id in map(int, arguments):
            lines.extend(self._process_ready(node_id))
        return lines

    def _process_ready(self, node_id: int) -> list[str]:
        node = self.nodes[node_id]
        ready = node.core.ready()
        node.storage.save(ready.hard_state, ready.entries, ready.snapshot)
        self.network.extend(ready.messages)
        if ready.snapshot is not None:
            node.applied = ready.snapshot.data.decode().split(",") if ready.snapshot.data else []
        node.applied.extend(entry.data.decode() for entry in ready.committed_entries if entry.data)
        node.core.advance(ready)
        return [f"> {node_id} handling Ready", *("  " + line for line in self._describe_ready(ready))]

    @staticmethod
    def _describe_ready(ready: Ready) -> list[str]:
        lines = []
        if ready.soft_state is not None:
            lines.append(f"State: {ready.soft_state.role.value} leader={ready.soft_state.leader_id}")
        if ready.hard_state is not None:
            hard = ready.hard_state
            lines.append(f"HardState term={hard.term} vote={hard.vote} commit={hard.commit}")
        if ready.snapshot is not None:
            metadata = ready.snapshot.metadata
            lines.append(f"Snapshot at={metadata.term}/{metadata.index} {describe_configuration(metadata.configuration)}")
        for title, entries in (("Entries", ready.entries), ("CommittedEntries", ready.committed_entries)):
            if entries:
                lines.append(f"{title}:")
                lines.extend("  " + describe_entry(entry) for entry in entries)
        if ready.messages:
            lines.append("Messages:")
            lines.extend("  " + describe_message(message) for message in ready.messages)
        for read_state in ready.read_states:
            lines.append(f"ReadState index={read_state.index} context={read_state.context.decode()}")
        return lines

    def _connected(self, first: int, second: int) -> bool:
        return not any((first in group) != (second in group) for group in self.groups)

    def command_deliver_msgs(self, arguments: list[str]) -> list[str]:
        targets = set(map(int, arguments))
        delivered = [message for message in self.network if message.to_id in targets]
        self.network = [message for message in self.network if message.to_id not in targets]
        lines = []
        for message in delivered:
            if not self._connected(message.from_id, message.to_id):
                lines.append(f"{describe_message(message)} DROPPED (partition)")
                continue
            lines.append(describe_message(message))
            self.nodes[message.to_id].core.step(message)
        return lines

    def command_drop_msgs(self, arguments: list[str]) -> list[str]:
        targets = set(map(int, arguments))
        dropped = [message for message in self.network if message.to_id in targets]
        self.network = [message for message in self.network if message.to_id not in targets]
        return [f"dropped: {describe_message(message)}" for message in dropped]

    def command_stabilize(self, arguments: list[str]) -> list[str]:
        node_ids = list(map(int, arguments)) or sorted(self.nodes)
        lines: list[str] = []
        while True:
            ready_ids = [node_id for node_id in node_ids if self.nodes[node_id].core.has_ready()]
            targets = [node_id for node_id in node_ids if any(m.to_id == node_id for m in self.network)]
            if not ready_ids and not targets:
                return lines
            for node_id in ready_ids:
                lines.extend(self._process_ready(node_id))
            for node_id in targets:
                delivered = self.command_deliver_msgs([str(node_id)])
                if delivered:
                    lines.append(f"> {node_id} receiving messages")
                    lines.extend("  " + line for line in delivered)

    def command_partition(self, arguments: list[str]) -> list[str]:
        text = " ".join(arguments)
        self.groups = [set(map(int, group.split())) for group in text.split("/")]
        return []

    def command_heal(self, arguments: list[str]) -> list[str]:
        self.groups = []
        return []

    def command_crash(self, arguments: list[str]) -> list[str]:
        node = self.nodes[int(arguments[0])]
        node.core = self._new_core(node.settings, node.storage)
        node.applied = []  # the state machine is rebuilt from the snapshot and the log
        snapshot = node.storage.snapshot()
        if snapshot.data:
            node.applied = snapshot.data.decode().split(",")
        return []

    command_restart = command_crash

    def command_compact(self, arguments: list[str]) -> list[str]:
        node = self.nodes[int(arguments[0])]
        index = int(arguments[1])
        assert index == node.core.log.applied, "the script state machine can only snapshot its applied state"
        snapshot = node.core.create_snapshot(index, ",".join(node.applied).encode())
        node.storage.compact(snapshot)
        return [f"snapshot at={snapshot.metadata.term}/{snapshot.metadata.index} applied=[{','.join(node.applied)}]"]

    # ---- inspection ------------------------------------------------------------------------

    def command_status(self, arguments: list[str]) -> list[str]:
        lines = []
        for node_id in map(int, arguments or sorted(self.nodes)):
            status = self.nodes[node_id].core.status()
            lines.append(
                f"{node_id}: {status.role.value} term={status.term} vote={status.vote} leader={status.leader_id}"
                f" commit={status.commit_index} applied={status.applied_index} log={status.first_index}..{status.last_index}"
                f" {describe_configuration(status.configuration)}"
            )
            lines.extend(f"  progress {peer}: {text}" for peer, text in status.progress.items() if peer != node_id)
        return lines

    def command_log(self, arguments: list[str]) -> list[str]:
        node = self.nodes[int(arguments[0])]
        log = node.core.log
        lines = [describe_entry(entry) for entry in log.entries(log.first_index(), log.last_index() + 1)]
        lines.append(f"applied: [{','.join(node.applied)}]")
        return lines
