"""Retained messages in memory, one per topic name, found by topic filter through a tree of levels.

The durable copy lives in a compacted log topic (the adapter writes it and replays it at
start); this store answers "which retained messages match this filter" on SUBSCRIBE without
scanning every retained topic when the filter has literal levels.
"""

from __future__ import annotations

from collections.abc import Iterator

from mqbroker.protocols.mqtt.state import OutboundMessage


class _Level:
    __slots__ = ("children", "message")

    def __init__(self) -> None:
        self.children: dict[str, _Level] = {}
        self.message: OutboundMessage | None = None


class RetainedStore:
    """Topic name → retained message; ``matching(filter)`` walks only the levels the filter allows."""

    __slots__ = ("_root", "_count")

    def __init__(self) -> None:
        self._root = _Level()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def set(self, message: OutboundMessage) -> None:
        """Retain ``message`` for its topic; an empty payload clears the topic [MQTT-3.3.1-10]."""
        levels = message.topic.split("/")
        if not message.payload:
            self._clear(levels)
            return
        node = self._root
        for level in levels:
            node = node.children.setdefault(level, _Level())
        self._count += node.message is None
        node.message = message

    def get(self, topic: str) -> OutboundMessage | None:
        """The retained message of ``topic``, if any."""
        node: _Level | None = self._root
        for level in topic.split("/"):
            node = node.children.get(level) if node is not None else None
        return node.message if node is not None else None

    def _clear(self, levels: list[str]) -> None:
        path = [self._root]
        for level in levels:
            child = path[-1].children.get(level)
            if child is None:
                return
            path.append(child)
        if path[-1].message is None:
            return
        path[-1].message = None
        self._count -= 1
        for depth in range(len(levels), 0, -1):  # prune empty branches, deepest first
            node = path[depth]
            if node.message is not None or node.children:
                break
            del path[depth - 1].children[levels[depth - 1]]

    def matching(self, topic_filter: str) -> Iterator[OutboundMessage]:
        """Retained messages whose topic matches ``topic_filter``; wildcards skip ``$`` topics at level 1."""
        levels = topic_filter.split("/")
        stack: list[tuple[_Level, int]] = [(self._root, 0)]
        while stack:
            node, index = stack.pop()
            if index == len(levels):
                if node.message is not None:
                    yield node.message
                continue
            level = levels[index]
            if level == "#":
                if index > 0 and node.message is not None:
                    yield node.message  # 'sport/#' also matches 'sport'
                yield from _everything_below(node, skip_dollar=index == 0)
            elif level == "+":
                for name, child in node.children.items():
                    if not (index == 0 and name.startswith("$")):  # [MQTT-4.7.2-1]
                        stack.append((child, index + 1))
            else:
                child = node.children.get(level)
                if child is not None:
                    stack.append((child, index + 1))


def _everything_below(node: _Level, *, skip_dollar: bool) -> Iterator[OutboundMessage]:
    stack = [child for name, child in node.children.items() if not (skip_dollar and name.startswith("$"))]
    while stack:
        current = stack.pop()
        if current.message is not None:
            yield current.message
        stack.extend(current.children.values())
