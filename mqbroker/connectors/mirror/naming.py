"""Which source topics a mirror copies, what they are called here, and how it never copies in a loop. Pure.

Prefix naming (the default, MirrorMaker 2's): ``orders`` of cluster ``east`` becomes ``east.orders``.
A mirror never copies a topic named ``<target-alias>.*``: that is this cluster's own topic
mirrored over there, and copying it back would loop (active/active: ``east`` mirrors ``west``
and ``west`` mirrors ``east``, each skipping the other's copies of its own topics).

Identity naming keeps the names; then records carry their origin cluster in the header
``mqbroker.mirror.origin`` (set on the first hop) and a mirror drops the records whose origin is
its target cluster, so active/active mirroring of the same topic names does not loop either.
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.reading import FetchedRecord

#: The header naming the cluster a record was first produced in (identity naming only).
ORIGIN_HEADER = "mqbroker.mirror.origin"


def remote_topic(settings: MirrorSettings, topic: str) -> str:
    """The name of source topic ``topic`` in this cluster."""
    return topic if settings.naming == "identity" else f"{settings.source_alias}.{topic}"


def mirrored(settings: MirrorSettings, topic: str) -> bool:
    """Whether the mirror copies source topic ``topic``."""
    if topic.startswith("__"):
        return False
    if settings.naming == "prefix" and topic.startswith(f"{settings.target_alias}."):
        return False  # this cluster's own topic, mirrored over there: copying it back would loop
    if settings.topics_exclude is not None and settings.topics_exclude.fullmatch(topic):
        return False
    return topic in settings.topics or (settings.topics_pattern is not None and
                                        settings.topics_pattern.fullmatch(topic) is not None)


def group_mirrored(settings: MirrorSettings, group_id: str) -> bool:
    """Whether the mirror translates the offsets of consumer group ``group_id``."""
    return group_id in settings.groups or (settings.groups_pattern is not None and
                                           settings.groups_pattern.fullmatch(group_id) is not None)


def with_origin(records: Sequence[FetchedRecord], source_alias: str, target_alias: str) -> list[FetchedRecord]:
    """Identity naming, records leaving this cluster: drop those first produced in the target cluster (a loop),
    mark the others' origin as ``source_alias`` where they carry none."""
    origin = source_alias.encode("ascii")
    target = target_alias.encode("ascii")
    kept: list[FetchedRecord] = []
    for offset, key, value, headers, timestamp_ms in records:
        found = next((header_value for name, header_value in headers if name == ORIGIN_HEADER), None)
        if found == target:
            continue
        if found is None:
            headers = (*headers, (ORIGIN_HEADER, origin))
        kept.append((offset, key, value, headers, timestamp_ms))
    return kept
