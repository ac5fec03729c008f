"""Admin HTTP API benchmark: requests/s, p50/p99 latency and broker CPU per request of its hot read routes.

``python benchmarks/admin_api_bench.py`` starts a broker (free ports, a fresh data directory,
through the tests' ``BrokerProcess``), creates ``--topics`` topics and a topic ``browse`` of four
partitions holding ``--records`` JSON records, then measures, with ``--clients`` threads each on
its own keep-alive connection for ``--seconds`` per route:

* ``GET /api/v1/topics`` (the console's topic list: metadata, partition health);
* ``GET /api/v1/topics/browse`` (a topic's partitions with offsets and sizes, its configuration);
* the message browser ``GET /api/v1/topics/browse/records``: the 50 most recent records of every
  partition (``recent``), 50 records of one partition from an offset (``offset``), and 50 from a
  time (``time``).

Routes are measured in turn, ``--rounds`` times (a shared machine's load swings: the report
gives the median of each figure over the rounds). The client threads share the machine's cores
with the broker, so broker CPU per request (from /proc) is the figure noise disturbs least.
``--url`` with ``--pid`` measures a broker already running (its topics are created there).
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import requests
from cputime import process_tree_cpu_s

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository, for tests.integration

from mqbroker.client import Producer  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

BROWSE_TOPIC = "browse"
BROWSE_PARTITIONS = 4
PAGE_RECORDS = 50


@dataclass(frozen=True)
class Figures:
    """One route's measurement."""

    requests_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_request: float | None
    errors: int


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def seed(base_url: str, bootstrap: str, topics: int, records: int) -> int:
    """Create the topics and fill ``browse``; return a time (ms) about a third of the way into its records."""
    session = requests.Session()
    for number in range(topics):
        session.post(f"{base_url}/api/v1/topics", json={"name": f"bench-{number:04d}", "partitions": 2}, timeout=30)
    answer = session.post(f"{base_url}/api/v1/topics", json={"name": BROWSE_TOPIC, "partitions": BROWSE_PARTITIONS},
                          timeout=30)
    assert answer.status_code in (201, 409), answer.text
    middle_ms = 0
    with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        for number in range(records):
            if number == records // 3:
                producer.flush()
                middle_ms = int(time.time() * 1000)
            value = json.dumps({"reading": number, "sensor": f"sensor-{number % 97}", "celsius": 20 + number % 7,
                                "site": "plant-north", "line": number % 5})
            producer.send(BROWSE_TOPIC, value=value.encode(), key=b"sensor-%d" % (number % 97),
                          partition=number % BROWSE_PARTITIONS)
        producer.flush()
    return middle_ms


def routes(middle_ms: int) -> dict[str, tuple[str, dict[str, int]]]:
    """The measured routes: name -> (path, query)."""
    records = f"/api/v1/topics/{BROWSE_TOPIC}/records"
    return {
        "GET /topics": ("/api/v1/topics", {}),
        "GET /topics/browse": (f"/api/v1/topics/{BROWSE_TOPIC}", {}),
        "records recent (4 partitions)": (records, {"limit": PAGE_RECORDS}),
        "records from offset (1 partition)": (records, {"partition": 0, "offset": 1000, "limit": PAGE_RECORDS}),
        "records from time (4 partitions)": (records, {"timestamp_ms": middle_ms, "limit": PAGE_RECORDS}),
    }


def measure(base_url: str, pid: int | None, path: str, query: dict[str, int], clients: int,
            seconds: float) -> Figures:
    """``clients`` threads calling ``path`` back to back for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures = [0] * clients
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(slot: int) -> None:
        session = requests.Session()
        session.get(base_url + path, params=query, timeout=30)  # connect and warm up
        start.wait()
        mine = latencies[slot]
        while time.monotonic() < deadline[0]:
            began = time.perf_counter()
            answer = session.get(base_url + path, params=query, timeout=30)
            mine.append(time.perf_counter() - began)
            if answer.status_code != 200:
                failures[slot] += 1

    threads = [threading.Thread(target=client, args=(slot,), daemon=True) for slot in range(clients)]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + seconds + 0.05
    cpu_before = process_tree_cpu_s(pid) if pid else None
    began = time.monotonic()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    cpu_s = process_tree_cpu_s(pid) - cpu_before if pid and cpu_before is not None else None
    every = sorted(value for mine in latencies for value in mine)
    count = len(every)
    return Figures(requests_per_s=count / elapsed, p50_ms=percentile(every, 0.50) * 1000,
                   p99_ms=percentile(every, 0.99) * 1000,
                   cpu_ms_per_request=cpu_s * 1000 / count if cpu_s is not None else None, errors=sum(failures))


def report(rounds: dict[str, list[Figures]], options: argparse.Namespace) -> None:
    """Medians over the rounds, one line per route."""
    print(f"admin API, {options.clients} client threads, {options.seconds:g} s per route, medians of "
          f"{options.rounds} rounds; {options.topics + 1} topics, {options.records} records in '{BROWSE_TOPIC}', "
          f"pages of {PAGE_RECORDS}")
    print(f"{'route':36} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/req':>11} {'errors':>7}")
    for name, figures in rounds.items():
        cpu = [f.cpu_ms_per_request for f in figures if f.cpu_ms_per_request is not None]
        print(f"{name:36} {statistics.median(f.requests_per_s for f in figures):8.0f} "
              f"{statistics.median(f.p50_ms for f in figures):8.2f} {statistics.median(f.p99_ms for f in figures):8.2f} "
              f"{(f'{statistics.median(cpu):11.2f}' if cpu else '          –')} {sum(f.errors for f in figures):7d}")


@contextmanager
def broker_under_test(options: argparse.Namespace) -> Iterator[tuple[str, str, int | None]]:
    """(API base URL, native bootstrap, broker pid): the one given or a fresh broker."""
    if options.url:
        yield options.url.rstrip("/"), options.bootstrap, options.pid
        return
    with tempfile.TemporaryDirectory(prefix="admin-api-bench-") as work:
        broker = BrokerProcess(data_dir=pathlib.Path(work) / "data")
        broker.start()
        try:
            assert broker.process is not None
            yield f"http://127.0.0.1:{broker.ports['http']}", broker.bootstrap, broker.process.pid
        finally:
            broker.stop()


def main() -> None:
    """Run the benchmark and print its report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="measure the broker whose HTTP listener is here (e.g. http://127.0.0.1:9394)")
    parser.add_argument("--bootstrap", default="127.0.0.1:9393", help="with --url: its native listener")
    parser.add_argument("--pid", type=int, help="with --url: the broker's pid, for its CPU per request")
    parser.add_argument("--topics", type=int, default=100, help="topics besides 'browse' [default: 100]")
    parser.add_argument("--records", type=int, default=40_000, help="records in 'browse' [default: 40000]")
    parser.add_argument("--clients", type=int, default=4, help="concurrent client threads [default: 4]")
    parser.add_argument("--seconds", type=float, default=3.0, help="per route and round [default: 3]")
    parser.add_argument("--rounds", type=int, default=3, help="[default: 3]")
    options = parser.parse_args()
    with broker_under_test(options) as (base_url, bootstrap, pid):
        middle_ms = seed(base_url, bootstrap, options.topics, options.records)
        measured = routes(middle_ms)
        rounds: dict[str, list[Figures]] = {name: [] for name in measured}
        for _ in range(options.rounds):
            for name, (path, query) in measured.items():
                rounds[name].append(measure(base_url, pid, path, query, options.clients, options.seconds))
    report(rounds, options)


if __name__ == "__main__":
    main()
