"""Exchanges and bindings: direct, fanout, topic and headers routing, pure and in memory.

Every exchange type keeps an index, so routing never scans all bindings: direct is a dict
by key, fanout a set, topic a word trie (``*`` one word, ``#`` zero or more). Only headers
exchanges, rare and small, test each binding. Exchange-to-exchange bindings are followed
once each (cycles are harmless). The default exchange ``""`` routes to the queue named by
the routing key; ``amq.*`` exchanges are predeclared and may not be declared or deleted.
The adapter persists ``exchanges`` and ``bindings`` in cluster metadata and replays them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode


class ExchangeType(enum.Enum):
    """How an exchange picks destinations."""

    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"


class DestinationKind(enum.Enum):
    """What a binding points at."""

    QUEUE = "queue"
    EXCHANGE = "exchange"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """A declared exchange."""

    name: str
    type: ExchangeType
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    #: A non-durable exchange declared in a cluster: the node id of the broker it was declared through, which deletes
    #: it when it restarts (``transient.py``); None otherwise.
    home: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """Messages reaching ``source`` that match go on to ``destination``."""

    source: str
    destination: str
    destination_kind: DestinationKind = DestinationKind.QUEUE
    routing_key: str = ""
    arguments: tuple[tuple[str, Any], ...] = ()  # a tuple so bindings are hashable

    @property
    def target(self) -> tuple[DestinationKind, str]:
        """The (kind, name) pair routing produces."""
        return (self.destination_kind, self.destination)


Target = tuple[DestinationKind, str]
DEFAULT_EXCHANGE = ""
PREDECLARED = (
    Exchange(name="amq.direct", type=ExchangeType.DIRECT),
    Exchange(name="amq.fanout", type=ExchangeType.FANOUT),
    Exchange(name="amq.topic", type=ExchangeType.TOPIC),
    Exchange(name="amq.headers", type=ExchangeType.HEADERS),
    Exchange(name="amq.match", type=ExchangeType.HEADERS),
)


class TopicTrie:
    """Topic patterns stored word by word; matching visits only the branches a key can take."""

    __slots__ = ("_children", "_targets")

    def __init__(self) -> None:
        self._children: dict[str, TopicTrie] = {}
        self._targets: dict[Target, int] = {}  # a target bound twice with equivalent patterns counts twice

    def add(self, pattern: str, target: Target) -> None:
        """Bind ``target`` under ``pattern``."""
        node = self
        for word in pattern.split("."):
            node = node._children.setdefault(word, TopicTrie())
        node._targets[target] = node._targets.get(target, 0) + 1

    def remove(self, pattern: str, target: Target) -> None:
        """Undo one ``add``; prunes branches left empty."""
        path = [self]
        for word in pattern.split("."):
            path.append(path[-1]._children[word])
        leaf = path[-1]
        leaf._targets[target] -= 1
        if not leaf._targets[target]:
            del leaf._targets[target]
        for parent, word, node in zip(reversed(path[:-1]), reversed(pattern.split(".")), reversed(path[1:])):
            if node._targets or node._children:
                break
            del parent._children[word]

    def match(self, routing_key: str) -> set[Target]:
        """Targets whose pattern matches ``routing_key``."""
        words = routing_key.split(".")
        found: set[Target] = set()
        visited: set[tuple[int, int]] = set()  # (node, word index): '#' branches meet again
        stack: list[tuple[TopicTrie, int]] = [(self, 0)]
        while stack:
            node, index = stack.pop()
            if (id(node), index) in visited:
                continue
            visited.add((id(node), index))
            hash_node = node._children.get("#")
            if hash_node is not None:
                stack.extend((hash_node, later) for later in range(index, len(words) + 1))
            if index == len(words):
                found.update(node._targets)
                continue
            for word in (words[index], "*"):
                child = node._children.get(word)
                if child is not None:
                    stack.append((child, index + 1))
        return found


def headers_match(binding_arguments: Mapping[str, Any], headers: Mapping[str, Any]) -> bool:
    """RabbitMQ's headers-exchange rule: x-match all (default) or any over non-``x-`` keys."""
    mode = str(binding_arguments.get("x-match", "all"))
    wanted = {key: value for key, value in binding_arguments.items() if not key.startswith("x-")}
    hits = (key in headers and (value is None or headers[key] == value) for key, value in wanted.items())
    return any(hits) if mode.startswith("any") else all(hits)


class _Index:
    """The bindings leaving one exchange, indexed for its type."""

    __slots__ = ("type", "bindings", "_by_key", "_trie")

    def __init__(self, exchange_type: ExchangeType) -> None:
        self.type = exchange_type
        self.bindings: set[Binding] = set()
        self._by_key: dict[str, set[Target]] = {}
        self._trie = TopicTrie()

    def add(self, binding: Binding) -> None:
        if binding in self.bindings:
            return
        self.bindings.add(binding)
        if self.type is ExchangeType.DIRECT:
            self._by_key.setdefault(binding.routing_key, set()).add(binding.target)
        elif self.type is ExchangeType.TOPIC:
            self._trie.add(binding.routing_key, binding.target)

    def remove(self, binding: Binding) -> None:
        self.bindings.discard(binding)
        if self.type is ExchangeType.DIRECT:
            still_bound = any(
                other.target == binding.target and other.routing_key == binding.routing_key for other in self.bindings
            )
            if not still_bound:
                targets = self._by_key[binding.routing_key]
                targets.discard(binding.target)
                if not targets:
                    del self._by_key[binding.routing_key]
        elif self.type is ExchangeType.TOPIC:
            self._trie.remove(binding.routing_key, binding.target)

    def match(self, routing_key: str, headers: Mapping[str, Any]) -> set[Target]:
        if self.type is ExchangeType.DIRECT:
            return set(self._by_key.get(routing_key, ()))
        if self.type is ExchangeType.TOPIC:
            return self._trie.match(routing_key)
        if self.type is ExchangeType.FANOUT:
            return {binding.target for binding in self.bindings}
        return {binding.target for binding in self.bindings if headers_match(dict(binding.arguments), headers)}


