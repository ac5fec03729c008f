"""AMQP publishing on a 3-broker cluster, two source trees side by side (e.g. before and after a change).

``python benchmarks/amqp_cluster_publish_ab.py --tree before=/tmp/base --tree after=.`` starts one 3-broker
cluster per tree at once (each broker runs that tree's code: its ``PYTHONPATH``), declares a durable queue (a share
queue by default) in each, and measures in alternating rounds, through a broker that does not lead
``__amqp_metadata``: ``--pipelined`` 100-byte publishes sent without waiting, confirmed (pika's SelectConnection;
msg/s), then ``--serial`` publishes each confirmed before the next (ms per publish), after one warm-up round
that is not counted. It prints each round and each
round's ratio of the later trees to the first; compare ratios, never absolute figures across runs.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.brokerprocess import BrokerProcess  # noqa: E402
from tests.integration.clusterprocess import cluster_brokers, start_all  # noqa: E402
from tests.integration.test_amqp_share_queue_reject_publish import publish_pipelined  # noqa: E402
from tests.integration.test_cluster_frontends import _amqp, _leaders  # noqa: E402

QUEUE = "bench"


def start(root: pathlib.Path, tree: str) -> list[BrokerProcess]:
    """A 3-broker cluster running the code of ``tree``."""
    brokers = cluster_brokers(root, 3, ["--kafka-tls-port", "0"])
    for broker in brokers:
        broker.environment = {"PYTHONPATH": str(pathlib.Path(tree).resolve())}
    start_all(brokers)
    return brokers


def publishing_broker(brokers: list[BrokerProcess]) -> BrokerProcess:
    """Declare the queue; the first broker not leading ``__amqp_metadata``."""
    connection = _amqp(brokers[0])
    connection.channel().queue_declare(QUEUE, durable=True)
    connection.close()
    leader = _leaders(brokers[0], "__amqp_metadata")[0]
    return next(broker for node_id, broker in enumerate(brokers, start=1) if node_id != leader)


def measure(broker: BrokerProcess, pipelined: int, serial: int) -> tuple[float, float]:
    """(pipelined msg/s, ms per publish confirmed one at a time); the queue is purged after."""
    started = time.monotonic()
    outcomes = publish_pipelined(broker.ports["amqp"], QUEUE, [b"x" * 100] * pipelined, timeout_s=300)
    rate = pipelined / (time.monotonic() - started)
    assert len(outcomes) == pipelined and all(outcomes.values()), "every publish confirmed"
    connection = _amqp(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    started = time.monotonic()
    for _ in range(serial):
        channel.basic_publish("", QUEUE, b"y" * 100)
    latency_ms = (time.monotonic() - started) * 1000 / serial
    connection.channel().queue_purge(QUEUE)
    connection.close()
    return rate, latency_ms


def main() -> None:
    """Parse the arguments, run the rounds, print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree (two or more)")
    parser.add_argument("--pipelined", type=int, default=5000)
    parser.add_argument("--serial", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = dict(tree.split("=", 1) for tree in args.tree)
    with tempfile.TemporaryDirectory(prefix="amqp-ab-") as directory:
        clusters = {name: start(pathlib.Path(directory) / name, path) for name, path in trees.items()}
        try:
            targets = {name: publishing_broker(brokers) for name, brokers in clusters.items()}
            for broker in targets.values():
                measure(broker, 500, 10)  # warm-up, not counted: the queue's share group and leaders settle
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for number in range(args.rounds):
                for name, broker in targets.items():
                    rate, latency_ms = measure(broker, args.pipelined, args.serial)
                    results[name].append((rate, latency_ms))
                    print(f"round {number} {name}: pipelined {rate:,.0f} msg/s, confirmed one at a time "
                          f"{latency_ms:.2f} ms/msg", flush=True)
            first, *others = trees
            for name in others:
                for number, ((base_rate, base_ms), (rate, latency_ms)) in enumerate(zip(results[first], results[name])):
                    print(f"round {number}: {name}/{first} pipelined ratio {rate / base_rate:.2f}, "
                          f"one at a time {latency_ms - base_ms:+.2f} ms")
        finally:
            for brokers in clusters.values():
                for broker in brokers:
                    broker.kill()


if __name__ == "__main__":
    main()
