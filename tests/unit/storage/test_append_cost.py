"""What one append of a plain client batch (no producer id, not transactional: every MQTT and AMQP write, a paced
native message) costs the partition log, counted deterministically: Python calls of ``mqbroker`` code, per append,
in a segment that does not roll. A paced message is appended alone, and every call on that path counts once per
message (issue 24)."""

from __future__ import annotations

from mqbroker.storage.config import LogConfig
from tests.call_count import calls_of, is_mqbroker
from tests.unit.storage.logtools import make_batch, open_log, read_all

#: ``PartitionLog.append`` of a one-record plain batch: 54 before the producer-state steps that do nothing for such a
#: batch were skipped, the index check was made once per segment and the batch headers' properties read as fields.
PLAIN_APPEND_CALLS_MAX = 28


def test_a_plain_one_record_append_stays_within_its_python_call_budget(tmp_path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 24))
    batches = [make_batch([index.to_bytes(4, "big") * 25]) for index in range(600)]
    for batch in batches[:100]:  # warm: the segment's indexes are loaded, its file is open
        log.append(batch, now_ms=0)
    frames = [frame for frame in calls_of(lambda: [log.append(batch, now_ms=0) for batch in batches[100:]])
              if is_mqbroker(frame)]
    assert len(frames) / 500 <= PLAIN_APPEND_CALLS_MAX
    assert [batch[12:] for batch in read_all(log)] == [batch[12:] for batch in batches]  # only offsets stamped
    assert log.log_end_offset == 600
