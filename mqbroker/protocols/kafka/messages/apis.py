"""The Kafka APIs mqbroker serves: key, message types, version range and where flexible versions begin.

The ranges are what ``ApiVersions`` advertises. Each is at most what the message classes model,
and starts no lower than Apache Kafka 4's baseline (KIP-896) unless an older version costs
nothing; ``docs/kafka.md`` lists them with the reasons for each upper bound.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mqbroker.protocols.kafka.messages import admin, cluster, groups, operations, produce_fetch, security, transactions


class ApiKey(enum.IntEnum):
    """Kafka's API keys (those mqbroker knows, served or deliberately refused)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    OFFSET_DELETE = 47
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaApi:
    """One served API: its message types and the versions advertised."""

    key: ApiKey
    request_type: type
    response_type: type
    min_version: int
    max_version: int
    #: First flexible version (compact encodings, tagged fields); None: no version is flexible.
    flexible_since: int | None

    def flexible(self, version: int) -> bool:
        """Whether ``version`` uses compact encodings and tagged fields (and header v2 / v1)."""
        return self.flexible_since is not None and version >= self.flexible_since

    def speaks(self, version: int) -> bool:
        """Whether ``version`` is in the advertised range."""
        return self.min_version <= version <= self.max_version


def _api(key: ApiKey, module: object, name: str, versions: tuple[int, int], flexible_since: int | None) -> KafkaApi:
    return KafkaApi(key=key, request_type=getattr(module, name + "Request"), response_type=getattr(module, name + "Response"),
                    min_version=versions[0], max_version=versions[1], flexible_since=flexible_since)


#: The cluster feature that tells Kafka clients which transaction protocol to speak (KIP-890, KIP-1022).
TRANSACTION_VERSION_FEATURE = "transaction.version"
#: 2: EndTxn bumps the producer epoch on every transaction and Produce / TxnOffsetCommit add their partitions to
#: it (KIP-890 part 2); clients that do not know the feature (librdkafka, kafka-python, aiokafka) keep version 1.
TRANSACTION_VERSION = 2
#: The finalized features never change at run time: one epoch.
FINALIZED_FEATURES_EPOCH = 1

