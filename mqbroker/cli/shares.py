"""``mqbroker share-groups`` and ``mqbroker subscriptions``: queues on the log and push subscriptions.

Read commands take ``-o table|json|plain``: a table on a terminal, tab-separated columns with a
header line when piped, or one JSON document; nothing is cut to the terminal's width.
"""

from __future__ import annotations

import argparse
from typing import Any

from mqbroker.cli.common import add_client_options, client_security, parse_key_values, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.shares.settings import push_configs

GROUP_COLUMNS = (Column("group", "group"), Column("topics", "topics"), Column("members", "members", numeric=True),
                 Column("push_endpoint", "push endpoint"))
SUMMARY_COLUMNS = (Column("group", "group"), Column("topics", "topics"), Column("members", "members", numeric=True),
                   Column("dead_lettered", "dead lettered", numeric=True),
                   Column("dead_letter_depth", "dead letter depth", numeric=True))
PARTITION_COLUMNS = tuple(Column(key, key.replace("_", " "), numeric=key not in ("topic", "delivery_counts"))
                          for key in ("topic", "partition", "start_offset", "end_offset", "in_flight", "available",
                                      "dead_lettering", "due", "scheduled", "lag", "delivery_counts"))
MEMBER_COLUMNS = (Column("member", "member"), Column("client_id", "client id"), Column("host", "host"),
                  Column("topics", "topics"), Column("acquired", "acquired", numeric=True))
CONFIG_COLUMNS = (Column("config", "config"), Column("value", "value"))
SUBSCRIPTION_COLUMNS = (Column("name", "name"), Column("topics", "topics"), Column("endpoint", "endpoint"))


def add_parsers(commands: Any) -> None:
    """Register ``share-groups`` and ``subscriptions``."""
    _add_share_groups(commands)
    _add_subscriptions(commands)


def _read_command(actions: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text)
    add_client_options(parser)
    add_output_options(parser)
    return parser


def _add_share_groups(commands: Any) -> None:
    groups = commands.add_parser("share-groups", help="queues on the log: list, describe, create, alter, delete",
                                 description="Share groups: records leased to any of many consumers, acknowledged "
                                             "one by one (docs/queues.md).")
    actions = groups.add_subparsers(dest="share_groups_command", metavar="ACTION", required=True)
    _read_command(actions, "list", "every share group").set_defaults(run=reporting_errors(_list_groups))
    describe = _read_command(actions, "describe", "members, in-flight and available records, delivery counts, "
                                                  "lag and dead-letter depth")
    describe.add_argument("group")
    describe.set_defaults(run=reporting_errors(_describe_group))

    create = actions.add_parser("create", help="define a share group over topics")
    add_client_options(create)
    create.add_argument("group")
    create.add_argument("--topic", action="append", required=True, help="a topic it reads (repeat for more)")
    _add_group_settings(create)
    create.set_defaults(run=reporting_errors(_create_group))

    alter = actions.add_parser("alter", help="change a share group's topics or configs")
    add_client_options(alter)
    alter.add_argument("group")
    alter.add_argument("--topic", action="append", help="the topics it reads from now on (repeat for more)")
    _add_group_settings(alter)
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY", help="back to the default")
    alter.set_defaults(run=reporting_errors(_alter_group))

    delete = actions.add_parser("delete", help="delete a share group without members, with its state")
    add_client_options(delete)
    delete.add_argument("group")
    delete.set_defaults(run=reporting_errors(_delete_group))


def _add_group_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lease-ms", type=int, help="visibility timeout [default 30000]")
    parser.add_argument("--max-delivery-attempts", type=int, help="deliveries before dead-lettering [default 5]")
    parser.add_argument("--dead-letter-topic", help="where records past the limit (or rejected) go")
    parser.add_argument("--delay-ms", type=int, help="every record waits this long after its timestamp")
    parser.add_argument("--start", choices=("earliest", "latest"), help="where new partitions start [default latest]")
    parser.add_argument("--config", action="append", metavar="KEY=VALUE", help="any share-group config")


