"""Where an acks=all record's end-to-end time goes: broker time stamps joined with the client's, by offset.

Run ``python benchmarks/e2e_timeline.py [--messages N] [--rate R] [--consumer process|thread] [--runs N]
[--max-in-flight N] [--fsync-engine auto|aio|thread|worker] [--tail FRACTION] [--json]``
(from a source tree, with it on ``PYTHONPATH``). Each run starts a broker (``twistd mqbroker`` on free ports, a
fresh data directory) whose produce → fetch path is time-stamped by wrappers installed before it starts
(CLOCK_MONOTONIC, the clock the client stamps with):

* ``rx``: the native connection's read that carried the produce; ``appended``: its batch is in the log;
* ``round``: the group-commit round covering it is handed to the fsync engine; ``synced``: that round is done
  (the high watermark moves and waiting fetches are woken at once, in the same call);
* ``answer``: a consumer fetch is answered with the batch (a fetch already parked, or one arriving later);
  ``fetch``: a consumer fetch is read, from which offset.

The client sends ``--messages`` 100-byte messages at ``--rate`` with acks=all and stamps the send time in each;
the producer's I/O thread stamps each request as it takes it from the producer core (``drain``) and after its write
to the socket (wrappers again), and the consumer (in a process of its own, or on a thread of the producer's) stamps
the receipt. For every message the script prints the distribution of each step: send → taken (``send`` appends the
record to its batch; the I/O thread takes the batch into a request once it runs, the batch's linger passed and its
leader has an in-flight slot free), taken → written (encoding and the socket write), send → written (the two),
written → rx (loopback and the broker's turn to read), rx → appended, appended → round (the previous round still running), round → synced (the fsync and the
completion reaching the reactor), synced → answer (no fetch parked: the consumer's next fetch), answer → recv
(the reply reaching the consumer). It also prints how long the reactor spent inside each round's hand-over to the
fsync engine (with AIO, the ``io_submit``: the kernel's fsync worker it wakes runs on the reactor's CPU), and how many
fetch answers stopped short of the high watermark of their time (the consumer's next fetch, from where the answer
ended, is below it: those records cost it another round trip), and how long after a round's fsync was done the next
round was handed over while records waited for it. The wrappers cost the broker some CPU: compare steps, not totals, with
``bench e2e``. Medians and p90/p99/p99.9 over the messages of each run; every run is printed.

The consumer in a process of its own also stamps its socket reads that carried fetch answers, which splits the last
step into answer → read (the reply's way and the consumer's turn for a CPU) and read → recv (its poll loop); on a thread
answer → read is 0. Both the broker and that consumer record their garbage collector's pauses. Then the slowest
``--tail`` of the messages (default 1%) are attributed: each step's mean and share of their total, how often each step
was a message's largest, how their fetch answers came (a parked fetch ``woken`` by the high watermark or ``expired``,
or a fetch that found them ``at once``: none was parked when they became durable), and how much of their path the
collectors' pauses and the next round's hand-over (which comes first in the call that learns of an fsync) took.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import dataclasses
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mqbroker.cli.bench import SEND_TIME, Receipt, settle_collector, start_receiver  # noqa: E402
from mqbroker.config import FSYNC_ENGINES  # noqa: E402
from tests.integration.brokerprocess import TWISTD, BrokerProcess  # noqa: E402

#: The steps of a message's path, in order, then two sums: the producer's part (send → taken → written) and the total.
CHAIN = ("send → taken", "taken → written", "written → rx", "rx → appended", "appended → round", "round → synced",
         "synced → answer", "answer → read", "read → recv")
STEPS = (*CHAIN, "send → written", "total")
#: Pauses of the garbage collector shorter than this are not recorded (ns).
GC_PAUSE_NS_MIN = 200_000


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the broker child: wrappers, then twistd --------------------------------------------------------------

def run_traced_broker(out_path: str, twistd_arguments: list[str]) -> None:
    """Install the time-stamping wrappers, run ``twistd``, write the events to ``out_path`` as it stops."""
    from mqbroker import service
    from mqbroker.core import fetch
    from mqbroker.durability import flusher, sync_engines
    from mqbroker.protocols import adapter
    from mqbroker.storage import log as storage_log

    now = time.monotonic_ns
    events: list[Any] = []
    last_read = [0]
    answer_kind = ["woken"]  # how a parked fetch is being answered: woken by the high watermark, or its timer
    record_collections(events)

    def client_log(partition_log: Any) -> bool:
        return not os.path.basename(partition_log.directory).startswith("__")

    def wrap(owner: Any, name: str, before: Any = None, after: Any = None) -> None:
        original = getattr(owner, name)

        def wrapper(self: Any, *arguments: Any, **keywords: Any) -> Any:
            if before is not None:
                before(self, *arguments)
            result = original(self, *arguments, **keywords)
            if after is not None:
                after(self, result, *arguments)
            return result

        setattr(owner, name, wrapper)

    def first_base_offset(results: Any) -> int | None:  # of a client topic's batches (internal readers fetch too)
        records = next((result.records for result in results if result.records and not result.topic.startswith("__")),
                       None)
        return None if records is None else int.from_bytes(bytes(records[:8]), "big")

    def answered(results: Any, kind: str) -> None:
        base = first_base_offset(results) if isinstance(results, list) else None
        if base is not None:
            events.append(("answer", now(), base, kind))

    wrap(adapter.CodecProtocol, "dataReceived", before=lambda self, data: last_read.__setitem__(0, now()))
    wrap(storage_log.PartitionLog, "append", after=lambda self, result, *_: client_log(self) and events.append(
        ("append", last_read[0], now(), result.last_offset)))
    for engine in (sync_engines.AioSync, sync_engines.ThreadSync, sync_engines.WorkerSync):
        wrap(engine, "sync", before=lambda self, logs: events.append(
            ("round", now(), [log.log_end_offset for log in logs if client_log(log)])),
             after=lambda self, result, logs: events.append(("handed", now(), time.thread_time_ns())))
        wrap(engine, "sync", before=lambda self, logs: events.append(("handing", time.thread_time_ns())))
    wrap(flusher.Flusher, "_round_done", before=lambda self, synced: events.append(
        ("synced", now(), [log.durable_end_offset for log, _ in synced if client_log(log)])))
    wrap(fetch._Waiter, "_finish", before=lambda self, answer: (  # a notice's answer is a bool, a fetch's its results
        None if self.follower or isinstance(answer, bool) else answered(answer, answer_kind[0])))
    wrap(fetch._Waiter, "complete", before=lambda self: answer_kind.__setitem__(0, "expired"),
         after=lambda self, result: answer_kind.__setitem__(0, "woken"))
    wrap(fetch.FetchService, "_fetch", before=lambda self, principal, replica_id, request: (
        replica_id < 0 and not request.positions[0].topic.startswith("__")
        and events.append(("fetch", now(), request.positions[0].offset))))
    wrap(fetch.FetchService, "_fetch", after=lambda self, deferred, principal, replica_id, request: (
        replica_id < 0 and deferred.called and answered(deferred.result, "at once")))

    def dump(self: Any) -> None:
        Path(out_path).write_text(json.dumps(events))

    wrap(service.BrokerService, "stopService", before=dump)
    from twisted.scripts.twistd import run

    sys.argv = ["twistd", *twistd_arguments]
    run()


def record_collections(into: list[Any]) -> None:
    """Append ``("gc", start ns, end ns, generation)`` to ``into`` for each collection of this process that paused
    it at least ``GC_PAUSE_NS_MIN``."""
    import gc

    started = [0]

    def callback(phase: str, info: dict[str, int]) -> None:
        at = time.monotonic_ns()
        if phase == "start":
            started[0] = at
        elif at - started[0] >= GC_PAUSE_NS_MIN:
            into.append(("gc", started[0], at, info["generation"]))

    gc.callbacks.append(callback)


# -- the client --------------------------------------------------------------------------------------------

def traced_receive(bootstrap: str, topic: str, count: int, ready: Any, stop: Any, to_parent: Any) -> None:
    """The consumer process: ``bench``'s e2e consumer, with its socket reads of fetch answers (ns, first offset) and
    its collector's pauses stamped; all of it goes back through ``to_parent`` as one JSON text."""
    from mqbroker.cli.bench import receive_stamped
    from mqbroker.client.connection import BlockingConnection

    receipts: list[Receipt] = []
    stamps: list[Any] = []
    record_collections(stamps)
    receive = BlockingConnection.receive

    def timed_receive(self: Any, *arguments: Any, **keywords: Any) -> Any:
        responses = receive(self, *arguments, **keywords)
        at = time.monotonic_ns()
        for event in responses:
            for topic_result in getattr(event.response, "topics", ()):
                for partition in getattr(topic_result, "partitions", ()):
                    records = getattr(partition, "records", None)
                    if topic_result.name == topic and records:
                        stamps.append(("read", at, int.from_bytes(bytes(records[:8]), "big")))
        return responses

    BlockingConnection.receive = timed_receive  # type: ignore[method-assign]
    try:
        receive_stamped(bootstrap, None, topic, count, ready, stop, receipts)
    finally:
        to_parent.send_bytes(json.dumps({"receipts": receipts, "stamps": stamps}).encode())


