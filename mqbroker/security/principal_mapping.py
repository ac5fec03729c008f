"""Map a verified client certificate to a principal name, with rules in the style of Kafka's
``ssl.principal.mapping.rules``.

Rules are tried in order; the first that matches wins:

* ``RULE:pattern/replacement/[L|U]`` matches the whole subject DN (RFC 4514 text, e.g.
  ``CN=alice,OU=ops,O=Example``); ``$1`` in the replacement is the first group; ``L``/``U``
  lower- or upper-cases the result.
* ``SAN:pattern/replacement/[L|U]`` (an mqbroker addition) matches each subject alternative
  name in turn, written ``DNS:name``, ``IP:address``, ``URI:uri`` or ``EMAIL:address``.
* ``DEFAULT`` maps to the subject DN unchanged.

Rules are separated by commas or newlines (``RULE:^CN=(.*?),.*$/$1/,DEFAULT``); a ``/`` inside a
pattern or replacement is written ``\\/``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mqbroker.errors import InvalidConfigError

_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|(?P<kind>RULE|SAN):(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)/"
    r"(?P<case>[LU]?))\s*(?:[,\n]|$)"
)
_JAVA_GROUP = re.compile(r"\$(\d+)")


class RuleSource(enum.Enum):
    """What a rule is matched against."""

    SUBJECT = "RULE"
    ALTERNATIVE_NAME = "SAN"
    DEFAULT = "DEFAULT"


@dataclass(frozen=True, slots=True, kw_only=True)
class MappingRule:
    """One parsed rule."""

    source: RuleSource
    pattern: re.Pattern[str] | None = None
    template: str = ""
    case: str = ""

    def apply(self, value: str) -> str | None:
        """The mapped name if ``value`` matches the whole pattern, else None."""
        if self.source is RuleSource.DEFAULT:
            return value
        assert self.pattern is not None
        match = self.pattern.fullmatch(value)
        if match is None:
            return None
        mapped = match.expand(self.template)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


def parse_rules(text: str) -> tuple[MappingRule, ...]:
    """Parse a rule list, or raise InvalidConfigError naming the part that is wrong."""
    rules: list[MappingRule] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise InvalidConfigError(f"invalid principal mapping rule at {text[position:position + 40]!r}")
        rules.append(_rule_from(match))
        position = match.end()
    return tuple(rules)


def _rule_from(match: re.Match[str]) -> MappingRule:
    if match["default"]:
        return MappingRule(source=RuleSource.DEFAULT)
    try:
        pattern = re.compile(match["pattern"].replace("\\/", "/"))
    except re.error as error:
        raise InvalidConfigError(f"invalid pattern in principal mapping rule {match.group(0)!r}: {error}") from None
    missing = [int(group) for group in _JAVA_GROUP.findall(match["replacement"]) if int(group) > pattern.groups]
    if missing:
        raise InvalidConfigError(f"principal mapping rule {match.group(0)!r} refers to missing group ${missing[0]}")
    template = _python_template(match["replacement"])
    return MappingRule(source=RuleSource(match["kind"]), pattern=pattern, template=template, case=match["case"])


def _python_template(replacement: str) -> str:
    """Translate a Java replacement (``$1`` groups, ``\\x`` a literal x) into a ``Match.expand`` template."""
    pieces: list[str] = []
    position = 0
    while position < len(replacement):
        character = replacement[position]
        group = _JAVA_GROUP.match(replacement, position)
        if group:
            pieces.append(f"\\g<{group[1]}>")
            position = group.end()
            continue
        if character == "\\" and position + 1 < len(replacement):
            position += 1
            character = replacement[position]
        pieces.append("\\\\" if character == "\\" else character)
        position += 1
    return "".join(pieces)


class PrincipalMapper:
    """Turns a certificate's subject and alternative names into a principal name."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = parse_rules(rules)

    def map(self, subject: str, alternative_names: Sequence[str] = ()) -> str | None:
        """The first rule's result, or None if no rule matches (the client is then refused)."""
        for rule in self.rules:
            candidates = alternative_names if rule.source is RuleSource.ALTERNATIVE_NAME else (subject,)
            for candidate in candidates:
                mapped = rule.apply(candidate)
                if mapped:
                    return mapped
        return None
