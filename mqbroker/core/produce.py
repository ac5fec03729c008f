"""Appends (tx-light): client produces with acks 0, 1 or all, and the broker's own replicated appends.

A batch goes to the log of a partition this broker leads as it came (the log checks and stamps
it; no record is decoded). Then acks=0 answers at once; acks=1 once the batch is on this
broker's disk under the ``sync`` flush policy (at once under ``interval``); acks=all once the high
watermark passed it, that is once every in-sync replica holds it, and is refused before anything
is written while the ISR is smaller than ``min.insync.replicas``. Internal topics (``__``) take
only the cluster's own writes (``ClusterPrincipals``). A client's records are decoded before the
append only where the broker decodes them later (compacted topics, which also need keys, and
topics with ``record.validation=decode``); everywhere else no record is decoded. A topic whose
``compression.type`` names a codec gets a client's batches rewritten in it (records untouched). A transactional
batch opening its producer's transaction in a partition needs the verification guard
``core.transactions`` obtained (KIP-890); markers are only the broker's own appends
(``append_replicated`` with ``markers_allowed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime

from mqbroker import errors
from mqbroker.core.guards import errors_as_failures, require_permission
from mqbroker.core.topic_config import BROKER_TOPIC_CONFIG_DEFAULTS, COMPRESSION_TYPES, check_produced_records
from mqbroker.durability.flusher import Flusher
from mqbroker.interfaces import IAuthorizer, IClusterView
from mqbroker.limits import produce_timeout_ms_default, produce_timeout_ms_max
from mqbroker.model import Acks, Operation, Principal, ProduceResult, ResourceType
from mqbroker.records.compression import Compression
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.recompress import recompressed
from mqbroker.replication.leadership import LeaderPartition
from mqbroker.replication.replica_manager import ReplicaManager, check_enough_replicas
from mqbroker.security.cluster_principals import ClusterPrincipals
from mqbroker.storage.log import NOT_VERIFIED, AppendResult, PartitionLog

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_COMPRESSION_TYPES = COMPRESSION_TYPES


class _TopicSettings(NamedTuple):
    """What a produce reads of its topic's configuration, resolved through the layers once."""

    min_insync_replicas: int
    record_validation: str
    #: The codec batches are rewritten in (None: stored as they came).
    compression: Compression | None