class Router:
    """The exchanges and bindings of one virtual host."""

    def __init__(self) -> None:
        self._exchanges: dict[str, Exchange] = {}
        self._indexes: dict[str, _Index] = {}
        self._queues: set[str] = set()
        for exchange in PREDECLARED:
            self._add_exchange(exchange)

    @property
    def exchanges(self) -> Mapping[str, Exchange]:
        """Every exchange by name (the default exchange is implicit, not listed)."""
        return self._exchanges

    @property
    def bindings(self) -> Iterable[Binding]:
        """Every explicit binding (the default exchange's implicit ones are not listed)."""
        for index in self._indexes.values():
            yield from index.bindings

    def _add_exchange(self, exchange: Exchange) -> None:
        self._exchanges[exchange.name] = exchange
        self._indexes[exchange.name] = _Index(exchange.type)

    def declare_exchange(self, exchange: Exchange, *, passive: bool = False) -> None:
        """Create ``exchange``, or check an existing one matches (406 if not, 404 if passive and absent)."""
        if passive:
            self.lookup(exchange.name)
            return
        existing = self._exchanges.get(exchange.name)
        if existing is None:
            if exchange.name == DEFAULT_EXCHANGE or exchange.name.startswith("amq."):
                raise AmqpError(ReplyCode.ACCESS_REFUSED, f"exchange name '{exchange.name}' is reserved")
            self._add_exchange(exchange)
        elif (existing.type, existing.durable, existing.auto_delete, existing.internal) != (
            exchange.type, exchange.durable, exchange.auto_delete, exchange.internal
        ):
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"exchange '{exchange.name}' exists as {existing.type.value} durable={existing.durable} "
                f"auto_delete={existing.auto_delete}; redeclare it with the same flags",
            )

    def replace_exchange(self, exchange: Exchange) -> None:
        """Put ``exchange`` in place of the declared one of its name and type, keeping its bindings (its stored
        form, e.g. with another home)."""
        if self.lookup(exchange.name).type is exchange.type:
            self._exchanges[exchange.name] = exchange

    def lookup(self, name: str) -> Exchange:
        """The exchange called ``name`` (404 if there is none)."""
        exchange = self._exchanges.get(name)
        if exchange is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '/'")
        return exchange

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        """Delete an exchange and every binding to or from it."""
        if name == DEFAULT_EXCHANGE or name.startswith("amq."):
            raise AmqpError(ReplyCode.ACCESS_REFUSED, f"exchange '{name}' is predeclared and cannot be deleted")
        self.lookup(name)
        if if_unused and self._indexes[name].bindings:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"exchange '{name}' still has bindings")
        del self._exchanges[name]
        del self._indexes[name]
        self._drop_bindings_to(DestinationKind.EXCHANGE, name)

    def add_queue(self, name: str) -> None:
        """Make ``name`` reachable through the default exchange."""
        self._queues.add(name)

    def remove_queue(self, name: str) -> None:
        """Forget a deleted queue and every binding to it."""
        self._queues.discard(name)
        self._drop_bindings_to(DestinationKind.QUEUE, name)

    def _drop_bindings_to(self, kind: DestinationKind, name: str) -> None:
        for index in list(self._indexes.values()):
            for binding in [binding for binding in index.bindings if binding.target == (kind, name)]:
                self.unbind(binding)

    def bind(self, binding: Binding) -> None:
        """Add a binding (idempotent); the source and destination must exist."""
        if binding.source == DEFAULT_EXCHANGE:
            raise AmqpError(ReplyCode.ACCESS_REFUSED, "the default exchange cannot be bound explicitly")
        self.lookup(binding.source)
        self._check_destination(binding)
        self._indexes[binding.source].add(binding)

    def unbind(self, binding: Binding) -> list[str]:
        """Remove a binding (absent is fine); returns auto-delete exchanges this left unused and deleted."""
        index = self._indexes.get(binding.source)
        if index is None or binding not in index.bindings:
            return []
        index.remove(binding)
        source = self._exchanges[binding.source]
        if source.auto_delete and not index.bindings:
            self.delete_exchange(source.name)
            return [source.name]
        return []

    def _check_destination(self, binding: Binding) -> None:
        if binding.destination_kind is DestinationKind.EXCHANGE:
            self.lookup(binding.destination)
        elif binding.destination not in self._queues:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no queue '{binding.destination}' in vhost '/'")

    def route(self, exchange: str, routing_key: str, headers: Mapping[str, Any] | None = None) -> set[str]:
        """The queues a message published to ``exchange`` reaches (404 if the exchange is missing)."""
        if exchange == DEFAULT_EXCHANGE:
            return {routing_key} if routing_key in self._queues else set()
        self.lookup(exchange)
        queues: set[str] = set()
        seen = {exchange}
        pending = [exchange]
        while pending:
            for kind, name in self._indexes[pending.pop()].match(routing_key, headers or {}):
                if kind is DestinationKind.QUEUE:
                    queues.add(name)
                elif name not in seen:
                    seen.add(name)
                    pending.append(name)
        return queues