class TracedReceiver:
    """``traced_receive`` in a process of its own (spawned, as ``bench e2e``'s consumer)."""

    def __init__(self, bootstrap: str, topic: str, count: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.ready, self._stop = context.Event(), context.Event()
        self._from_child, to_parent = context.Pipe(duplex=False)
        self._process = context.Process(target=traced_receive, name="e2e-timeline-receiver", daemon=True,
                                        args=(bootstrap, topic, count, self.ready, self._stop, to_parent))
        self._process.start()
        to_parent.close()
        self.stamps: list[Any] = []

    def finish(self, timeout_s: float) -> list[Receipt]:
        """Wait up to ``timeout_s`` for every message, stop, and return the receipts (the stamps in ``stamps``)."""
        if not self._from_child.poll(timeout_s):
            self._stop.set()
        reported = json.loads(self._from_child.recv_bytes()) if self._from_child.poll(5) else {}
        self._process.join(5)
        self.stamps = reported.get("stamps", [])
        return [tuple(receipt) for receipt in reported.get("receipts", [])]  # type: ignore[misc]


def run_client(bootstrap: str, count: int, rate: int, consumer: str, max_in_flight: int = 5
               ) -> tuple[list[Receipt], list[tuple[int, int, int]], list[int], list[Any]]:
    """Send ``count`` stamped messages at ``rate`` (acks=all) to a new topic; return what the consumer received,
    the producer's requests (ns when drained from the core, ns after the socket write, records in it; the n-th
    message sent has offset n), when the producer read produce replies (ns after each read that had some) and the
    consumer's stamps (its socket reads of fetch answers and its collector's pauses; a consumer in a process of its
    own only)."""
    from mqbroker.client import Admin, Producer
    from mqbroker.client.blocking import producer_io
    from mqbroker.client.producer import ProducerCore

    writes: list[tuple[int, int, int]] = []
    taken: dict[int, int] = {}  # id(plan) -> ns it was drained
    replies: list[int] = []
    drain = ProducerCore.drain
    receive = producer_io.ProducerIO._receive
    send_plan = producer_io.ProducerIO._send

    def timed_drain(self: Any, now_ms: int, leader_of: Any) -> Any:
        plans = drain(self, now_ms, leader_of)
        at = time.monotonic_ns()
        taken.update((id(plan), at) for plan in plans)
        return plans

    def timed_send(self: Any, plan: Any, now_ms: int) -> None:
        send_plan(self, plan, now_ms)
        writes.append((taken.pop(id(plan)), time.monotonic_ns(), sum(batch.record_count for batch in plan.batches)))

    def timed_receive(self: Any, node_id: int) -> None:  # one stamp per read that carried replies
        waiting = len(self._pending)
        receive(self, node_id)
        if len(self._pending) < waiting:
            replies.append(time.monotonic_ns())

    ProducerCore.drain = timed_drain  # type: ignore[method-assign]
    producer_io.ProducerIO._receive = timed_receive  # type: ignore[method-assign]
    producer_io.ProducerIO._send = timed_send  # type: ignore[method-assign]

    topic = "timeline"
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], 1)
    receiver = (TracedReceiver(bootstrap, topic, count) if consumer == "process"
                else start_receiver(consumer, bootstrap, None, topic, count))
    if not receiver.ready.wait(30):
        receiver.finish(0)
        raise RuntimeError("the consumer did not find its starting position in 30 s")
    producer = Producer(bootstrap, acks="all", linger_ms=0, max_in_flight=max_in_flight,
                        enable_idempotence=max_in_flight <= 5)  # idempotence allows at most 5
    padding = os.urandom(100 - SEND_TIME.size)
    settle_collector()
    started = time.perf_counter()
    for index in range(count):
        delay = started + index / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send(topic, SEND_TIME.pack(time.monotonic_ns()) + padding)
    producer.flush()
    received = receiver.finish(30)
    producer.close()
    return received, writes, replies, getattr(receiver, "stamps", [])


