"""LogManager: directory layout, create/get/delete, checkpoints and start-up recovery."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from mqbroker.storage.config import LogConfig
from mqbroker.storage.errors import InvalidConfigError, PartitionExistsError, UnknownPartitionError
from mqbroker.storage.manager import CLEAN_SHUTDOWN, LogManager
from tests.powerloss import power_loss_disks
from tests.unit.storage.logtools import SMALL_SEGMENTS, payload_batch, read_all


def filled_manager(data_dir, partitions: int = 3, batches: int = 40) -> LogManager:
    manager = LogManager(str(data_dir), SMALL_SEGMENTS)
    manager.open_all(now_ms=0)
    for partition in range(partitions):
        log = manager.create("orders", partition)
        for tag in range(batches):
            log.append(payload_batch(tag + 100 * partition), now_ms=0)
    return manager


def test_partitions_live_in_topic_dash_partition_directories(tmp_path):
    manager = filled_manager(tmp_path)
    manager.create("audit.log-v2", 0)
    assert manager.partitions() == [("audit.log-v2", 0), ("orders", 0), ("orders", 1), ("orders", 2)]
    assert sorted(os.listdir(tmp_path)) == ["audit.log-v2-0", "orders-0", "orders-1", "orders-2"]
    with pytest.raises(PartitionExistsError):
        manager.create("orders", 1)
    with pytest.raises(UnknownPartitionError):
        manager.get("orders", 9)
    with pytest.raises(InvalidConfigError):
        manager.create("../escape", 0)


def test_clean_restart_skips_recovery_and_loads_indexes_lazily(tmp_path):
    manager = filled_manager(tmp_path)
    expected = {key: read_all(manager.get(*key)) for key in manager.partitions()}
    manager.close()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN)
    restarted = LogManager(str(tmp_path), SMALL_SEGMENTS)
    restarted.open_all(now_ms=0)
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN)
    log = restarted.get("orders", 1)
    oldest = log._segments[0]
    assert not oldest.offset_index.loaded and oldest.log_file.fd is None  # neither read nor opened yet
    assert restarted.segment_files.open_count == len(restarted.partitions())  # each log's active segment
    assert {key: read_all(restarted.get(*key)) for key in restarted.partitions()} == expected


def test_unclean_restart_recovers_every_partition(tmp_path):
    manager = filled_manager(tmp_path)
    expected = {key: read_all(manager.get(*key)) for key in manager.partitions()}
    manager.checkpoint()
    for key in manager.partitions():  # a torn write on every partition, then the process dies
        directory = tmp_path / f"{key[0]}-{key[1]}"
        active = sorted(name for name in os.listdir(directory) if name.endswith(".log"))[-1]
        with open(directory / active, "ab") as file:
            file.write(payload_batch(7)[:30])
    restarted = LogManager(str(tmp_path), SMALL_SEGMENTS)
    restarted.open_all(now_ms=0)
    assert {key: read_all(restarted.get(*key)) for key in restarted.partitions()} == expected


def test_log_start_offsets_survive_a_restart(tmp_path):
    manager = filled_manager(tmp_path, partitions=1)
    manager.get("orders", 0).delete_records_before(25)
    manager.close()
    restarted = LogManager(str(tmp_path), SMALL_SEGMENTS)
    restarted.open_all(now_ms=0)
    assert restarted.get("orders", 0).log_start_offset == 25


def test_deleted_partitions_stay_deleted(tmp_path):
    manager = filled_manager(tmp_path)
    manager.delete("orders", 1)
    assert manager.partitions() == [("orders", 0), ("orders", 2)]
    os.makedirs(tmp_path / "orders-2.deleting")  # a delete interrupted by a crash
    manager.close()
    restarted = LogManager(str(tmp_path), SMALL_SEGMENTS)
    restarted.open_all(now_ms=0)
    assert restarted.partitions() == [("orders", 0), ("orders", 2)]
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["orders-0", "orders-2", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"]
    )


def test_topic_configs_apply_on_open(tmp_path):
    filled_manager(tmp_path, partitions=1).close()
    restarted = LogManager(str(tmp_path), SMALL_SEGMENTS)
    compacted = LogConfig(cleanup_policy="compact")
    restarted.open_all(now_ms=0, topic_configs={"orders": compacted})
    assert restarted.get("orders", 0).config == compacted


def test_a_new_data_directory_and_its_durable_batches_survive_a_power_loss(tmp_path):
    data_dir = tmp_path / "var" / "mqbroker"  # a first start makes these directories
    with power_loss_disks(str(tmp_path)) as (disk,):
        manager = LogManager(str(data_dir), SMALL_SEGMENTS)
        manager.open_all(now_ms=0)
        log = manager.create("orders", 0)
        log.append(payload_batch(1), now_ms=0)
        log.flush()  # acknowledged under the sync policy
        disk.crash(random.Random(0), lose_everything=True)
        recovered = LogManager(str(data_dir), SMALL_SEGMENTS)
        recovered.open_all(now_ms=0)
    assert recovered.partitions() == [("orders", 0)]
    assert recovered.get("orders", 0).log_end_offset == 1 and len(read_all(recovered.get("orders", 0))) == 1


def test_logs_opened_recovered_and_created_by_a_thread_pool_hold_exactly_what_one_by_one_would(tmp_path):
    with ThreadPoolExecutor(4) as pool:
        manager = LogManager(str(tmp_path), SMALL_SEGMENTS, segment_files_open_max=4, parallel_map=pool.map)
        created = manager.create_many("orders", range(12))
        assert [log.directory for log in created] == [str(tmp_path / f"orders-{number}") for number in range(12)]
        for number, log in enumerate(created):
            for tag in range(number % 4):
                log.append(payload_batch(tag), now_ms=0)
            log.flush()
        # no close: the next open recovers every log, four at a time
        restarted = LogManager(str(tmp_path), SMALL_SEGMENTS, segment_files_open_max=4, parallel_map=pool.map)
        restarted.open_all(now_ms=0)
        assert restarted.partitions() == [("orders", number) for number in range(12)]
        for number in range(12):
            assert len(read_all(restarted.get("orders", number))) == number % 4
        restarted.close()  # closed four at a time too
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN)


def test_create_many_refuses_a_partition_named_twice_or_already_there_and_creates_none(tmp_path):
    manager = LogManager(str(tmp_path), SMALL_SEGMENTS)
    manager.create("orders", 0)
    with pytest.raises(PartitionExistsError):
        manager.create_many("orders", [1, 0])
    with pytest.raises(PartitionExistsError):
        manager.create_many("orders", [2, 2])
    assert manager.partitions() == [("orders", 0)]
    manager.close()
