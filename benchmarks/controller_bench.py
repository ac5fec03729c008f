"""Controller benchmark on a three-broker loopback cluster (separate processes).

* failover: kill -9 of the controller leader, then time until the first admin proposal
  (a topic creation, retried through the surviving brokers) is committed by the new leader;
  the killed broker is restarted before the next round. Targets: p50 <= 1.5 s, max <= 3 s.
* throughput: committed metadata proposals per second with three voters (config changes of
  one topic from concurrent admin clients spread over the brokers). Target: >= 1,000/s.

Run: ``python benchmarks/controller_bench.py [--kills 20] [--seconds 5] [--clients 16] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.client import Admin  # noqa: E402
from mqbroker.errors import BrokerError  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402
from tests.integration.clusterprocess import controller_leader, start_all, start_cluster  # noqa: E402


def _first_commit_after_kill(brokers: list[BrokerProcess], killed: int, round_number: int) -> float:
    survivors = [broker for number, broker in enumerate(brokers, start=1) if number != killed]
    started = time.monotonic()
    brokers[killed - 1].kill()
    attempt = 0
    while True:
        broker = survivors[attempt % len(survivors)]
        attempt += 1
        try:
            with Admin(broker.bootstrap, request_timeout_ms=2_000) as admin:
                admin.create_topics([f"failover-{round_number}"], partitions=1)
            return time.monotonic() - started
        except (BrokerError, OSError) as error:
            if isinstance(error, BrokerError) and not error.retriable:
                raise
            time.sleep(0.01)


def failover(brokers: list[BrokerProcess], kills: int) -> dict[str, Any]:
    """Kill the leader ``kills`` times; failover seconds p50 and max."""
    times = []
    for round_number in range(kills):
        leader = controller_leader(brokers)
        while leader not in (1, 2, 3):
            time.sleep(0.05)
            leader = controller_leader(brokers)
        elapsed = _first_commit_after_kill(brokers, leader, round_number)
        times.append(elapsed)
        print(f"  kill {round_number + 1:>2}: leader {leader}, first commit after {elapsed * 1000:.0f} ms", flush=True)
        start_all([brokers[leader - 1]])
    return {"kills": kills, "p50_s": statistics.median(times), "max_s": max(times), "times_s": times}


def throughput(brokers: list[BrokerProcess], seconds: float, clients: int) -> dict[str, Any]:
    """Committed proposals per second from ``clients`` concurrent admin connections."""
    with Admin(brokers[0].bootstrap) as admin:
        admin.create_topics(["bench-configs"], partitions=1)
    counts = [0] * clients
    stop_at = time.monotonic() + seconds

    def run(index: int) -> None:
        with Admin(brokers[index % len(brokers)].bootstrap) as admin:
            while time.monotonic() < stop_at:
                admin.alter_configs("bench-configs", {"retention.ms": str(3_600_000 + index * 100_000 + counts[index])})
                counts[index] += 1

    threads = [threading.Thread(target=run, args=(index,)) for index in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    return {"clients": clients, "proposals": sum(counts), "seconds": elapsed, "per_second": sum(counts) / elapsed}


def main() -> int:
    """Run both measurements and print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        brokers = start_cluster(pathlib.Path(directory))
        try:
            results = {"throughput": throughput(brokers, arguments.seconds, arguments.clients),
                       "failover": failover(brokers, arguments.kills)}
        finally:
            for broker in brokers:
                broker.stop()
    if arguments.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"failover over {results['failover']['kills']} kills: p50 {results['failover']['p50_s']:.3f} s, "
              f"max {results['failover']['max_s']:.3f} s (targets 1.5 s / 3 s)")
        print(f"committed proposals: {results['throughput']['per_second']:.0f}/s with 3 voters "
              f"({results['throughput']['clients']} clients; target 1,000/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