def _group_configs(arguments: argparse.Namespace) -> dict[str, str]:
    configs = parse_key_values(arguments.config, "--config")
    named = {"lease.ms": arguments.lease_ms, "max.delivery.attempts": arguments.max_delivery_attempts,
             "dead.letter.topic": arguments.dead_letter_topic, "delivery.delay.ms": arguments.delay_ms,
             "auto.offset.reset": arguments.start}
    configs.update({key: str(value) for key, value in named.items() if value is not None})
    return configs


def _add_subscriptions(commands: Any) -> None:
    subscriptions = commands.add_parser("subscriptions", help="push subscriptions: the broker POSTs records to an "
                                                              "HTTP endpoint", description="Push subscriptions "
                                        "(docs/queues.md): a share group whose consumer is the broker.")
    actions = subscriptions.add_subparsers(dest="subscriptions_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a push subscription (prints its signing secret)")
    add_client_options(create)
    create.add_argument("name")
    create.add_argument("--topic", required=True)
    create.add_argument("--push-endpoint", required=True, metavar="URL", help="http:// or https:// URL to POST to")
    _add_push_settings(create)
    create.add_argument("--secret", help="the HMAC signing secret [default: a new random one]")
    create.add_argument("--start", choices=("earliest", "latest"), help="deliver from the topic's start or end "
                                                                        "[default latest]")
    create.set_defaults(run=reporting_errors(_create_subscription))

    update = actions.add_parser("update", help="change a push subscription")
    add_client_options(update)
    update.add_argument("name")
    update.add_argument("--push-endpoint", metavar="URL")
    _add_push_settings(update)
    update.add_argument("--secret", help="a new signing secret")
    update.set_defaults(run=reporting_errors(_update_subscription))

    _read_command(actions, "list", "every push subscription").set_defaults(run=reporting_errors(_list_subscriptions))
    describe = _read_command(actions, "describe", "a push subscription's settings, records in flight and "
                                                  "dead letters")
    describe.add_argument("name")
    describe.set_defaults(run=reporting_errors(_describe_group))
    delete = actions.add_parser("delete", help="delete a push subscription")
    add_client_options(delete)
    delete.add_argument("name")
    delete.set_defaults(run=reporting_errors(_delete_group))


def _add_push_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--filter", action="append", help="push only matching records, e.g. "
                                                          "'header.type = \"paid\"' (repeat: all must match)")
    parser.add_argument("--max-outstanding", type=int, help="POSTs in flight at once [default 100]")
    parser.add_argument("--ack-deadline", type=float, metavar="SECONDS", help="answer time before a retry [default 10]")
    parser.add_argument("--dead-letter-topic", help="where records go after --max-delivery-attempts")
    parser.add_argument("--max-delivery-attempts", type=int, help="attempts per record [default 5]")
    parser.add_argument("--rate", type=int, metavar="PER_SECOND", help="POSTs per second at most [default: no limit]")
    parser.add_argument("--batch", type=int, metavar="N", help="records per POST (JSON body) [default 1]")
    parser.add_argument("--ca-file", metavar="FILE", help="CAs (PEM) an https:// endpoint is verified against")


def _push_options(arguments: argparse.Namespace) -> dict[str, Any]:
    options = {"filter_text": " && ".join(arguments.filter or []), "max_outstanding": arguments.max_outstanding,
               "ack_deadline_ms": None if arguments.ack_deadline is None else int(arguments.ack_deadline * 1000),
               "dead_letter_topic": arguments.dead_letter_topic or "",
               "max_delivery_attempts": arguments.max_delivery_attempts, "rate_per_second": arguments.rate,
               "batch_max_messages": arguments.batch, "ca_file": arguments.ca_file or ""}
    return options


# -- running -------------------------------------------------------------------------------------


def _admin(arguments: argparse.Namespace) -> ShareGroupAdmin:
    return ShareGroupAdmin(arguments.bootstrap, security=client_security(arguments))


