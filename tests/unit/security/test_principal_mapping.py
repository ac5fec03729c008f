"""Certificate subject / SAN to principal rules, in the style of Kafka's ssl.principal.mapping.rules."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.errors import InvalidConfigError
from mqbroker.security.principal_mapping import PrincipalMapper, parse_rules


def test_default_maps_to_the_whole_subject():
    assert PrincipalMapper().map("CN=alice,O=Acme") == "CN=alice,O=Acme"


def test_kafka_style_rules_apply_in_order():
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers,.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT"
    )
    assert mapper.map("CN=kafka-svc,OU=ServiceUsers,O=Acme") == "kafka-svc"
    assert mapper.map("CN=Alice,OU=Ops,O=Acme") == "alice@ops"
    assert mapper.map("CN=Bob") == "CN=Bob"


def test_upper_case_flag_and_newline_separators():
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/U\nDEFAULT").map("CN=bob") == "BOB"


def test_alternative_name_rules_look_at_each_san():
    mapper = PrincipalMapper(r"SAN:^DNS:(.*)\.devices\.example$/device-$1/")
    assert mapper.map("CN=x", ["IP:10.0.0.1", "DNS:t1000.devices.example"]) == "device-t1000"
    assert mapper.map("CN=x", ["DNS:elsewhere.example"]) is None


def test_escaped_slash_in_a_rule():
    assert PrincipalMapper(r"RULE:^CN=(.*)\/(.*)$/$2\/$1/").map("CN=a/b") == "b/a"


def test_no_matching_rule_gives_no_principal():
    assert PrincipalMapper("RULE:^CN=(.*?),O=Acme$/$1/").map("CN=eve,O=Evil") is None


@pytest.mark.parametrize(
    "rules", ["RULE:^CN=(.*$/$1/", "RULE:^CN=(.*)$/$2/", "NOPE", "RULE:abc", "DEFAULT,,DEFAULT"]
)
def test_invalid_rules_are_configuration_errors(rules):
    with pytest.raises(InvalidConfigError):
        parse_rules(rules)


@given(st.text(max_size=60))
def test_garbage_rules_raise_only_configuration_errors(rules):
    try:
        mapper = PrincipalMapper(rules)
    except InvalidConfigError:
        return
    for subject in ("CN=a", "", "CN=a,O=b"):
        mapper.map(subject, ["DNS:a"])
