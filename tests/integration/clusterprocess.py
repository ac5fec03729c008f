"""Three (or more) brokers in separate processes forming one cluster on loopback."""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mqbroker.client import Admin
from mqbroker.errors import BrokerError
from tests.integration.brokerprocess import BrokerProcess, free_port


def start_cluster(root: pathlib.Path, size: int = 3, extra_args: list[str] | None = None) -> list[BrokerProcess]:
    """Start ``size`` brokers with node ids 1..size and one controller quorum; wait until all are ready."""
    brokers = cluster_brokers(root, size, extra_args)
    start_all(brokers)
    return brokers


def running_cluster(root: pathlib.Path, size: int = 3, extra_args: list[str] | None = None
                    ) -> Iterator[list[BrokerProcess]]:
    """``start_cluster`` for a fixture: yield the brokers, kill every one of them afterwards (failed test or not)."""
    brokers = start_cluster(root, size, extra_args)
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def cluster_brokers(root: pathlib.Path, size: int = 3, extra_args: list[str] | None = None) -> list[BrokerProcess]:
    """``size`` brokers with node ids 1..size sharing one controller quorum, data directories made, not started."""
    controller_ports = {node_id: free_port() for node_id in range(1, size + 1)}
    quorum = ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in controller_ports.items())
    brokers = [
        BrokerProcess(
            data_dir=root / f"broker-{node_id}",
            extra_args=["--node-id", str(node_id), "--controller-quorum", quorum,
                        "--controller-port", str(controller_ports[node_id]), *(extra_args or [])],
        )
        for node_id in controller_ports
    ]
    for broker in brokers:
        broker.data_dir.mkdir(parents=True, exist_ok=True)
    return brokers


def start_all(brokers: list[BrokerProcess]) -> None:
    """Start brokers in parallel: none is ready before a quorum of them runs."""
    failures: list[BaseException] = []

    def start(broker: BrokerProcess) -> None:
        try:
            broker.start(timeout_s=60)
        except BaseException as error:  # reported below, after every thread ended
            failures.append(error)

    threads = [threading.Thread(target=start, args=(broker,)) for broker in brokers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def wait_for(condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition",
             interval_s: float = 0.1) -> Any:
    """Poll ``condition`` every ``interval_s`` until it returns something true, and return that; fail the test
    naming ``what`` after ``timeout_s``. The one poll-until-true helper of the tests."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not met within {timeout_s} s"
        time.sleep(interval_s)


def retrying(call: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Run an admin ``call`` until it stops failing with a retriable error (a controller election)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except (BrokerError, ConnectionError, OSError) as error:
            retriable = not isinstance(error, BrokerError) or error.retriable
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def controller_leader(brokers: list[BrokerProcess]) -> int:
    """The controller leader's node id as the first answering running broker reports it (-1 if none)."""
    for broker in brokers:
        if broker.process is None or broker.process.poll() is not None:
            continue
        try:
            with Admin(broker.bootstrap) as admin:
                return admin.describe_quorum().leader_id
        except (BrokerError, OSError):
            continue
    return -1
