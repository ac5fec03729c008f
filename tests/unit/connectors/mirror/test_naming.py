"""Which topics a mirror copies and how they are named here; loop prevention for active/active."""

from __future__ import annotations

from mqbroker.connectors.mirror.naming import ORIGIN_HEADER, group_mirrored, mirrored, remote_topic, with_origin
from mqbroker.connectors.mirror.settings import parse_mirror
from mqbroker.connectors.settings import SettingsReader


def settings(**config: str):
    values = {"source.bootstrap": "east:9393", "source.alias": "east", "target.alias": "west",
              **{key.replace("__", "."): value for key, value in config.items()}}
    return parse_mirror("m", SettingsReader(values))


def test_prefix_naming_skips_this_clusters_own_topics_mirrored_over_there() -> None:
    mirror = settings(topics__pattern=".*")
    assert remote_topic(mirror, "orders") == "east.orders"
    assert mirrored(mirror, "orders") and mirrored(mirror, "north.orders"), "other clusters' copies go on hop by hop"
    assert not mirrored(mirror, "west.orders"), "west's own topic mirrored to east would loop back"
    assert not mirrored(mirror, "__consumer_offsets")


def test_names_patterns_and_exclusions_choose_the_topics() -> None:
    mirror = settings(topics="a,b", topics__pattern="logs-.*", topics__exclude__pattern="logs-debug")
    assert [t for t in ("a", "b", "c", "logs-app", "logs-debug") if mirrored(mirror, t)] == ["a", "b", "logs-app"]


def test_identity_naming_keeps_names_and_groups_follow_their_pattern() -> None:
    mirror = settings(topics="a", naming="identity", groups="billing")
    assert remote_topic(mirror, "a") == "a" and mirrored(mirror, "west.a") is False
    assert group_mirrored(mirror, "billing") and not group_mirrored(mirror, "other")
    assert group_mirrored(settings(topics="a"), "anything"), "every group by default"


def test_records_leaving_with_identity_naming_carry_their_origin_and_never_go_back() -> None:
    records = [(1, b"k", b"mine", (), 0), (2, b"k", b"theirs", ((ORIGIN_HEADER, b"west"),), 0),
               (3, b"k", b"relayed", ((ORIGIN_HEADER, b"south"),), 0)]
    kept = with_origin(records, "east", "west")
    assert kept == [(1, b"k", b"mine", ((ORIGIN_HEADER, b"east"),), 0),
                    (3, b"k", b"relayed", ((ORIGIN_HEADER, b"south"),), 0)]