#: Every API mqbroker serves; clients learn what is absent from ApiVersions.
APIS: dict[ApiKey, KafkaApi] = {api.key: api for api in (
    # Produce 13 and Fetch 13 on name topics by id (KIP-516); Fetch 15-18 add only follower fields (ignored).
    # Produce 12 and 13 in a transaction add its partition to it (transaction version 2; version 1 producers stay at 11).
    _api(ApiKey.PRODUCE, produce_fetch, "Produce", (3, 13), 9),
    _api(ApiKey.FETCH, produce_fetch, "Fetch", (4, 18), 12),
    # ListOffsets 7 adds the max-timestamp lookup (-3), 8 the earliest-local one (-4); 9 on ask about tiered storage.
    _api(ApiKey.LIST_OFFSETS, produce_fetch, "ListOffsets", (1, 8), 6),
    _api(ApiKey.METADATA, cluster, "Metadata", (0, 12), 9),
    _api(ApiKey.OFFSET_COMMIT, groups, "OffsetCommit", (2, 9), 8),
    _api(ApiKey.OFFSET_FETCH, groups, "OffsetFetch", (1, 9), 6),
    _api(ApiKey.FIND_COORDINATOR, cluster, "FindCoordinator", (0, 5), 3),
    _api(ApiKey.JOIN_GROUP, groups, "JoinGroup", (0, 9), 6),
    _api(ApiKey.HEARTBEAT, groups, "Heartbeat", (0, 4), 4),
    _api(ApiKey.LEAVE_GROUP, groups, "LeaveGroup", (0, 5), 4),
    _api(ApiKey.SYNC_GROUP, groups, "SyncGroup", (0, 5), 4),
    _api(ApiKey.DESCRIBE_GROUPS, groups, "DescribeGroups", (0, 5), 5),
    _api(ApiKey.LIST_GROUPS, groups, "ListGroups", (0, 5), 3),
    # SaslHandshake 0 sends the SASL exchange as raw frames instead of SaslAuthenticate (removed in Kafka 4).
    _api(ApiKey.SASL_HANDSHAKE, security, "SaslHandshake", (1, 1), None),
    _api(ApiKey.API_VERSIONS, cluster, "ApiVersions", (0, 3), 3),
    _api(ApiKey.CREATE_TOPICS, admin, "CreateTopics", (2, 7), 5),
    _api(ApiKey.DELETE_TOPICS, admin, "DeleteTopics", (1, 6), 4),
    _api(ApiKey.DELETE_RECORDS, admin, "DeleteRecords", (0, 2), 2),
    # InitProducerId 5, EndTxn 4 and TxnOffsetCommit 4 add only the TRANSACTION_ABORTABLE error (never sent here).
    _api(ApiKey.INIT_PRODUCER_ID, produce_fetch, "InitProducerId", (0, 5), 2),
    # AddPartitionsToTxn 4 batches transactional ids for brokers (KIP-890); EndTxn 5 bumps the epoch and answers it,
    # TxnOffsetCommit 5 adds the group's offsets partition to the transaction (both transaction version 2).
    _api(ApiKey.ADD_PARTITIONS_TO_TXN, transactions, "AddPartitionsToTxn", (0, 3), 3),
    _api(ApiKey.ADD_OFFSETS_TO_TXN, transactions, "AddOffsetsToTxn", (0, 3), 3),
    _api(ApiKey.END_TXN, transactions, "EndTxn", (0, 5), 3),
    _api(ApiKey.TXN_OFFSET_COMMIT, transactions, "TxnOffsetCommit", (0, 5), 3),
    # WriteTxnMarkers 0 was removed in Kafka 4 (KIP-896); 2 adds the marker's transaction version.
    _api(ApiKey.WRITE_TXN_MARKERS, transactions, "WriteTxnMarkers", (1, 2), 1),
    _api(ApiKey.DESCRIBE_TRANSACTIONS, transactions, "DescribeTransactions", (0, 0), 0),
    _api(ApiKey.DESCRIBE_ACLS, security, "DescribeAcls", (1, 3), 2),
    _api(ApiKey.CREATE_ACLS, security, "CreateAcls", (1, 3), 2),
    _api(ApiKey.DELETE_ACLS, security, "DeleteAcls", (1, 3), 2),
    _api(ApiKey.DESCRIBE_CONFIGS, admin, "DescribeConfigs", (1, 4), 4),
    _api(ApiKey.ALTER_CONFIGS, admin, "AlterConfigs", (0, 2), 2),
    _api(ApiKey.SASL_AUTHENTICATE, security, "SaslAuthenticate", (0, 2), 2),
    _api(ApiKey.CREATE_PARTITIONS, admin, "CreatePartitions", (0, 3), 2),
    _api(ApiKey.DELETE_GROUPS, groups, "DeleteGroups", (0, 2), 2),
    _api(ApiKey.OFFSET_DELETE, groups, "OffsetDelete", (0, 0), None),
    _api(ApiKey.INCREMENTAL_ALTER_CONFIGS, admin, "IncrementalAlterConfigs", (0, 1), 1),
    _api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, security, "DescribeUserScramCredentials", (0, 0), 0),
    _api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, security, "AlterUserScramCredentials", (0, 0), 0),
    _api(ApiKey.DESCRIBE_CLUSTER, cluster, "DescribeCluster", (0, 1), 0),
    _api(ApiKey.LIST_TRANSACTIONS, cluster, "ListTransactions", (0, 2), 0),
    # The operations APIs at Apache Kafka 4.1's ranges (DescribeLogDirs 5 adds a cordoned flag, KIP-1066).
    _api(ApiKey.ALTER_REPLICA_LOG_DIRS, operations, "AlterReplicaLogDirs", (1, 2), 2),
    _api(ApiKey.DESCRIBE_LOG_DIRS, operations, "DescribeLogDirs", (1, 4), 2),
    _api(ApiKey.ELECT_LEADERS, operations, "ElectLeaders", (0, 2), 2),
    _api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, operations, "AlterPartitionReassignments", (0, 1), 0),
    _api(ApiKey.LIST_PARTITION_REASSIGNMENTS, operations, "ListPartitionReassignments", (0, 0), 0),
    _api(ApiKey.DESCRIBE_QUORUM, operations, "DescribeQuorum", (0, 2), 0),
    _api(ApiKey.LIST_CONFIG_RESOURCES, operations, "ListConfigResources", (0, 1), 0),
    _api(ApiKey.DESCRIBE_TOPIC_PARTITIONS, operations, "DescribeTopicPartitions", (0, 0), 0),
)}