def _list_groups(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        groups = admin.list()
    records = [{"group": g.group_id, "topics": list(g.topics), "members": g.members, "push_endpoint": g.push_endpoint or None}
               for g in groups]
    emit(arguments, {"share_groups": records}, [Table(columns=GROUP_COLUMNS, records=records)])
    return 0


def _describe_group(arguments: argparse.Namespace) -> int:
    name = getattr(arguments, "group", None) or arguments.name
    with _admin(arguments) as admin:
        described = admin.describe(name)
    members = [{"member": m.member_id, "client_id": m.client_id, "host": m.client_host,
                "topics": list(m.subscribed_topic_names), "acquired": m.acquired_records} for m in described.members]
    partitions = [{"topic": p.topic, "partition": p.partition_index, "start_offset": p.start_offset,
                   "end_offset": p.end_offset, "in_flight": p.acquired, "available": p.available,
                   "dead_lettering": p.dead_lettering, "due": p.due, "scheduled": p.scheduled, "lag": p.lag,
                   "delivery_counts": {str(c.delivery_count): c.records for c in p.delivery_counts}}
                  for p in described.partitions]
    document = {"group": described.group_id, "topics": list(described.topics), "configs": dict(described.configs),
                "dead_lettered": described.dead_lettered,
                "dead_letter_depth": None if described.dead_letter_depth < 0 else described.dead_letter_depth,
                "members": members, "partitions": partitions}
    configs = [{"config": key, "value": value} for key, value in sorted(described.configs.items())]
    summary = [{"group": described.group_id, "topics": list(described.topics), "members": len(members),
                "dead_lettered": described.dead_lettered, "dead_letter_depth": document["dead_letter_depth"]}]
    shown_partitions = [{**p, "delivery_counts": " ".join(f"{count}x{records}" for count, records
                                                          in p["delivery_counts"].items()) or None} for p in partitions]
    emit(arguments, document, [
        Table(columns=SUMMARY_COLUMNS, records=summary, title="share group"),
        Table(columns=PARTITION_COLUMNS, records=shown_partitions, title="partitions"),
        Table(columns=MEMBER_COLUMNS, records=members, title="members", empty="no members"),
        Table(columns=CONFIG_COLUMNS, records=configs, title="configs"),
    ])
    return 0


def _create_group(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        admin.create(arguments.group, arguments.topic, _group_configs(arguments))
    print(f"created share group {arguments.group}")
    return 0


def _alter_group(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        admin.alter(arguments.group, topics=arguments.topic, set_configs=_group_configs(arguments),
                    delete_configs=arguments.delete_config)
    print(f"changed share group {arguments.group}")
    return 0


def _delete_group(arguments: argparse.Namespace) -> int:
    name = getattr(arguments, "group", None) or arguments.name
    with _admin(arguments) as admin:
        admin.delete(name)
    print(f"deleted {name}")
    return 0


def _create_subscription(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        secret = admin.create_subscription(arguments.name, arguments.topic, endpoint=arguments.push_endpoint,
                                           secret=arguments.secret, start=arguments.start, **_push_options(arguments))
    print(f"created push subscription {arguments.name} -> {arguments.push_endpoint}")
    print(f"signing secret (X-MQ-Signature, HMAC-SHA256; shown only now): {secret}")
    return 0


def _update_subscription(arguments: argparse.Namespace) -> int:
    options = _push_options(arguments)
    configs = push_configs(endpoint=arguments.push_endpoint or "", secret=arguments.secret or "", **options)
    changed = {key: value for key, value in configs.items() if value}
    with _admin(arguments) as admin:
        admin.alter(arguments.name, set_configs=changed)
    print(f"changed push subscription {arguments.name}")
    return 0


def _list_subscriptions(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        groups = [group for group in admin.list() if group.push_endpoint]
    records = [{"name": g.group_id, "topics": list(g.topics), "endpoint": g.push_endpoint} for g in groups]
    emit(arguments, {"subscriptions": records}, [Table(columns=SUBSCRIPTION_COLUMNS, records=records)])
    return 0
