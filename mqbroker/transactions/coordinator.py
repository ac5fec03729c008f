# -*- test-case-name: tests.unit.transactions.test_coordinator -*-
"""The transaction coordinator: a pure state machine over the transactional ids of one ``__transaction_state`` partition.

Kafka's protocol (KIP-98) with KIP-890's server-side verification (part 1) and epoch bumps (part 2,
``epoch_bumps``: an EndTxn with ``bump_epoch`` moves the producer to the next epoch). Per transactional id:
InitProducerId fences the previous incarnation (a new epoch; its open transaction is aborted
first), AddPartitionsToTxn / AddOffsetsToTxn make the transaction Ongoing with those partitions,
EndTxn decides (PrepareCommit / PrepareAbort), the markers are written to every partition, and
the transaction completes (CompleteCommit / CompleteAbort). A transaction older than its timeout
is aborted by the coordinator, which bumps the epoch so the late producer is fenced.

Every change is persisted before it is answered or acted on: a request that changes state
leaves a record in ``ready().writes``; its reply, its markers, or its completion come only once
the caller reports the write durable (``written``). One write per transactional id is in flight
at a time. A request that meets a write in flight, or a transaction whose markers are being
written, is parked and run again when that finishes, so a producer that begins its next
transaction right after committing waits in the broker, not in a retry loop. Verification
requests (``verify``) are never parked: they answer from the persisted state at once.

Fewer writes, each as durable: AddPartitions/AddOffsets parked together share one write (the
union of their partitions), and those parked behind a decision's markers go out in the same
write as its completion (CompleteCommit then Ongoing, two records in one batch, so both are
durable or neither). Once the markers are written the completion waits up to
``completion_linger_ms`` for such a request (any request of the id, or the deadline, writes it):
a producer committing in a loop costs one ``__transaction_state`` write per transaction fewer.
Nothing is answered or acted on before the write that carries it is durable.

The caller (``service.TransactionService``) duties: pass ``now_ms`` to every call; call ``tick``
at ``next_deadline_ms()``; after every call drain ``ready()``: answer the replies, append the
writes and report each with ``written``, write the markers and report them with
``markers_written``. A coordinator is built for one leader epoch of its partition (the
coordinator epoch every marker carries); on takeover a new one replays the partition and
finishes the transactions whose markers may not all be written.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from mqbroker.errors import (
    BrokerError,
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from mqbroker.groups.model import TopicPartition
from mqbroker.transactions import epoch_bumps, views
from mqbroker.transactions.log_records import (
    TransactionLogRecord,
    TransactionMetadata,
    metadata_record,
    tombstone,
)
from mqbroker.transactions.messages import (
    PRODUCER_EPOCH_MAX,
    TRANSITIONS,
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitTransactionsRequest,
    MarkersToWrite,
    ProducerIdAndEpoch,
    Ready,
    Reply,
    TransactionConfig,
    TransactionDescription,
    TransactionListing,
    TransactionMarker,
    TransactionState,
)
from mqbroker.transactions.parking import (
    PARKED_PER_ID_MAX,
    Parked,
    Request,
    leading_additions,
)

NO_START = -1


class _After(enum.Enum):
    """What a durable write leads to."""

    REPLY = "reply"  # answer the request that caused it
    MARKERS = "markers"  # a decision: write its markers (and answer the EndTxn, if one caused it)
    COMPLETED = "completed"  # the transaction is over
    EXPIRED = "expired"  # the id is forgotten


@dataclass(frozen=True, slots=True, kw_only=True)
class _Write:
    """A change waiting for its record to be durable."""

    target: TransactionMetadata
    after: _After
    request_keys: tuple[Hashable, ...] = ()
    response: object = None


class TransactionCoordinator:
    """InitProducerId, AddPartitions/AddOffsets, EndTxn, verification, timeouts and markers for many ids."""

    def __init__(
        self,
        *,
        config: TransactionConfig,
        coordinator_epoch: int,
        offsets_partition_of: Callable[[str], TopicPartition],
        state: dict[str, TransactionMetadata] | None = None,
        now_ms: int,
    ) -> None:
        self.config = config
        self.coordinator_epoch = coordinator_epoch
        self.offsets_partition_of = offsets_partition_of
        self._metadata: dict[str, TransactionMetadata] = dict(state or {})
        self._writes_in_flight: dict[str, _Write] = {}
        self._parked: dict[str, list[Parked]] = {}
        self._replies: list[Reply] = []
        self._writes: list[tuple[str, TransactionLogRecord]] = []
        self._markers: list[MarkersToWrite] = []
        #: Transactional id -> when its completion is written if no request comes first (markers all written).
        self._completing: dict[str, int] = {}
        self.next_expiry_check_ms = now_ms + config.expiration_check_interval_ms
        for metadata in sorted(self._metadata.values(), key=lambda m: m.transactional_id):
            if metadata.state.prepared:  # the previous coordinator may not have written them all
                self._emit_markers(metadata)

    # -- outputs -----------------------------------------------------------------------------

    def ready(self) -> Ready:
        """Drain the replies, writes and markers produced since the last call (see the module docstring)."""
        ready = Ready(replies=tuple(self._replies), writes=tuple(self._writes), markers=tuple(self._markers))
        self._replies, self._writes, self._markers = [], [], []
        return ready

    def _reply(self, request_key: Hashable, response: object = None, error: BrokerError | None = None) -> None:
        self._replies.append(Reply(request_key=request_key, response=response, error=error))

    def _write(self, current: TransactionMetadata | None, target: TransactionMetadata, after: _After,
               request_keys: tuple[Hashable, ...] = (), response: object = None,
               through: TransactionMetadata | None = None) -> None:
        """Persist ``target`` (a legal step from ``current``, or from ``through``, written first in the same batch)
        before acting on it."""
        assert target.transactional_id not in self._writes_in_flight, "one write per transactional id"
        steps = [current, through, target] if through is not None else [current, target]
        for before, after_step in zip(steps, steps[1:]):
            if before is not None and after_step is not None:
                assert after_step.state in TRANSITIONS[before.state], (before.state, after_step.state)
        record = tombstone(target.transactional_id) if after is _After.EXPIRED else metadata_record(target)
        self._writes_in_flight[target.transactional_id] = _Write(target=target, after=after,
                                                                 request_keys=request_keys, response=response)
        if through is not None:
            self._writes.append((target.transactional_id, metadata_record(through)))
        self._writes.append((target.transactional_id, record))

    def _emit_markers(self, metadata: TransactionMetadata) -> None:
        marker = TransactionMarker(
            producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
            coordinator_epoch=self.coordinator_epoch,
            committed=metadata.state is TransactionState.PREPARE_COMMIT, partitions=metadata.partitions,
        )
        self._markers.append(MarkersToWrite(transactional_id=metadata.transactional_id, marker=marker))

    # -- requests ----------------------------------------------------------------------------

    def needs_producer_id(self, transactional_id: str) -> bool:
        """True when an InitProducerId for this id would need a fresh producer id (unknown id, or epoch exhausted)."""
        metadata = self._metadata.get(transactional_id)
        return metadata is None or metadata.producer_epoch >= PRODUCER_EPOCH_MAX

    def init_producer_id(
        self, request: InitTransactionsRequest, request_key: Hashable, now_ms: int, fresh_producer_id: int | None = None
    ) -> None:
        """Fence the previous incarnation and answer the producer id and its new epoch (parked until durable)."""
        if not 0 < request.transaction_timeout_ms <= self.config.transaction_timeout_ms_max:
            raise InvalidTransactionTimeoutError(
                f"transaction timeout {request.transaction_timeout_ms} ms is outside (0, "
                f"{self.config.transaction_timeout_ms_max}] ms (transaction_timeout_ms_max)"
            )
        if not request.transactional_id:
            raise InvalidRequestError("a transactional id must not be empty")
        current = self._metadata.get(request.transactional_id)
        if self._park_if_busy(request.transactional_id, request, request_key, now_ms):
            return
        if current is not None and current.state is TransactionState.ONGOING:
            # Abort the previous incarnation's transaction under a new epoch, then run this again.
            self._abort(current, now_ms, bump_epoch=True)
            self._park(request.transactional_id, request, request_key)
            return
        if current is None or current.producer_epoch >= PRODUCER_EPOCH_MAX:
            if fresh_producer_id is None:
                raise ConcurrentTransactionsError(
                    f"transactional id {request.transactional_id!r} needs a new producer id; retry"
                )
            producer_id, epoch = fresh_producer_id, 0
        else:
            producer_id, epoch = current.producer_id, current.producer_epoch + 1
        target = TransactionMetadata(
            transactional_id=request.transactional_id, producer_id=producer_id, producer_epoch=epoch,
            timeout_ms=request.transaction_timeout_ms, state=TransactionState.EMPTY, partitions=frozenset(),
            start_ms=NO_START, last_update_ms=now_ms,
        )
        self._write(current, target, _After.REPLY, (request_key,),
                    ProducerIdAndEpoch(producer_id=producer_id, producer_epoch=epoch))

    def add_partitions(self, request: AddPartitionsRequest, request_key: Hashable, now_ms: int) -> None:
        """Add partitions to the producer's transaction (starting it); answered once durable."""
        current = self._checked(request.transactional_id, request.producer_id, request.producer_epoch)
        if self._park_if_busy(request.transactional_id, request, request_key, now_ms):
            return
        assert current is not None
        if current.state is TransactionState.ONGOING and request.partitions <= current.partitions:
            self._reply(request_key)
            return
        self._write(current, self._with_partitions(current, request.partitions, now_ms), _After.REPLY, (request_key,))

    def _with_partitions(self, current: TransactionMetadata, partitions: frozenset[TopicPartition],
                         now_ms: int) -> TransactionMetadata:
        """``current`` Ongoing with ``partitions`` added (a transaction starts if it was not Ongoing)."""
        ongoing = current.state is TransactionState.ONGOING
        combined = current.partitions | partitions if ongoing else partitions
        if len(combined) > self.config.partitions_per_transaction_max:
            raise InvalidRequestError(
                f"a transaction may write to at most {self.config.partitions_per_transaction_max} partitions"
            )
        return dataclasses.replace(
            current, state=TransactionState.ONGOING, partitions=frozenset(combined),
            start_ms=current.start_ms if ongoing else now_ms, last_update_ms=now_ms,
        )

    def add_offsets(self, request: AddOffsetsRequest, request_key: Hashable, now_ms: int) -> None:
        """Add the group's ``__consumer_offsets`` partition to the transaction (its TxnOffsetCommit goes there)."""
        self.add_partitions(
            AddPartitionsRequest(
                transactional_id=request.transactional_id, producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                partitions=frozenset({self.offsets_partition_of(request.group_id)}),
            ),
            request_key, now_ms,
        )

    def verify(self, request: AddPartitionsRequest) -> None:
        """KIP-890: raise unless the producer's current transaction is Ongoing with all these partitions."""
        current = self._checked(request.transactional_id, request.producer_id, request.producer_epoch)
        assert current is not None
        if current.state is not TransactionState.ONGOING:
            raise InvalidTxnStateError(
                f"transactional id {request.transactional_id!r} has no ongoing transaction (it is "
                f"{current.state.value}); add the partitions (AddPartitionsToTxn) before writing"
            )
        missing = request.partitions - current.partitions
        if missing:
            raise InvalidTxnStateError(
                f"the ongoing transaction of {request.transactional_id!r} does not include "
                f"{', '.join(sorted(map(str, missing)))}; add them (AddPartitionsToTxn) before writing"
            )

    def end_txn(self, request: EndTxnRequest, request_key: Hashable, now_ms: int) -> None:
        """Commit or abort: answered once the decision is durable; the markers follow.

        With ``bump_epoch`` (transaction version 2) the decision carries the producer's next epoch
        (its markers too, so nothing of the next transaction can join this one), and the answer is
        that ``ProducerIdAndEpoch``; a retry from the previous epoch gets the same answer.
        """
        current = self._metadata.get(request.transactional_id)
        if current is not None and epoch_bumps.is_bumped_retry(current, request):
            if not self._park_if_busy(request.transactional_id, request, request_key, now_ms):
                self._reply(request_key, ProducerIdAndEpoch(producer_id=current.producer_id,
                                                            producer_epoch=current.producer_epoch))
            return
        current = self._checked(request.transactional_id, request.producer_id, request.producer_epoch)
        if self._park_if_busy(request.transactional_id, request, request_key, now_ms):
            return
        assert current is not None
        wanted = TransactionState.COMPLETE_COMMIT if request.committed else TransactionState.COMPLETE_ABORT
        if request.bump_epoch and current.state is not TransactionState.ONGOING:
            target = epoch_bumps.ended_without_transaction(current, request, now_ms)
            self._write(current, target, _After.REPLY, (request_key,),
                        ProducerIdAndEpoch(producer_id=target.producer_id, producer_epoch=target.producer_epoch))
            return
        if current.state is wanted:
            self._reply(request_key)  # a retry of an EndTxn that completed
            return
        if current.state is not TransactionState.ONGOING:
            verb = "commit" if request.committed else "abort"
            raise InvalidTxnStateError(
                f"cannot {verb} transactional id {request.transactional_id!r} in state {current.state.value}"
                + ("; no transaction was begun (add partitions or offsets first)"
                   if current.state is TransactionState.EMPTY else "")
            )
        state = TransactionState.PREPARE_COMMIT if request.committed else TransactionState.PREPARE_ABORT
        bumped = request.bump_epoch and current.producer_epoch < PRODUCER_EPOCH_MAX
        target = dataclasses.replace(current, state=state, last_update_ms=now_ms,
                                     producer_epoch=current.producer_epoch + (1 if bumped else 0))
        if request.bump_epoch and not bumped:  # epoch exhausted: answered once complete, with a fresh producer id
            self._write(current, target, _After.MARKERS)
            self._park(request.transactional_id, request, request_key)
            return
        response = ProducerIdAndEpoch(producer_id=target.producer_id, producer_epoch=target.producer_epoch) \
            if bumped else None
        self._write(current, target, _After.MARKERS, (request_key,), response)

    def needs_fresh_producer_id(self, request: EndTxnRequest) -> bool:
        """True when this transaction version 2 EndTxn would move the id past its last epoch (a new producer id)."""
        return epoch_bumps.needs_fresh_producer_id(self._metadata.get(request.transactional_id), request)

    def _checked(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata | None:
        """The id's metadata, if the request's producer id and epoch are its current ones (fencing)."""
        current = self._metadata.get(transactional_id)
        if current is None or current.state is TransactionState.DEAD:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} is unknown here; call InitProducerId (init_transactions) first"
            )
        if producer_id != current.producer_id:
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} is not that of transactional id {transactional_id!r}; "
                "a newer producer took it over"
            )
        if producer_epoch < current.producer_epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is fenced by epoch "
                f"{current.producer_epoch} (a newer producer, or the transaction timed out); close this producer"
            )
        if producer_epoch > current.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} is newer than the coordinator's "
                f"{current.producer_epoch}"
            )
        return current

    # -- parking -----------------------------------------------------------------------------

    def _park_if_busy(self, transactional_id: str, request: Request, request_key: Hashable, now_ms: int) -> bool:
        """Park the request while a write is in flight or the decision's markers are being written (a completion
        lingering is written now, with the request if it adds partitions)."""
        current = self._metadata.get(transactional_id)
        busy = transactional_id in self._writes_in_flight or (current is not None and current.state.prepared)
        if busy:
            self._park(transactional_id, request, request_key)
            if current is not None and self._completing.pop(transactional_id, None) is not None:
                self._complete(current, now_ms)
        return busy

    def _park(self, transactional_id: str, request: Request, request_key: Hashable) -> None:
        parked = self._parked.setdefault(transactional_id, [])
        if len(parked) >= PARKED_PER_ID_MAX:
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r} has {len(parked)} requests waiting; retry"
            )
        parked.append(Parked(request=request, request_key=request_key))

    def _run_parked(self, transactional_id: str, now_ms: int) -> None:
        """Run the parked requests again, in order (those still blocked park again); additions at the front
        share one write."""
        parked = self._parked.pop(transactional_id, [])
        current = self._metadata.get(transactional_id)
        if current is not None and not current.state.prepared and current.state is not TransactionState.DEAD:
            parked = self._add_together(current, parked, now_ms)
        for item in parked:
            try:
                self._dispatch(item.request, item.request_key, now_ms)
            except BrokerError as error:
                self._reply(item.request_key, error=error)

    def _additions(self, parked: list[Parked], metadata: TransactionMetadata) -> tuple[int, frozenset[TopicPartition]]:
        return leading_additions(parked, metadata.producer_id, metadata.producer_epoch, self.offsets_partition_of)

    def _add_together(self, current: TransactionMetadata, parked: list[Parked], now_ms: int) -> list[Parked]:
        """Answer the additions at the front of ``parked`` with one write (when more than one wait); the rest."""
        count, partitions = self._additions(parked, current)
        if count < 2:
            return parked
        keys = tuple(item.request_key for item in parked[:count])
        if current.state is TransactionState.ONGOING and partitions <= current.partitions:
            for key in keys:
                self._reply(key)
            return parked[count:]
        try:
            target = self._with_partitions(current, partitions, now_ms)
        except BrokerError:
            return parked  # too many together: one by one, each answered on its own
        self._write(current, target, _After.REPLY, keys)
        return parked[count:]

    def _dispatch(self, request: Request, request_key: Hashable, now_ms: int) -> None:
        match request:
            case InitTransactionsRequest():
                self.init_producer_id(request, request_key, now_ms)
            case AddPartitionsRequest():
                self.add_partitions(request, request_key, now_ms)
            case AddOffsetsRequest():
                self.add_offsets(request, request_key, now_ms)
            case EndTxnRequest():
                self.end_txn(request, request_key, now_ms)

    # -- durability and markers --------------------------------------------------------------

    def written(self, transactional_id: str, now_ms: int, error: BrokerError | None = None) -> None:
        """The write for ``transactional_id`` is durable (``error`` None) or failed; act on it."""
        write = self._writes_in_flight.pop(transactional_id, None)
        assert write is not None, f"no write in flight for {transactional_id!r}"
        if error is not None:
            for key in write.request_keys:
                self._reply(key, error=error)
            current = self._metadata.get(transactional_id)
            if write.after is _After.COMPLETED and current is not None:
                self._emit_markers(current)  # markers again (idempotent), then the completion again
            self._run_parked(transactional_id, now_ms)
            return
        if write.after is _After.EXPIRED:
            del self._metadata[transactional_id]
        else:
            self._metadata[transactional_id] = write.target
        for key in write.request_keys:
            self._reply(key, write.response)
        if write.after is _After.MARKERS:
            if write.target.partitions:
                self._emit_markers(write.target)
            else:
                self._complete(write.target, now_ms)
        self._run_parked(transactional_id, now_ms)

    def markers_written(self, transactional_id: str, now_ms: int) -> None:
        """Every partition has the decision's marker: complete the transaction (and start the next one, if its
        additions wait: one write)."""
        current = self._metadata.get(transactional_id)
        if current is None or not current.state.prepared or transactional_id in self._writes_in_flight \
                or transactional_id in self._completing:
            return
        if transactional_id in self._parked or not self.config.completion_linger_ms:
            self._complete(current, now_ms)
        else:
            self._completing[transactional_id] = now_ms + self.config.completion_linger_ms

    def _complete(self, current: TransactionMetadata, now_ms: int) -> None:
        state = TransactionState.COMPLETE_COMMIT if current.state is TransactionState.PREPARE_COMMIT \
            else TransactionState.COMPLETE_ABORT
        target = dataclasses.replace(current, state=state, partitions=frozenset(), start_ms=NO_START,
                                     last_update_ms=now_ms)
        parked = self._parked.get(current.transactional_id, [])
        count, partitions = self._additions(parked, target)
        if count:
            try:
                following = self._with_partitions(target, partitions, now_ms)
            except BrokerError:
                count = 0  # too many together: run one by one once complete
        if not count:
            self._write(current, target, _After.COMPLETED)
            return
        keys = tuple(item.request_key for item in parked[:count])
        del parked[:count]
        if not parked:
            del self._parked[current.transactional_id]
        self._write(current, following, _After.COMPLETED, keys, through=target)

    def _abort(self, current: TransactionMetadata, now_ms: int, bump_epoch: bool) -> None:
        """The coordinator aborts (timeout, fencing): a new epoch fences the producer that began it."""
        epoch = current.producer_epoch + 1 if bump_epoch and current.producer_epoch < PRODUCER_EPOCH_MAX \
            else current.producer_epoch
        target = dataclasses.replace(current, producer_epoch=epoch, state=TransactionState.PREPARE_ABORT,
                                     last_update_ms=now_ms)
        self._write(current, target, _After.MARKERS)

    # -- timers ------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Write lingering completions that are due; abort transactions past their timeout; forget ids idle past
        the expiration."""
        for transactional_id, due_ms in sorted(self._completing.items()):
            if now_ms >= due_ms:
                del self._completing[transactional_id]
                self._complete(self._metadata[transactional_id], now_ms)
        for transactional_id, metadata in sorted(self._metadata.items()):
            if transactional_id in self._writes_in_flight:
                continue
            if metadata.state is TransactionState.ONGOING and now_ms >= metadata.start_ms + metadata.timeout_ms:
                self._abort(metadata, now_ms, bump_epoch=True)
        if now_ms >= self.next_expiry_check_ms:
            self.next_expiry_check_ms = now_ms + self.config.expiration_check_interval_ms
            for transactional_id, metadata in sorted(self._metadata.items()):
                idle_ms = now_ms - metadata.last_update_ms
                if (metadata.state.complete and transactional_id not in self._writes_in_flight
                        and transactional_id not in self._parked
                        and idle_ms >= self.config.transactional_id_expiration_ms):
                    self._write(metadata, dataclasses.replace(metadata, state=TransactionState.DEAD), _After.EXPIRED)

    def next_deadline_ms(self) -> int:
        """The earliest time ``tick`` has work to do."""
        deadlines = [self.next_expiry_check_ms, *self._completing.values()]
        deadlines += [metadata.start_ms + metadata.timeout_ms for metadata in self._metadata.values()
                      if metadata.state is TransactionState.ONGOING
                      and metadata.transactional_id not in self._writes_in_flight]
        return min(deadlines)

    # -- admin -------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription:
        """The id's state as persisted (``TransactionalIdNotFoundError`` if unknown here)."""
        return views.describe(self._metadata, transactional_id, self.coordinator_epoch)

    def list_transactions(
        self, states: Iterable[TransactionState] = (), producer_ids: Iterable[int] = ()
    ) -> list[TransactionListing]:
        """Every id here, optionally only those in ``states`` or of ``producer_ids``."""
        return views.list_transactions(self._metadata, states, producer_ids)

    def open_count(self) -> int:
        """Transactions Ongoing, or decided with markers still to write (a completion lingering or being written
        is not open)."""
        return sum(1 for m in self._metadata.values() if m.state is TransactionState.ONGOING
                   or (m.state.prepared and not self._markers_done(m.transactional_id)))

    def _markers_done(self, transactional_id: str) -> bool:
        write = self._writes_in_flight.get(transactional_id)
        return transactional_id in self._completing or (write is not None and write.after is _After.COMPLETED)

    def pending_request_keys(self) -> list[Hashable]:
        """Every parked request and write awaiting an answer (failed when the coordinator resigns)."""
        keys = [item.request_key for parked in self._parked.values() for item in parked]
        keys += [key for write in self._writes_in_flight.values() for key in write.request_keys]
        return keys