class ProduceService:
    """Appends batches to the partitions this broker leads and answers when the acks say so."""

    def __init__(
        self, *, clock: IReactorTime, authorizer: IAuthorizer, replicas: ReplicaManager, flusher: Flusher,
        principals: ClusterPrincipals, cluster: IClusterView, topic_defaults: Mapping[str, str], node_id: int,
    ) -> None:
        """``topic_defaults``: the broker-wide static ``log.`` defaults (``record.validation``, ``compression.type``);
        the dynamic ones of broker ``node_id`` in the cluster's image take precedence."""
        self._clock = clock
        self._node_id = node_id
        self._cluster = cluster
        self._topic_defaults = {**BROKER_TOPIC_CONFIG_DEFAULTS, **topic_defaults}
        self._authorizer = authorizer
        self._principals = principals
        self._replicas = replicas
        self._flusher = flusher
        self._stopping = False
        #: ``_TopicSettings`` by topic, valid for the image ``_settings_of`` at its ``applied_index``
        #: ``_settings_index``: every config change (topic, broker, cluster) applies a record.
        self._settings: dict[str, _TopicSettings] = {}
        self._settings_of: object = None
        self._settings_index = -1
        #: Bytes and records appended for clients (metrics; retried duplicates not counted).
        self.produced_bytes = 0
        self.produced_records = 0

    @errors_as_failures
    def produce(
        self, principal: Principal, topic: str, partition: int, records: bytes, acks: Acks, timeout_ms: int,
        verification_guard: object | None = None, front_end_batches: bool = False,
    ) -> Deferred[ProduceResult]:
        """Append a client's batches; see ``IBroker.produce`` (``verification_guard``: see the module docstring;
        ``front_end_batches``: built in-process from decoded fields, so ``record.validation`` needs no decode)."""
        if self._stopping:
            raise errors.BrokerShuttingDownError("the broker is shutting down; retry on another broker")
        self._principals.check_internal_write(principal, topic)
        require_permission(self._authorizer, principal, Operation.WRITE, ResourceType.TOPIC, topic)
        client = not self._principals.acts_for_cluster(principal)
        partition_log, leader, appended, min_insync = self._append(topic, partition, records,
                                                                   acks_all=acks is Acks.ALL, check_records=client,
                                                                   verification_guard=verification_guard,
                                                                   decodable=front_end_batches)
        result = ProduceResult(
            base_offset=appended.base_offset,
            last_offset=appended.last_offset,
            log_append_time_ms=appended.log_append_time_ms,
            log_start_offset=appended.log_start_offset,
        )
        if not appended.duplicate:
            self.produced_bytes += len(records)
            self.produced_records += appended.last_offset - appended.base_offset + 1
        sync = self._replicas.leader_appended(partition_log)
        if acks is Acks.NONE or (acks is Acks.LEADER and not sync):
            return succeed(result)
        if acks is Acks.LEADER:
            waited = self._flusher.wait_durable(partition_log, appended.last_offset)
            waited.addCallback(lambda _: result)
            return waited
        timeout_ms = min(timeout_ms, produce_timeout_ms_max) if timeout_ms > 0 else produce_timeout_ms_default
        return leader.wait_for_high_watermark(appended.last_offset, min_insync, timeout_ms, result)

    @errors_as_failures
    def append_replicated(
        self, topic: str, partition: int, records: bytes, timeout_ms: int, *, markers_allowed: bool = False,
        verification_guard: object | None = NOT_VERIFIED,
    ) -> Deferred[None]:
        """Append the broker's own batch (e.g. group offsets) with acks=all: fire once every in-sync replica has it.

        A write acknowledged only by the leader's disk would be lost, or go back to an older
        state, when that leader fails before its followers copied it.
        """
        partition_log, leader, appended, min_insync = self._append(
            topic, partition, records, acks_all=True, markers_allowed=markers_allowed,
            verification_guard=verification_guard)
        self._replicas.leader_appended(partition_log)
        return leader.wait_for_high_watermark(appended.last_offset, min_insync, timeout_ms)

    def _append(
        self, topic: str, partition: int, records: bytes, acks_all: bool, check_records: bool = False, *,
        markers_allowed: bool = False, verification_guard: object | None = None, decodable: bool = False,
    ) -> tuple[PartitionLog, LeaderPartition, AppendResult, int]:
        """Append at the leader (refused first if acks=all and the ISR is too small, or with ``check_records`` if
        records the broker will decode do not; ``decodable``: known to decode): log, leader, result, min ISR."""
        partition_log, leader = self._replicas.leader(topic, partition)
        settings = self._topic_settings(topic)
        min_insync = settings.min_insync_replicas
        if acks_all:
            check_enough_replicas(leader, min_insync)
        if check_records:
            records = self._client_records(topic, settings, partition_log, records, decodable)
        appended = partition_log.append(records, int(self._clock.seconds() * 1000), leader_epoch=leader.leader_epoch,
                                        markers_allowed=markers_allowed, verification_guard=verification_guard)
        return partition_log, leader, appended, min_insync

    def _topic_settings(self, topic: str) -> _TopicSettings:
        """``topic``'s settings, resolved once per metadata record applied rather than on every produce."""
        image = self._cluster.image
        if image is not self._settings_of or image.applied_index != self._settings_index:
            self._settings.clear()
            self._settings_of, self._settings_index = image, image.applied_index
        settings = self._settings.get(topic)
        if settings is None:
            record = self._cluster.topic(topic)
            overrides = record.configs if record is not None else {}
            settings = self._settings[topic] = _TopicSettings(
                min_insync_replicas=self._replicas.min_insync_replicas(topic),
                record_validation=self._topic_config(overrides, "record.validation"),
                compression=_COMPRESSION_TYPES.get(self._topic_config(overrides, "compression.type")),
            )
        return settings

    def _topic_config(self, overrides: Mapping[str, str], key: str) -> str:
        """A topic's ``key``: its override, else this broker's dynamic default, else its static one."""
        if key in overrides:
            return overrides[key]
        dynamic = self._cluster.image.dynamic_topic_default(self._node_id, key)
        return dynamic if dynamic is not None else self._topic_defaults[key]

    def _client_records(
        self, topic: str, settings: _TopicSettings, partition_log: PartitionLog, records: bytes, decodable: bool,
    ) -> bytes:
        """A client's batches as stored: decoded first where the broker reads them later (unless ``decodable``;
        compacted: keys too, always), rewritten in the topic's ``compression.type`` when that names a codec."""
        compacted = partition_log.config.compacts
        if compacted or (settings.record_validation == "decode" and not decodable):
            check_produced_records(topic, records, keys_required=compacted)
        compression = settings.compression
        if compression is None:
            return records
        try:
            return bytes(recompressed(records, compression))
        except CorruptRecordError as error:
            raise errors.CorruptMessageError(f"topic {topic!r} stores batches in {compression.name.lower()}; "
                                             f"a batch could not be rewritten: {error}") from None

    def stop(self) -> None:
        """Refuse new produces (shutdown)."""
        self._stopping = True