# -- the join ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class MessagePath:
    """One message's path: the time stamps of its steps (ns, in ``CHAIN`` order from the send to the receipt) and
    how its fetch answer came (a parked fetch ``woken`` by the high watermark, ``expired`` at its deadline, or a
    fetch that found it ``at once``)."""

    marks: tuple[int, ...]
    answer_kind: str

    def steps_ms(self) -> tuple[float, ...]:
        return tuple((end - begin) / 1e6 for begin, end in zip(self.marks, self.marks[1:]))

    @property
    def total_ms(self) -> float:
        return (self.marks[-1] - self.marks[0]) / 1e6


def message_paths(events: list[Any], received: list[Receipt], writes: list[tuple[int, int, int]],
                  consumer_stamps: list[Any]) -> list[MessagePath]:
    """Each message's path, joined by offset (a round or an answer covers offsets below its end). Without the
    consumer's stamps (a consumer on a thread) its read is taken as the answer's time (answer → read is 0)."""
    write_ends = list(itertools.accumulate(records for _, _, records in writes))
    appends = sorted((event[3], event[1], event[2]) for event in events if event[0] == "append")
    append_ends = [last for last, _, _ in appends]

    def first_covering(kind: str) -> tuple[list[int], list[int]]:
        series = sorted((event[1], max(event[2])) for event in events if event[0] == kind and event[2])
        return [at for at, _ in series], [end for _, end in series]

    def first_by_base(stamps: Any) -> tuple[list[int], list[Any]]:
        found: dict[int, Any] = {}
        for base, *rest in sorted(stamps):
            found.setdefault(base, rest)
        return sorted(found), [found[base] for base in sorted(found)]

    round_times, round_ends = first_covering("round")
    synced_times, synced_ends = first_covering("synced")
    answer_bases, answers = first_by_base((event[2], event[1], event[3]) for event in events if event[0] == "answer")
    read_bases, reads = first_by_base((stamp[2], stamp[1]) for stamp in consumer_stamps if stamp[0] == "read")
    paths = []
    for offset, sent, arrived in received:
        index = bisect.bisect_left(append_ends, offset)
        started = bisect.bisect_right(round_ends, offset)
        synced = bisect.bisect_right(synced_ends, offset)
        answer = bisect.bisect_right(answer_bases, offset) - 1
        read = bisect.bisect_right(read_bases, offset) - 1
        written = bisect.bisect_right(write_ends, offset)
        if (index == len(appends) or started == len(round_times) or synced == len(synced_times) or answer < 0
                or written == len(writes) or (read_bases and read < 0)):
            continue
        _, read_at, appended_at = appends[index]
        taken_at, written_at, _ = writes[written]
        answered_at, kind = answers[answer]
        consumer_read_at = reads[read][0] if read_bases else answered_at
        paths.append(MessagePath((sent, taken_at, written_at, read_at, appended_at, round_times[started],
                            synced_times[synced], answered_at, consumer_read_at, arrived), kind))
    return paths


