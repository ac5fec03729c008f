"""Exchange routing against a brute-force reference, plus declare/delete rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.amqp.routing import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Router,
    TopicTrie,
    headers_match,
)
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode

words = st.sampled_from(["a", "b", "c", ""])
routing_keys = st.lists(words, min_size=1, max_size=5).map(".".join)
patterns = st.lists(st.sampled_from(["a", "b", "c", "*", "#", ""]), min_size=1, max_size=5).map(".".join)


def reference_topic_match(pattern: list[str], key: list[str]) -> bool:
    """The textbook recursive definition: '*' one word, '#' zero or more words."""
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_topic_match(rest, key[skip:]) for skip in range(len(key) + 1))
    return bool(key) and head in ("*", key[0]) and reference_topic_match(rest, key[1:])


def reference_route(bindings: list[Binding], exchanges: dict[str, ExchangeType], exchange: str, key: str) -> set[str]:
    """Scan every binding, following exchange bindings to a fixed point."""
    reached, queues, frontier = {exchange}, set(), [exchange]
    while frontier:
        source = frontier.pop()
        for binding in bindings:
            kind = exchanges[binding.source]
            matches = {
                ExchangeType.DIRECT: binding.routing_key == key,
                ExchangeType.FANOUT: True,
                ExchangeType.TOPIC: reference_topic_match(binding.routing_key.split("."), key.split(".")),
            }[kind]
            if binding.source != source or not matches:
                continue
            if binding.destination_kind is DestinationKind.QUEUE:
                queues.add(binding.destination)
            elif binding.destination not in reached:
                reached.add(binding.destination)
                frontier.append(binding.destination)
    return queues


@settings(max_examples=300)
@given(bound=st.lists(patterns, max_size=8), keys=st.lists(routing_keys, min_size=1, max_size=8))
def test_topic_trie_agrees_with_the_reference_matcher(bound: list[str], keys: list[str]) -> None:
    trie = TopicTrie()
    for number, pattern in enumerate(bound):
        trie.add(pattern, (DestinationKind.QUEUE, str(number)))
    for key in keys:
        expected = {str(n) for n, pattern in enumerate(bound) if reference_topic_match(pattern.split("."), key.split("."))}
        assert {name for _, name in trie.match(key)} == expected


exchange_names = st.sampled_from(["x1", "x2", "x3"])
binding_specs = st.tuples(exchange_names, st.sampled_from(["q1", "q2", "q3", "x1", "x2", "x3"]), patterns, st.booleans())


@settings(max_examples=300)
@given(
    types=st.fixed_dictionaries({name: st.sampled_from(list(ExchangeType)[:3]) for name in ["x1", "x2", "x3"]}),
    specs=st.lists(binding_specs, max_size=12),
    removed=st.sets(st.integers(0, 11)),
    key=routing_keys,
)
def test_routing_agrees_with_a_brute_force_scan(types, specs, removed, key) -> None:
    router = Router()
    for name, kind in types.items():
        router.declare_exchange(Exchange(name=name, type=kind))
    for queue in ["q1", "q2", "q3"]:
        router.add_queue(queue)
    bindings = []
    for source, destination, routing_key, _ in specs:
        kind = DestinationKind.EXCHANGE if destination.startswith("x") else DestinationKind.QUEUE
        binding = Binding(source=source, destination=destination, destination_kind=kind, routing_key=routing_key)
        router.bind(binding)
        bindings.append(binding)
    for number in sorted(removed):
        if number < len(bindings):
            router.unbind(bindings[number])  # unbinding twice is harmless
    removed_bindings = {bindings[number] for number in removed if number < len(bindings)}
    live = [binding for binding in dict.fromkeys(bindings) if binding not in removed_bindings]
    for exchange in types:
        assert router.route(exchange, key) == reference_route(live, types, exchange, key)


def test_default_exchange_routes_by_queue_name() -> None:
    router = Router()
    router.add_queue("celery")
    assert router.route("", "celery") == {"celery"}
    assert router.route("", "missing") == set()
    router.remove_queue("celery")
    assert router.route("", "celery") == set()


def test_predeclared_exchanges_exist_and_are_protected() -> None:
    router = Router()
    router.add_queue("q")
    router.bind(Binding(source="amq.topic", destination="q", routing_key="t.#"))
    assert router.route("amq.topic", "t.a.b") == {"q"}
    with pytest.raises(AmqpError) as caught:
        router.delete_exchange("amq.topic")
    assert caught.value.reply_code is ReplyCode.ACCESS_REFUSED
    with pytest.raises(AmqpError) as caught:
        router.declare_exchange(Exchange(name="amq.mine", type=ExchangeType.DIRECT))
    assert caught.value.reply_code is ReplyCode.ACCESS_REFUSED


def test_redeclaring_with_other_flags_fails_and_passive_declare_of_missing_is_not_found() -> None:
    router = Router()
    router.declare_exchange(Exchange(name="celeryev", type=ExchangeType.TOPIC))
    router.declare_exchange(Exchange(name="celeryev", type=ExchangeType.TOPIC))
    with pytest.raises(AmqpError) as caught:
        router.declare_exchange(Exchange(name="celeryev", type=ExchangeType.FANOUT))
    assert caught.value.reply_code is ReplyCode.PRECONDITION_FAILED and not caught.value.connection_level
    with pytest.raises(AmqpError) as caught:
        router.declare_exchange(Exchange(name="nope", type=ExchangeType.FANOUT), passive=True)
    assert caught.value.reply_code is ReplyCode.NOT_FOUND


def test_auto_delete_exchange_goes_with_its_last_binding() -> None:
    router = Router()
    router.declare_exchange(Exchange(name="tmp", type=ExchangeType.FANOUT, auto_delete=True))
    router.add_queue("q")
    binding = Binding(source="tmp", destination="q")
    router.bind(binding)
    assert router.unbind(binding) == ["tmp"]
    assert "tmp" not in router.exchanges


def test_headers_exchange_matches_all_or_any() -> None:
    assert headers_match({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3})
    assert not headers_match({"a": 1, "b": 2}, {"a": 1})
    assert headers_match({"x-match": "any", "a": 1, "b": 2}, {"a": 1})
    router = Router()
    router.add_queue("q")
    router.bind(Binding(source="amq.headers", destination="q", arguments=(("format", "pdf"),)))
    assert router.route("amq.headers", "", {"format": "pdf"}) == {"q"}
    assert router.route("amq.headers", "", {"format": "zip"}) == set()


def test_replacing_an_exchange_keeps_its_bindings_and_never_changes_its_type() -> None:
    router = Router()
    router.add_queue("worker")
    declared = Exchange(name="pidbox", type=ExchangeType.FANOUT, durable=False, home=1)
    router.declare_exchange(declared)
    router.bind(Binding(source="pidbox", destination="worker"))
    router.replace_exchange(Exchange(name="pidbox", type=ExchangeType.FANOUT, durable=False, home=2))
    assert router.exchanges["pidbox"].home == 2
    assert router.route("pidbox", "") == {"worker"}
    router.replace_exchange(Exchange(name="pidbox", type=ExchangeType.TOPIC, durable=False, home=3))
    assert router.exchanges["pidbox"].home == 2
    with pytest.raises(AmqpError):
        router.replace_exchange(Exchange(name="missing", type=ExchangeType.FANOUT))
