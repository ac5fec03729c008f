"""Random client behaviour against the coordinator: no partition ever has two live owners, and groups settle."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mqbroker.errors import BrokerError, ErrorCode, RebalanceInProgressError
from mqbroker.groups.coordinator import GroupCoordinator
from mqbroker.groups.messages import GroupConfig, GroupState, JoinRequest, MemberRequest
from mqbroker.groups.model import TopicPartition

PARTITIONS = 5
CLIENTS = 3


@dataclass
class Client:
    """A well-behaved consumer: reads what its last sync gave it, revokes before rejoining."""

    instance: str | None
    member_id: str = ""
    generation_id: int = -1
    owned: frozenset[TopicPartition] = frozenset()
    waiting: bool = False

    def identity(self) -> MemberRequest:
        return MemberRequest(group_id="g", member_id=self.member_id, group_instance_id=self.instance,
                             generation_id=self.generation_id)


class World:
    """A coordinator, its clients and a clock."""

    def __init__(self, static: bool) -> None:
        ids = itertools.count(1)
        self.coordinator = GroupCoordinator(
            config=GroupConfig(initial_rebalance_delay_ms=0),
            partitions_per_topic=lambda topic: PARTITIONS,
            new_member_id=lambda client_id: f"{client_id}-{next(ids)}",
            now_ms=0,
        )
        self.clients = [Client(instance=f"host-{i}" if static else None) for i in range(CLIENTS)]
        self.now_ms = 0

    def lose(self, client: Client) -> None:
        """The client learns it is out: it stops reading everything (the 'lost' callback)."""
        client.member_id, client.generation_id, client.owned, client.waiting = "", -1, frozenset(), False

    def drain(self) -> None:
        for reply in self.coordinator.ready().replies:
            client = self.clients[int(reply.request_key)]
            client.waiting = False
            if reply.response is None:
                self.lose(client)
            else:
                client.member_id, client.generation_id = reply.response.member_id, reply.response.generation_id

    def act(self, action: str, index: int, delay_ms: int) -> None:
        client = self.clients[index]
        try:
            if action == "join" and not client.waiting:
                self.coordinator.join(JoinRequest(group_id="g", member_id=client.member_id,
                                                  group_instance_id=client.instance, client_id=f"c{index}",
                                                  session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                                                  topics=frozenset({"t"})), str(index), self.now_ms)
                client.waiting = True  # parked: the reply comes out of ready() (a refused join raised above)
            elif action == "sync" and client.member_id and not client.waiting:
                client.owned = self.coordinator.sync(client.identity(), self.now_ms).assignment
            elif action == "heartbeat" and client.member_id and not client.waiting:
                self.coordinator.heartbeat(client.identity(), polled=True, now_ms=self.now_ms)
            elif action == "leave" and client.member_id and not client.waiting:
                self.coordinator.leave(client.identity(), self.now_ms)
                self.lose(client)
            elif action == "crash":
                self.clients[index] = Client(instance=client.instance)
            elif action == "wait":
                self.now_ms += delay_ms
                self.coordinator.tick(self.now_ms)
        except RebalanceInProgressError:
            # A sync during a rebalance: the client keeps what it owns and rejoins when it next acts.
            assert action == "sync" and client.member_id
        except BrokerError:
            self.lose(client)  # e.g. evicted meanwhile (UNKNOWN_MEMBER_ID): start over with a fresh join
        self.drain()

    def check_no_partition_has_two_live_owners(self) -> None:
        group = self.coordinator.groups.get("g")
        live = set(group.members) if group is not None else set()
        seen: set[TopicPartition] = set()
        for client in self.clients:
            if client.member_id in live:
                assert not (client.owned & seen), (client, seen)
                seen |= client.owned

    def settle(self) -> None:
        """Everyone behaves, heartbeating every 3 s, until crashed members' sessions ran out and the group is stable."""
        for _ in range(20):
            self.act("wait", 0, 3_000)
            for index, client in enumerate(self.clients):
                if not client.member_id or client.waiting:
                    self.act("join", index, 0)
                    continue
                try:
                    code = self.coordinator.heartbeat(client.identity(), polled=True, now_ms=self.now_ms)
                except BrokerError:
                    self.lose(client)
                    continue
                self.act("join" if code is ErrorCode.REBALANCE_IN_PROGRESS else "sync", index, 0)
                self.check_no_partition_has_two_live_owners()


actions = st.lists(
    st.tuples(st.sampled_from(["join", "sync", "heartbeat", "leave", "crash", "wait"]),
              st.integers(0, CLIENTS - 1), st.integers(0, 12_000)),
    max_size=40,
)


@settings(max_examples=150)
@given(static=st.booleans(), steps=actions)
# Evicted after its session timed out, the member rejoins under its old id and is refused.
@example(static=False, steps=[("join", 0, 0), ("sync", 0, 0), ("wait", 0, 10_000), ("join", 0, 0)])
def test_no_partition_ever_has_two_live_owners_and_the_group_settles(static, steps) -> None:
    world = World(static)
    for action, index, delay_ms in steps:
        world.act(action, index, delay_ms)
        world.check_no_partition_has_two_live_owners()
    world.settle()
    group = world.coordinator.groups["g"]
    assert group.state is GroupState.STABLE
    owned = [p for client in world.clients for p in client.owned]
    assert sorted(owned) == [TopicPartition("t", p) for p in range(PARTITIONS)]