def step_times_ms(paths: list[MessagePath]) -> dict[str, list[float]]:
    """Each step's times over the messages (``STEPS``: the chain, then the producer's part and the total)."""
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    for path in paths:
        for step, value in zip(CHAIN, path.steps_ms()):
            steps[step].append(value)
        steps["send → written"].append((path.marks[2] - path.marks[0]) / 1e6)
        steps["total"].append(path.total_ms)
    return steps


def overlapping(pauses: list[tuple[int, int]], begin: int, end: int) -> int:
    """ns of ``pauses`` (sorted, disjoint (start, end)) inside ``[begin, end]``."""
    starts = [start for start, _ in pauses]
    total = 0
    for start, stop in pauses[max(0, bisect.bisect_right(starts, begin) - 1):bisect.bisect_right(starts, end)]:
        total += max(0, min(stop, end) - max(start, begin))
    return total


def tail_attribution(paths: list[MessagePath], events: list[Any], consumer_stamps: list[Any],
                     fraction: float = 0.01) -> dict[str, Any]:
    """Where the slowest ``fraction`` of the messages spent their time: each step's mean (ms) and share of their
    total, how often each step was a message's largest, how their fetch answers came, and how much of their
    broker part (rx → answer) and consumer part (answer → recv) the broker's and the consumer's garbage collector
    paused, and how much of their synced → answer the next round's hand-over to the fsync engine took (it comes
    first in the call that learns of the fsync)."""
    if not paths:
        return {}
    slowest = sorted(paths, key=lambda path: path.total_ms)[-max(1, int(len(paths) * fraction)):]
    count = len(slowest)
    totals = [path.total_ms for path in slowest]
    means = [sum(path.steps_ms()[index] for path in slowest) / count for index in range(len(CHAIN))]
    largest = collections.Counter(CHAIN[max(range(len(CHAIN)), key=path.steps_ms().__getitem__)] for path in slowest)
    first_sent, last_received = min(path.marks[0] for path in paths), max(path.marks[-1] for path in paths)
    broker_gc = sorted((event[1], event[2]) for event in events  # in the run (start-up's collections are not)
                       if event[0] == "gc" and first_sent <= event[1] <= last_received)
    consumer_gc = sorted((stamp[1], stamp[2]) for stamp in consumer_stamps
                         if stamp[0] == "gc" and first_sent <= stamp[1] <= last_received)
    rounds = sorted(event[1] for event in events if event[0] == "round")
    handed = sorted(event[1] for event in events if event[0] == "handed")
    hand_overs = list(zip(rounds, handed))
    return {
        "messages": count, "total_ms_from": round(min(totals), 3), "total_ms_mean": round(sum(totals) / count, 3),
        "step_mean_ms": {step: round(mean, 3) for step, mean in zip(CHAIN, means)},
        "step_share": {step: round(mean / (sum(totals) / count), 3) for step, mean in zip(CHAIN, means)},
        "largest_step": dict(largest.most_common()),
        "answer_kinds": dict(collections.Counter(path.answer_kind for path in slowest)),
        "broker_gc_ms_mean": round(sum(overlapping(broker_gc, path.marks[3], path.marks[7]) for path in slowest)
                                   / count / 1e6, 3),
        "consumer_gc_ms_mean": round(sum(overlapping(consumer_gc, path.marks[7], path.marks[9]) for path in slowest)
                                     / count / 1e6, 3),
        "next_round_hand_over_ms_mean": round(sum(overlapping(hand_overs, path.marks[6], path.marks[7])
                                                  for path in slowest) / count / 1e6, 3),
        "broker_gc_pauses": len(broker_gc), "consumer_gc_pauses": len(consumer_gc),
        "broker_gc_ms_max": round(max((end - start for start, end in broker_gc), default=0) / 1e6, 3),
        "consumer_gc_ms_max": round(max((end - start for start, end in consumer_gc), default=0) / 1e6, 3),
    }


