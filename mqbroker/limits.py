"""Named bounds, units last. Every buffer, queue and wait in the broker has one of these."""

from __future__ import annotations

#: Largest native-protocol frame the broker accepts (a 1 MiB record batch plus headers).
native_frame_bytes_max = 16 * 1024 * 1024
#: Requests the broker works on at once for one connection before it stops reading from it.
native_inflight_requests_max = 64
#: Bytes of unsent replies queued on one connection before the broker stops reading from it.
native_reply_bytes_max = 32 * 1024 * 1024
#: A connection that sends nothing for this long is closed.
connection_idle_ms_max = 10 * 60 * 1000
#: Longest long-poll wait a fetch may ask for.
fetch_wait_ms_max = 30_000
#: Largest fetch response (all partitions together).
fetch_response_bytes_max = 64 * 1024 * 1024
#: Longest a produce with acks=all may wait for replication.
produce_timeout_ms_max = 300_000
#: Longest topic name (as Kafka: it becomes a directory name with a partition suffix).
topic_name_length_max = 249
#: Most partitions one topic may have.
partitions_per_topic_max = 10_000
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
#: Kafka: largest request the Kafka listener accepts (Kafka's socket.request.max.bytes is 100 MiB;
#: a 1 MiB batch per partition over many partitions fits well within this).
kafka_request_bytes_max = 100 * 1024 * 1024
#: Kafka: requests one connection may have in progress before the broker stops reading from it
#: (librdkafka pipelines up to 1,000,000 by default; five is the norm for idempotent producers).
kafka_inflight_requests_max = 64
#: Client: records whose delivery callbacks wait for ``Producer.poll()`` (delivery_callbacks="poll");
#: past it ``send`` runs them itself (still in the caller's thread) rather than keep them all.
delivery_callbacks_queued_max = 100_000
