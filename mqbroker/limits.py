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
