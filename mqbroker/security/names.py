"""Names clients choose for users, consumer groups and AMQP queues and exchanges: checked whole (pure).

Such a name ends up in log lines, audit lines, metadata records and internal-topic keys, so it
must be printable: no control character (a newline would split a log or checkpoint line), not
empty, and bounded. Every character is looked at; no pattern is matched against a prefix.
"""

from __future__ import annotations

import unicodedata


def name_problem(name: str, length_max: int) -> str | None:
    """What is wrong with ``name`` ("is empty", "has a control character"...), or None if it is fine."""
    if not name:
        return "is empty"
    if len(name) > length_max:
        return f"has {len(name)} characters; at most {length_max} are allowed"
    for position, character in enumerate(name):
        if unicodedata.category(character).startswith("C"):  # control, format, surrogate, private use, unassigned
            return f"has the control or unprintable character {character!r} at position {position}"
    return None
