"""Start-up replay of the virtual host: its exchanges, queues, bindings, queue states and source positions,
read back from their compacted topics and applied (a record that does not decode is counted and skipped)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mqbroker import errors, limits
from mqbroker.interfaces import IBroker
from mqbroker.model import LATEST_TIMESTAMP, FetchPosition, FetchRequest, Principal, TopicSpec
from mqbroker.protocols.amqp.routing import Exchange
from mqbroker.protocols.amqp.sources import SOURCE_POSITIONS_TOPIC, Positions, decode_positions
from mqbroker.protocols.amqp.spec import AmqpError
from mqbroker.protocols.amqp.stored import METADATA_TOPIC, QUEUE_STATE_TOPIC, QueueDeclaration, decode_declaration
from mqbroker.protocols.amqp.transient import left_over
from mqbroker.records.readable import UnreadableBatch, next_offset_after, readable_records

if TYPE_CHECKING:
    from mqbroker.protocols.amqp.vhost import VirtualHost


@dataclass(frozen=True)
class Replayed:
    """What a replay found besides the declarations it applied."""

    #: The end of ``__amqp_metadata`` when the replay began (the definitions follower starts there).
    metadata_end: int
    #: How many brokers the cluster has.
    brokers_count: int
    #: Each source topic's stored read positions.
    positions: dict[str, Positions]
    #: How many queues and bindings were declared in the records (applied or not).
    queues_count: int
    bindings_count: int


async def read_compacted(broker: IBroker, principal: Principal, topic: str,
                         skipped: Callable[[UnreadableBatch], None]) -> list[Any]:
    """Every readable record of partition 0 of ``topic``, read to its end (``skipped`` hears of unreadable batches)."""
    records: list[Any] = []
    offset = 0
    while True:
        position = FetchPosition(topic=topic, partition=0, offset=offset, max_bytes=limits.amqp_replay_fetch_bytes_max)
        request = FetchRequest(positions=(position,), response_bytes_max=limits.amqp_replay_fetch_bytes_max)
        [result] = await broker.fetch(principal, request)
        if result.error is not None:
            raise result.error
        records += readable_records(result.records, offset, topic=topic, partition=0, skipped=skipped)
        offset = next_offset_after(result.records, offset)
        if offset >= result.high_watermark or not result.records:
            return records


async def replay(vhost: VirtualHost) -> Replayed:
    """Create the compacted topics if missing, read them all, then apply the declarations to ``vhost``
    (every read first: the virtual host's state changes only once all succeeded)."""
    broker, principal = vhost.broker, vhost.principal

    async def read_all(topic: str) -> list[Any]:
        return await read_compacted(broker, principal, topic, lambda batch: vhost.skip_unreadable("AMQP replay", batch))

    for topic in (METADATA_TOPIC, QUEUE_STATE_TOPIC, SOURCE_POSITIONS_TOPIC):
        spec_ = TopicSpec(name=topic, partitions=1, configs={"cleanup.policy": "compact"})
        try:
            await broker.create_topic(principal, spec_, False)
        except errors.TopicAlreadyExistsError:
            pass  # replayed below
    declarations: dict[bytes, Any] = {}
    metadata_end = (await broker.list_offset(principal, METADATA_TOPIC, 0, LATEST_TIMESTAMP)).offset
    brokers = (await broker.metadata(principal, [METADATA_TOPIC], False)).brokers
    for record in await read_all(METADATA_TOPIC):
        if record.key is not None:
            declarations[record.key] = record
    snapshots = {record.key.decode("utf-8", "surrogateescape"): record
                 for record in await read_all(QUEUE_STATE_TOPIC) if record.key is not None}
    stored_positions = {}
    for record in await read_all(SOURCE_POSITIONS_TOPIC):
        if record.key is not None and record.value is not None:
            try:
                stored_positions[record.key.decode("utf-8", "surrogateescape")] = decode_positions(record.value)
            except AmqpError as error:
                vhost.skip_bad_record(SOURCE_POSITIONS_TOPIC, record.offset, error, "its source reads from the end")
    queues, bindings = [], []
    for key, record in declarations.items():
        if record.value is None:
            continue
        try:
            declared = decode_declaration(key, record.value)
            if isinstance(declared, Exchange):
                vhost.router.declare_exchange(declared)
        except AmqpError as error:
            vhost.skip_bad_record(METADATA_TOPIC, record.offset, error, "the declaration is lost")
            continue
        if isinstance(declared, Exchange):
            vhost.persisted_exchanges[declared.name] = declared
        elif isinstance(declared, QueueDeclaration):
            queues.append((declared, record.offset))
        else:
            bindings.append((declared, record.offset))
    for declaration, offset in queues:
        snapshot = snapshots.get(declaration.name)
        try:
            vhost.add_queue(declaration, owner=None, snapshot=snapshot.value if snapshot else None)
        except ValueError as error:  # QueueState.restore: the snapshot does not parse
            assert snapshot is not None
            vhost.skip_bad_record(QUEUE_STATE_TOPIC, snapshot.offset, error, "the queue is read from its start")
            vhost.add_queue(declaration, owner=None)
        except AmqpError as error:  # QueuePolicy: arguments no declare would have accepted
            vhost.skip_bad_record(METADATA_TOPIC, offset, error, "the queue is not declared")
    for binding, offset in bindings:
        try:
            vhost.router.bind(binding)
        except AmqpError as error:
            vhost.skip_bad_record(METADATA_TOPIC, offset, error, "the binding is lost")
            continue
        vhost.persisted_bindings.add(binding)
    return Replayed(metadata_end=metadata_end, brokers_count=len(brokers), positions=stored_positions,
                    queues_count=len(queues), bindings_count=len(bindings))


async def forget_previous_run(vhost: VirtualHost) -> None:
    """After the replay, delete cluster-wide the transient definitions this broker's previous run left stored
    (``transient.left_over``): its exclusive and non-durable queues with their bindings, its non-durable exchanges (or
    give them the home of other brokers' queues still bound to them). Gone from this broker before it returns (it
    serves no client before); a write that fails is logged, and the next start deletes what is left."""
    gone = left_over(vhost.node_id, {name: queue.declaration for name, queue in vhost.queues.items()},
                     list(vhost.router.exchanges.values()), list(vhost.router.bindings))
    dropped = [vhost.queues[name] for name in gone.queues]
    for queue in dropped:
        vhost.drop_queue(queue)  # with its bindings
    for name in gone.exchanges:
        if name in vhost.router.exchanges:  # an auto-delete one went with its last binding
            vhost.router.delete_exchange(name)
    for name, home in gone.rehomed.items():
        if name in vhost.router.exchanges:
            vhost.router.replace_exchange(dataclasses.replace(vhost.router.exchanges[name], home=home))
    try:
        if gone.exchanges or gone.rehomed:
            await vhost.sync_metadata()
        for queue in dropped:
            await vhost.erase_queue(queue)
    except errors.BrokerError as error:
        vhost.log.warn("AMQP definitions of the previous run not all deleted ({error}); the next start deletes the "
                       "rest", error=error)
    except Exception:  # the virtual host starts all the same (a start attempt that failed would replay again)
        vhost.log.failure("deleting the previous run's AMQP definitions failed; the next start deletes the rest")