def replies_waited(received: list[Receipt], writes: list[tuple[int, int, int]], replies: list[int]) -> dict[str, float]:
    """The share of messages that waited for 0, 1, 2 or more reads of produce replies between ``send`` and the I/O
    thread taking them into a request: an in-flight slot's turn (0 with slots free; an idempotent producer has 5)."""
    write_ends = list(itertools.accumulate(records for _, _, records in writes))
    counts = {"0": 0, "1": 0, "2+": 0}
    for offset, sent, _ in received:
        written = bisect.bisect_right(write_ends, offset)
        if written < len(writes):
            waited = bisect.bisect_left(replies, writes[written][0]) - bisect.bisect_right(replies, sent)
            counts[str(waited) if waited < 2 else "2+"] += 1
    total = max(sum(counts.values()), 1)
    return {count: round(number / total, 4) for count, number in counts.items()}


def answers_short(events: list[Any]) -> tuple[int, int]:
    """(consumer fetch answers, those that left records below the high watermark of their time behind): the
    high watermark is the durable end (one replica); where an answer ended, the consumer's next fetch starts."""
    synced = sorted((event[1], max(event[2])) for event in events if event[0] == "synced" and event[2])
    synced_times = [at for at, _ in synced]
    fetches = sorted((event[1], event[2]) for event in events if event[0] == "fetch")
    fetch_times = [at for at, _ in fetches]
    answers = short = 0
    for at in sorted(event[1] for event in events if event[0] == "answer"):
        durable = bisect.bisect_right(synced_times, at) - 1
        following = bisect.bisect_right(fetch_times, at)
        if durable < 0 or following == len(fetches):
            continue
        answers += 1
        short += fetches[following][1] < synced[durable][1]
    return answers, short


