"""Named bounds, units last. Every buffer, queue and wait in the broker has one of these."""

from __future__ import annotations

#: Largest native-protocol frame the broker accepts (a 1 MiB record batch plus headers).
native_frame_bytes_max = 16 * 1024 * 1024
#: Requests the broker works on at once for one connection before it stops reading from it.
native_inflight_requests_max = 64
#: Bytes of unsent replies queued on one connection before the broker stops reading from it.
native_reply_bytes_max = 32 * 1024 * 1024
#: Connections the kernel completes for a listener before the broker accepts them (listen(2)'s backlog,
#: capped by net.core.somaxconn). Twisted's default of 50 overflows when a fleet reconnects at once (a
#: broker restart): the kernel drops the SYNs past it and those clients retry 1 s, 3 s, 7 s later.
listen_backlog = 4096
#: A connection that sends nothing for this long is closed.
connection_idle_ms_max = 10 * 60 * 1000
#: Longest long-poll wait a fetch may ask for.
fetch_wait_ms_max = 30_000
#: Largest fetch response (all partitions together).
fetch_response_bytes_max = 64 * 1024 * 1024
#: Longest a produce with acks=all may wait for replication.
produce_timeout_ms_max = 300_000
#: How long an acks=all produce that names no timeout waits for replication; also the timeout of the
#: front ends' own appends (MQTT and AMQP clients have no produce timeout to give).
produce_timeout_ms_default = 30_000
#: Longest topic name (as Kafka: it becomes a directory name with a partition suffix).
topic_name_length_max = 249
#: Most partitions one topic may have.
partitions_per_topic_max = 10_000
#: Segment `.log` files a broker keeps open at once (least recently used closed first): room for
#: every busy partition's active segment, while 10,000+ partitions stay within a 1,024-descriptor
#: ulimit with the sockets, the Raft log and the AIO context beside them.
segment_files_open_max = 512
#: Partition logs one group-commit fsync round syncs. Each keeps its active segment pinned open
#: (and a new directory, sealed segments' indexes) until its fsync ends, so a round over 10,000
#: freshly created partitions would need 20,000 descriptors at once; with 256, a round's pinned
#: files beyond ``segment_files_open_max`` and its directories stay within a 1,024 ulimit. Logs
#: past it go in the next round, which starts as soon as this one ends.
fsync_round_logs_max = 256
#: Largest native-protocol response frame a client accepts (a full fetch response plus headers).
native_response_frame_bytes_max = 2 * fetch_response_bytes_max
#: AMQP: frame_max the broker proposes in connection.tune (RabbitMQ's value); clients may choose less.
amqp_frame_bytes_max = 131_072
#: AMQP: channel_max the broker proposes (RabbitMQ's value).
amqp_channels_per_connection_max = 2047
#: AMQP: heartbeat interval the broker proposes, in seconds.
amqp_heartbeat_s = 60
#: AMQP: largest message body a publisher may send (larger is refused with 311 CONTENT_TOO_LARGE).
amqp_message_bytes_max = 64 * 1024 * 1024
#: AMQP: time from the protocol header to connection.open before the socket is dropped.
amqp_handshake_ms_max = 10_000
#: AMQP: how long the broker waits for close-ok after sending connection.close.
amqp_close_ok_wait_ms_max = 3_000
#: AMQP: body bytes one connection may have published and not yet stored; past it the broker
#: stops reading the socket and sends connection.blocked until half of it is stored.
amqp_unstored_publish_bytes_max = 32 * 1024 * 1024
#: Largest MQTT packet the broker accepts (advertised as Maximum Packet Size in CONNACK).
mqtt_packet_bytes_max = 1024 * 1024
#: QoS 1/2 messages one MQTT session holds in memory waiting for the client's in-flight window.
mqtt_pending_messages_max = 1000
#: QoS 0 messages one MQTT session queues while it cannot send; the oldest is dropped beyond it.
mqtt_qos0_queue_length_max = 100
#: Packets a client may pipeline after CONNECT before the broker has answered it.
mqtt_packets_before_connack_max = 64
#: MQTT: topic aliases a client may set on one connection (advertised as Topic Alias Maximum in CONNACK).
mqtt_topic_aliases_max = 16
#: MQTT: longest client id accepted (the specification asks for 23 at least; clients use UUIDs and host names).
mqtt_client_id_length_max = 256
#: MQTT: longest session expiry granted; a 3.1.1 persistent session (clean session 0) gets this.
mqtt_session_expiry_s_max = 7 * 24 * 3600
#: MQTT: a persistent session's changes whose loss in a crash costs only a redelivery (QoS 1 sends and
#: acknowledgements) are written to ``__mqtt_sessions`` at most this long after they happen, without holding
#: sends back: one small write per tenth of a second instead of one fsync'd write per batch of sends. A kill -9
#: redelivers what was acknowledged in the last interval (QoS 1 allows it); QoS 2 steps are written first.
mqtt_session_store_interval_ms = 100
#: SCRAM: fewest PBKDF2 iterations a credential may use (RFC 7677's minimum).
scram_iterations_min = 4096
#: SCRAM: most PBKDF2 iterations accepted, so a hostile server cannot make a client spin.
scram_iterations_max = 1_000_000
#: Largest SASL message (SCRAM or PLAIN) either side accepts.
sasl_message_bytes_max = 4096
#: Longest user name a credential may be stored under.
username_length_max = 255
#: Longest consumer group id (it keys the group's records in __consumer_offsets and appears in log lines).
group_id_length_max = 255
#: Largest controller (Raft) frame from an authenticated voter: a snapshot of the metadata image
#: (about 100 bytes a partition: 32 MiB holds some 300,000 partitions).
controller_frame_bytes_max = 32 * 1024 * 1024
#: Open connections the controller listener accepts (a few per voter, plus reconnects in flight).
controller_connections_max = 64
#: Largest frame a native connection may send before it is authenticated (Kafka's sasl.server.max.receive.size).
pre_authentication_frame_bytes_max = 512 * 1024
#: AMQP: message bytes one connection may hold in memory: the announced size of messages being received
#: (on every channel) plus the bodies of open transactions. Past it the channel is closed with 406.
amqp_held_bytes_per_connection_max = 128 * 1024 * 1024
#: AMQP: the same, over every connection of the broker together.
amqp_held_bytes_broker_max = 1024 * 1024 * 1024
#: AMQP: bytes the compressed batches of one fetch may decompress to together in a queue or source reader
#: (one 64 MiB message fits; a handful of 2 KiB zstd bombs does not).
amqp_fetch_decompressed_bytes_max = 128 * 1024 * 1024
#: An HTTP keep-alive connection with no request in progress is closed after this long.
http_idle_s_max = 60
#: The AIO context's ring size: fsyncs in flight at once (more wait for a free slot). Each
#: context takes this many of the machine's ``fs.aio-max-nr`` (65,536 by default).
aio_fsyncs_in_flight_max = 256
#: How long start-up waits for the probe fsync that tells whether AIO fsync works here.
aio_probe_wait_s_max = 10.0
#: Raft: inputs waiting for the core while a Ready is persisted; beyond this, new inputs are refused.
raft_inbox_items_max = 100_000
#: A request to another broker (forwarded, or a follower's fetch) may take its own wait plus this much before
#: the connection is dropped as dead.
peer_request_slack_s = 3.0
#: A broker that accepts an inter-broker connection but does not finish the version negotiation (and
#: login) in this time is dropped and dialled again; requests waiting for that connection fail as unavailable.
peer_handshake_timeout_s = 10.0
#: How long forwarded list-offset and delete-records calls keep re-routing through a leader change.
reroute_ms_max = 5_000
#: How long a ``__consumer_offsets`` append waits for the in-sync replicas (Kafka's offsets.commit.timeout.ms).
offsets_commit_timeout_ms_max = 5_000
#: Quotas: the longest single hold; a larger debt stays in the bucket and is paid over the next requests.
throttle_ms_max = 11_000
#: Quotas: a bucket nobody recorded into for this long is forgotten (Kafka's quota sensor expiry).
quota_sensor_idle_ms_max = 3_600_000
#: A controller connection must prove its identity within this time after it opens.
controller_handshake_s_max = 10.0
#: Largest broker-handshake frame: they are tiny; anything larger before authentication is an attack.
controller_handshake_frame_bytes_max = 4096
#: Raft log entries kept before the metadata image is snapshotted and the log compacted.
controller_log_entries_max = 10_000
#: Longest pause between two start attempts of a front end replaying its state (the pause doubles up to it).
front_end_start_retry_s_max = 5.0
#: How long a connection waits for its front end to start before it is refused as "server unavailable"
#: (shorter than the MQTT CONNECT and AMQP handshake limits, so the client hears why).
front_end_ready_wait_s_max = 5.0
#: AMQP: entries of each per-decoder cache (method payloads, property lists); full caches start over.
amqp_decode_cache_entries_max = 256
#: AMQP: longer payloads are decoded every time (they rarely repeat and would bloat the cache).
amqp_decode_cache_key_bytes_max = 512
#: Threads of the background pool: controller persistence, checkpoints, the log cleaner.
background_threads_max = 4
#: AMQP: bound on ``x-max-length``: every ready message of a max-length queue is kept in memory.
amqp_queue_length_max = 100_000
#: AMQP: ready messages a classic queue reads ahead of its consumers.
amqp_queue_read_ahead_messages_max = 2_000
#: AMQP: how long a queue's or a source exchange's long-poll fetch waits for new records.
amqp_log_fetch_wait_ms_max = 1_000
#: AMQP: how long a basic.get on a share queue waits for its share group to acquire a message (the group reads a
#: message published just before at once; an empty queue answers get-empty after this).
amqp_share_get_wait_ms_max = 200
#: AMQP: how often a reject-publish share queue asks its ready count again when asking failed (the group's host
#: or the log's leader is moving); its waiting publishes are rejected once ``reroute_ms_max`` passed.
amqp_admission_retry_ms = 100
#: AMQP: bytes one fetch of a queue's or a source exchange's log may return.
amqp_log_fetch_bytes_max = 4 * 1024 * 1024
#: AMQP: bytes one fetch of an internal topic's replay at start-up may return.
amqp_replay_fetch_bytes_max = 16 * 1024 * 1024
#: MQTT: how long a shared log reader's long poll waits before it asks again.
mqtt_log_fetch_wait_ms_max = 500
#: MQTT: bytes one fetch of a log partition (shared reader, catch-up, replay) may return.
mqtt_log_fetch_bytes_max = 1024 * 1024
#: MQTT: the least a session's catch-up read asks for; it asks for about what its queue has room for, up to
#: ``mqtt_log_fetch_bytes_max`` (a drain refills half a queue, ~80 KB, at a time: a megabyte read for it was waste).
mqtt_catch_up_fetch_bytes_min = 64 * 1024
#: MQTT: a client that has not sent CONNECT by then is disconnected.
mqtt_connect_s_max = 10.0
#: How long a connect waits for the broker that held a live session to hand it over (its final state)
#: before resuming the newest stored state: that broker may be dead; 2 s keeps failover well under 5 s.
mqtt_session_handoff_ms_max = 2_000
#: MQTT mapping rules in force (configured or set through the admin API): each is checked against every
#: SUBSCRIBE filter and each names a log topic the front end creates and reads; a few dozen cover real fleets.
mqtt_mapping_rules_max = 256
#: How long before the mapping rules were set each broker reads the log topics they add: a message published
#: under the new rules through a broker whose clock is behind the one that set them is still read (a
#: topic the rules add holds no MQTT message older than the rules; at most this much of a native
#: producer's data may show up once).
mqtt_mapping_read_back_ms = 5_000
#: Characters of one mapping rule's MQTT topic filter (a rule is matched at every publish; real ones are short).
mqtt_mapping_filter_length_max = 1024
#: Client QoS 1/2 messages on their way to the log per connection (and the 3.1.1 outbound window):
#: enough to cover a few fsync rounds at full rate, so the group commit is what paces a publisher.
mqtt_log_writes_in_flight_max = 1000
#: Admin API: largest request body (a topic's configs or an ACL list are a few KiB; nothing needs more).
http_request_body_bytes_max = 1024 * 1024
#: Admin API message browser: most records one request returns (a screenful; it decodes each one).
http_browse_records_max = 500
#: Admin API message browser: bytes it fetches per partition for one request.
http_browse_fetch_bytes_max = 4 * 1024 * 1024
#: Admin API message browser: bytes of a partition's first read; each further read of the page doubles it, up to
#: ``http_browse_fetch_bytes_max`` in all (a page of small records costs one small read, not 4 MiB).
http_browse_first_read_bytes = 64 * 1024
#: Admin API message browser: longest key or value text returned per record (the rest is cut, flagged).
http_browse_value_chars_max = 64 * 1024
#: Admin API: most retained MQTT messages one listing returns.
http_retained_listing_max = 1000
#: How long a share-group call forwarded to the group's host (or a listing asked of a broker) may take beyond a
#: fetch's own long poll; creating a group or acknowledging waits for the state to replicate, which a healthy
#: cluster does in milliseconds.
share_admin_forward_wait_s = 10.0
#: Connectors: longest connector name (it is part of the keys in __connectors and of default Redis key names).
connector_name_length_max = 128
#: Connectors: configuration keys one connector may have.
connector_config_entries_max = 256
#: Connectors: longest configuration value (a topic list or a regular expression), in bytes.
connector_config_value_bytes_max = 64 * 1024
#: Connectors: tasks one connector may run (each holds its own connections and buffers).
connector_tasks_max = 64
#: Connectors: largest Redis bulk reply read (a Stream entry's field, a list item): nothing larger fits a topic's
#: max.message.bytes by default, and a larger announced length is refused instead of buffered.
redis_reply_bulk_bytes_max = 64 * 1024 * 1024
#: Connectors: most elements of one Redis array reply (the sources read at most 10,000 entries a call).
redis_reply_array_items_max = 1_000_000
#: Connectors: largest value of a __connectors record a broker decodes (a larger one is counted as corrupt).
connector_state_value_bytes_max = 1024 * 1024
#: Kafka: largest request the Kafka listener accepts (Kafka's socket.request.max.bytes is 100 MiB;
#: a 1 MiB batch per partition over many partitions fits well within this).
kafka_request_bytes_max = 100 * 1024 * 1024
#: Kafka: requests one connection may have in progress before the broker stops reading from it
#: (librdkafka pipelines up to 1,000,000 by default; five is the norm for idempotent producers).
kafka_inflight_requests_max = 64
#: Share groups: offsets one share partition keeps in flight (read, not yet done) — their states and
#: record batches live in memory (KIP-932's group.share.partition.max.record.locks, raised for 16+ consumers).
share_inflight_records_max = 20_000
#: Share groups: bytes of record batches one share partition holds in memory for its in-flight records.
share_inflight_bytes_max = 64 * 1024 * 1024
#: Share groups: due delayed records one share partition holds in memory; the rest wait in the on-disk index.
share_due_records_max = 10_000
#: Share groups: the longest lease (visibility timeout) a group or a fetch may ask for (SQS's maximum).
share_lease_ms_max = 12 * 60 * 60 * 1000
#: Share groups: the most delivery attempts a group may allow (stored as an int16 per record).
share_delivery_attempts_max = 1000
#: Share groups: how far ahead a deliver-at time or a group's default delay may reach; later times are
#: delivered at this horizon (one year).
share_delay_ms_max = 366 * 24 * 60 * 60 * 1000
#: Share groups: records one ShareFetch may acquire.
share_fetch_records_max = 10_000
#: Share groups: members of one share group.
share_group_members_max = 1000
#: Share groups: how long a new host keeps a stored lease for a holder that has not joined it: a live
#: consumer finds the new host within a few heartbeat retries; a dead one's records come back this soon
#: instead of at their lease end (a holder that rejoins in time keeps its leases to their end).
share_restored_lease_grace_ms = 10_000
#: Push subscriptions: HTTP requests one subscription may have outstanding (Pub/Sub's flow control bound).
push_outstanding_max = 10_000
#: Push subscriptions: messages one batched POST may carry.
push_batch_messages_max = 1000
#: Push subscriptions: the longest an endpoint may take to answer (Pub/Sub's ack deadline maximum).
push_ack_deadline_ms_max = 600_000
#: Push subscriptions: bytes of an endpoint's response body read (the rest is discarded).
push_response_bytes_max = 64 * 1024
#: Push subscriptions: decoded batches a dispatcher keeps, so a batch acquired a few records at a time is
#: decoded once (a producer's batch holds thousands of records; each POST answered acquires one).
push_decoded_batches_max = 16
#: Client: records whose delivery callbacks wait for ``Producer.poll()`` (delivery_callbacks="poll");
#: past it ``send`` runs them itself (still in the caller's thread) rather than keep them all.
delivery_callbacks_queued_max = 100_000
#: Client: how long a transactional ``send`` waits for the producer's I/O thread to send the batches that open the
#: transaction at the partition leaders (it takes well under a millisecond; past this the send goes on regardless).
producer_io_turn_wait_ms_max = 5
