"""``mqbroker users`` and ``mqbroker acls``: manage users and ACLs in the cluster metadata."""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from mqbroker.cli.common import client_command, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.cli.topics import admin_client
from mqbroker.model import CLUSTER_RESOURCE
from mqbroker.protocols.native.messages import AclBinding
from mqbroker.security.acl import WILDCARD

OPERATIONS = ("read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs", "all")
ACL_COLUMNS = (
    Column("permission", "permission"), Column("principal", "principal"), Column("operation", "operation"),
    Column("resource_type", "resource type"), Column("resource_name", "resource"), Column("pattern_type", "pattern"),
    Column("host", "host"),
)
USER_COLUMNS = (Column("name", "user"),)


def add_parsers(commands: Any) -> None:
    """Register ``users`` and ``acls``."""
    users = commands.add_parser("users", help="manage users (salted SCRAM credentials in cluster metadata)",
                                description="Manage users. Passwords are stored only as salted SCRAM keys.")
    actions = users.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_text in (("add", "create a user"), ("passwd", "change a user's password")):
        parser = client_command(actions, name, help_text, help_text[0].upper() + help_text[1:] + ".",
                                  password_options=("--sasl-password",))
        parser.add_argument("name", help="user name (the principal is User:NAME)")
        parser.add_argument("--password", dest="user_password", metavar="P",
                            help="the user's password (asked for when missing); authenticate with --sasl-password")
        parser.set_defaults(run=_upsert_user, create=name == "add")
    remove = client_command(actions, "remove", "delete a user", "Delete a user.")
    remove.add_argument("name")
    remove.set_defaults(run=_remove_user)
    listing = client_command(actions, "list", "list users", "List every user.")
    add_output_options(listing)
    listing.set_defaults(run=_list_users)

    acls = commands.add_parser("acls", help="manage ACLs (who may do what to which resource)",
                               description="Manage ACLs; deny wins over allow. See docs/security.md.")
    acl_actions = acls.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_text, run in (("add", "add an ACL", _add_acl), ("remove", "remove an ACL", _remove_acl)):
        parser = client_command(acl_actions, name, help_text, help_text[0].upper() + help_text[1:] + ".")
        _add_acl_options(parser)
        parser.set_defaults(run=run)
    listing = client_command(acl_actions, "list", "list ACLs", "List ACLs (optionally of one resource).")
    listing.add_argument("--topic")
    listing.add_argument("--group")
    listing.add_argument("--principal")
    listing.add_argument("--mqtt-topic", metavar="FILTER")
    add_output_options(listing)
    listing.set_defaults(run=_list_acls)


def _add_acl_options(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--allow", metavar="PRINCIPAL", help="allow PRINCIPAL (User:NAME or User:*)")
    who.add_argument("--deny", metavar="PRINCIPAL", help="deny PRINCIPAL (deny wins over any allow)")
    parser.add_argument("--operation", "-o", required=True, choices=OPERATIONS)
    parser.add_argument("--host", default=WILDCARD, help="client IP address [default: * (any)]")
    resource = parser.add_mutually_exclusive_group(required=True)
    resource.add_argument("--topic", metavar="NAME", help="a topic (or * for every topic)")
    resource.add_argument("--group", metavar="NAME", help="a consumer group (or *)")
    resource.add_argument("--transactional-id", metavar="ID")
    resource.add_argument("--cluster", action="store_true", help="the cluster (create topics, admin)")
    resource.add_argument("--mqtt-topic", metavar="FILTER",
                          help="an MQTT topic filter ('+', '#'; %%c is the client id, %%u the user name): "
                               "read (subscribe, receive), write (publish) or all")
    parser.add_argument("--prefixed", action="store_true", help="NAME is a prefix: every resource starting with it")


def _binding(arguments: argparse.Namespace) -> AclBinding:
    if arguments.topic is not None:
        resource_type, name = "topic", arguments.topic
    elif arguments.group is not None:
        resource_type, name = "group", arguments.group
    elif arguments.transactional_id is not None:
        resource_type, name = "transactional_id", arguments.transactional_id
    elif arguments.mqtt_topic is not None:
        resource_type, name = "mqtt_topic", arguments.mqtt_topic
    else:
        resource_type, name = "cluster", CLUSTER_RESOURCE
    return AclBinding(
        resource_type=resource_type, resource_name=name, pattern_type="prefixed" if arguments.prefixed else "literal",
        principal=arguments.allow or arguments.deny, host=arguments.host, operation=arguments.operation,
        permission="allow" if arguments.allow else "deny",
    )


def _describe(binding: AclBinding) -> str:
    pattern = " (prefixed)" if binding.pattern_type == "prefixed" else ""
    return (f"{binding.permission:5} {binding.principal:20} {binding.operation:16} "
            f"{binding.resource_type}:{binding.resource_name}{pattern}  host={binding.host}")


@reporting_errors
def _upsert_user(arguments: argparse.Namespace) -> int:
    password = arguments.user_password or getpass.getpass(f"password for {arguments.name}: ")
    with admin_client(arguments) as admin:
        admin.upsert_user(arguments.name, password, create=arguments.create)
    print(f"user {arguments.name} {'created' if arguments.create else 'updated'}")
    return 0


@reporting_errors
def _remove_user(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        admin.remove_user(arguments.name)
    print(f"user {arguments.name} removed")
    return 0


@reporting_errors
def _list_users(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        records = [{"name": name} for name in sorted(admin.list_users())]
    emit(arguments, {"users": records}, [Table(columns=USER_COLUMNS, records=records)])
    return 0


@reporting_errors
def _add_acl(arguments: argparse.Namespace) -> int:
    binding = _binding(arguments)
    with admin_client(arguments) as admin:
        admin.create_acls([binding])
    print(f"added: {_describe(binding)}")
    return 0


@reporting_errors
def _remove_acl(arguments: argparse.Namespace) -> int:
    binding = _binding(arguments)
    with admin_client(arguments) as admin:
        admin.delete_acls([binding])
    print(f"removed: {_describe(binding)}")
    return 0


@reporting_errors
def _list_acls(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        bindings = admin.describe_acls()
    records = [
        {"permission": binding.permission, "principal": binding.principal, "operation": binding.operation,
         "resource_type": binding.resource_type, "resource_name": binding.resource_name,
         "pattern_type": binding.pattern_type, "host": binding.host}
        for binding in bindings
        if _shown(binding, arguments)
    ]
    emit(arguments, {"acls": records}, [Table(columns=ACL_COLUMNS, records=records)])
    return 0


def _shown(binding: AclBinding, arguments: argparse.Namespace) -> bool:
    """Whether ``binding`` passes the --topic, --group, --mqtt-topic and --principal filters of ``acls list``."""
    resource = (binding.resource_type, binding.resource_name)
    return ((arguments.topic is None or resource == ("topic", arguments.topic))
            and (arguments.group is None or resource == ("group", arguments.group))
            and (arguments.mqtt_topic is None or resource == ("mqtt_topic", arguments.mqtt_topic))
            and (arguments.principal is None or binding.principal == arguments.principal))