def hand_over_us(events: list[Any]) -> list[float]:
    """How long the reactor spent inside each round's ``sync`` call (AIO: the ``io_submit``, in which the kernel's
    fsync worker, woken on the reactor's CPU, may take that CPU for a while; thread: the queue hand-off)."""
    started = [event[1] for event in events if event[0] == "round"]
    handed = [event[1] for event in events if event[0] == "handed"]
    return [(end - begin) / 1e3 for begin, end in zip(started, handed)]


def next_round_gaps_us(events: list[Any]) -> list[float]:
    """For each round whose log was already written to when the round before it finished: how long after that
    finish it was handed over (the reactor's turn that learnt of the fsync, then the end-of-turn start)."""
    appends = sorted(event[2] for event in events if event[0] == "append")
    synced = sorted(event[1] for event in events if event[0] == "synced")
    gaps = []
    for at in sorted(event[1] for event in events if event[0] == "round"):
        finished = bisect.bisect_left(synced, at) - 1
        if finished >= 0 and bisect.bisect_left(appends, synced[finished]) > 0:
            previous_append = appends[bisect.bisect_left(appends, synced[finished]) - 1]
            if previous_append > (synced[finished - 1] if finished else 0):  # a record waited for that round's end
                gaps.append((at - synced[finished]) / 1e3)
    return gaps


def summary(steps: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    def at(ordered: list[float], fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 3)

    return {step: {name: at(sorted(values), fraction) for name, fraction in
                   (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))}
            for step, values in steps.items() if values}


@dataclasses.dataclass
class TracedBroker(BrokerProcess):
    """A ``BrokerProcess`` run through ``run_traced_broker``: its events go to ``events_path`` as it stops."""

    events_path: Path = Path("events.json")

    def command(self) -> list[str]:
        return [sys.executable, __file__, "--broker-child", str(self.events_path), *super().command()[len(TWISTD):]]


