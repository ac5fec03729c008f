"""Kafka request handlers: each turns one request into broker calls and builds the response."""

from __future__ import annotations

from mqbroker.protocols.kafka.handlers import admin, cluster, configs, groups, operations, records, transactions
from mqbroker.protocols.kafka.handlers.context import Handler
from mqbroker.protocols.kafka.messages.apis import ApiKey

#: The handler of every API answered through the broker (ApiVersions is answered by the connection,
#: the SASL, ACL and SCRAM APIs by the connection's ``KafkaSecurity``).
HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.PRODUCE: records.handle_produce,
    ApiKey.FETCH: records.handle_fetch,
    ApiKey.LIST_OFFSETS: records.handle_list_offsets,
    ApiKey.INIT_PRODUCER_ID: records.handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    ApiKey.END_TXN: transactions.handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: transactions.handle_write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    ApiKey.METADATA: cluster.handle_metadata,
    ApiKey.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    ApiKey.LIST_TRANSACTIONS: cluster.handle_list_transactions,
    ApiKey.FIND_COORDINATOR: cluster.handle_find_coordinator,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
    ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
    ApiKey.CREATE_TOPICS: admin.handle_create_topics,
    ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
    ApiKey.DELETE_RECORDS: admin.handle_delete_records,
    ApiKey.DESCRIBE_CONFIGS: configs.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: configs.handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
    ApiKey.ELECT_LEADERS: operations.handle_elect_leaders,
    ApiKey.DESCRIBE_LOG_DIRS: operations.handle_describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: operations.handle_alter_replica_log_dirs,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: operations.handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: operations.handle_list_partition_reassignments,
    ApiKey.DESCRIBE_QUORUM: operations.handle_describe_quorum,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: operations.handle_describe_topic_partitions,
    ApiKey.LIST_CONFIG_RESOURCES: operations.handle_list_config_resources,
}