def measure(arguments: argparse.Namespace) -> dict[str, Any]:
    """One run: a traced broker, the paced client, the join."""
    work = Path(tempfile.mkdtemp(prefix="e2e-timeline-"))
    broker = TracedBroker(work / "data", events_path=work / "events.json",
                          extra_args=["--set", f"fsync_engine={arguments.fsync_engine}"])
    broker.start(timeout_s=60)
    try:
        received, writes, replies, consumer_stamps = run_client(
            broker.bootstrap, arguments.messages, arguments.rate, arguments.consumer, arguments.max_in_flight)
    finally:
        broker.stop(30)
    events = json.loads((work / "events.json").read_text())
    paths = message_paths(events, received, writes, consumer_stamps)
    steps = step_times_ms(paths)
    shutil.rmtree(work, ignore_errors=True)
    hand_overs = sorted(hand_over_us(events))
    cpu_started = [event[1] for event in events if event[0] == "handing"]
    cpu_ended = [event[2] for event in events if event[0] == "handed"]
    hand_over_cpu_ms = sum(end - begin for begin, end in zip(cpu_started, cpu_ended)) / 1e6
    answers, short = answers_short(events)
    gaps = sorted(next_round_gaps_us(events))
    return {"sent": arguments.messages, "received": len(received), "joined": len(steps["total"]),
            "produce_requests": len(writes), "replies_waited": replies_waited(received, writes, replies),
            "rounds": len(hand_overs),
            "round_hand_over_us": {name: round(hand_overs[min(len(hand_overs) - 1, int(fraction * len(hand_overs)))], 1)
                                   for name, fraction in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}
            | {"total_ms": round(sum(hand_overs) / 1e3, 1), "cpu_ms": round(hand_over_cpu_ms, 1)} if hand_overs else {},
            "next_round_gap_us": {name: round(gaps[min(len(gaps) - 1, int(fraction * len(gaps)))], 1)
                                  for name, fraction in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))} if gaps else {},
            "steps_ms": summary(steps), "answers": answers, "answers_short": short,
            "synced_to_answer_ms_by_kind": summary({kind: [(path.marks[7] - path.marks[6]) / 1e6 for path in paths
                                                           if path.answer_kind == kind]
                                                    for kind in ("woken", "at once", "expired")}),
            "answer_kind_messages": dict(collections.Counter(path.answer_kind for path in paths)),
            "tail": tail_attribution(paths, events, consumer_stamps, arguments.tail),
            "load_average": os.getloadavg()[0]}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--broker-child":
        run_traced_broker(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=5_000, help="messages per second [default: 5000]")
    parser.add_argument("--consumer", default="process", choices=["process", "thread"])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--fsync-engine", default="auto", choices=FSYNC_ENGINES,
                        help="the broker's fsync_engine [default: auto]")
    parser.add_argument("--max-in-flight", type=int, default=5,
                        help="the producer's requests in flight; above 5 without idempotence [default: 5]")
    parser.add_argument("--tail", type=float, default=0.01,
                        help="the fraction of slowest messages whose time is attributed [default: 0.01]")
    parser.add_argument("--json", action="store_true", help="print every run as JSON instead of tables")
    arguments = parser.parse_args()
    runs = []
    for number in range(arguments.runs):
        progress(f"run {number + 1}/{arguments.runs} ...")
        runs.append(measure(arguments))
    if arguments.json:
        print(json.dumps(runs))
        return
    for number, run in enumerate(runs, 1):
        print(f"run {number}: {run['received']:,} of {run['sent']:,} received, {run['joined']:,} joined, consumer "
              f"{arguments.consumer}, {arguments.rate:,} msg/s, fsync_engine {arguments.fsync_engine}, load average {run['load_average']:.1f}; "
              f"{run['produce_requests']:,} produce requests ({run['sent'] / max(run['produce_requests'], 1):.1f} "
              "records each)")
        print("  reads of produce replies a message waited for between send and taken: "
              + ", ".join(f"{count} {share:.1%}" for count, share in run["replies_waited"].items()))
        for step, figures in run["steps_ms"].items():
            print(f"  {step:18}" + "".join(f"{name} {value:8.3f}  " for name, value in figures.items()) + "ms")
        print(f"  {run['rounds']:,} fsync rounds; the reactor inside a round's hand-over to the engine: "
              + ", ".join(f"{name} {value:,.1f}" for name, value in run["round_hand_over_us"].items() if name not in ("total_ms", "cpu_ms"))
              + f" µs; {run['round_hand_over_us'].get('total_ms', 0):,.1f} ms in all, of it "
              f"{run['round_hand_over_us'].get('cpu_ms', 0):,.1f} ms on the reactor's CPU (the rest it was off the CPU)")
        print("  a round's fsync done → the next round handed over (records were waiting): "
              + ", ".join(f"{name} {value:,.1f}" for name, value in run["next_round_gap_us"].items()) + " µs")
        print(f"  {run['answers']:,} consumer fetch answers, {run['answers_short']:,} of them short of the high watermark "
              "(their rest waited for the consumer's next fetch)")
        print("  synced → answer by how the answer came (woken: a parked fetch answered when the high watermark moved): "
              + "; ".join(f"{kind} {run['answer_kind_messages'][kind]:,}: " + ", ".join(
                  f"{name} {value:.3f}" for name, value in figures.items()) + " ms"
                          for kind, figures in run["synced_to_answer_ms_by_kind"].items()))
        tail = run["tail"]
        if tail:
            print(f"  the slowest {tail['messages']:,} messages (total {tail['total_ms_from']:.3f} ms and more, mean "
                  f"{tail['total_ms_mean']:.3f} ms): mean ms per step (share of their total), times the largest step")
            for step in CHAIN:
                print(f"    {step:18}{tail['step_mean_ms'][step]:8.3f}  ({tail['step_share'][step]:6.1%})  "
                      f"{tail['largest_step'].get(step, 0):5}")
            print(f"    answers: {tail['answer_kinds']}; inside their steps (mean ms): the broker's collector "
                  f"{tail['broker_gc_ms_mean']:.3f}, the consumer's {tail['consumer_gc_ms_mean']:.3f}, the next round's "
                  f"hand-over {tail['next_round_hand_over_ms_mean']:.3f}")
            print(f"    collector pauses >= {GC_PAUSE_NS_MIN / 1e6:.1f} ms while messages ran: broker {tail['broker_gc_pauses']} "
                  f"(longest {tail['broker_gc_ms_max']:.3f} ms), consumer {tail['consumer_gc_pauses']} (longest "
                  f"{tail['consumer_gc_ms_max']:.3f} ms)")


if __name__ == "__main__":
    main()
