"""Connector configurations: a flat map of strings read into checked, typed settings. Pure.

``mqbroker connectors create`` sends the map (from TOML or KEY=VALUE pairs); the broker parses
it before storing it, so a stored configuration is one that parsed. Every key is read through a
``SettingsReader``, which knows the keys a type reads and refuses the others by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from mqbroker import errors, limits
from mqbroker.model import ANONYMOUS, Principal

_REQUIRED = object()
#: Placeholders templates may use.
_PLACEHOLDER = re.compile(r"\{([a-z]+)\}")


class SettingsReader:
    """Typed reads of a connector's configuration; ``finish`` refuses the keys nobody read."""

    def __init__(self, config: Mapping[str, str]) -> None:
        if len(config) > limits.connector_config_entries_max:
            raise errors.InvalidConfigError(
                f"a connector takes at most {limits.connector_config_entries_max} configuration keys, got {len(config)}")
        for key, value in config.items():
            if len(value.encode("utf-8", "surrogateescape")) > limits.connector_config_value_bytes_max:
                raise errors.InvalidConfigError(
                    f"{key}: values are at most {limits.connector_config_value_bytes_max} bytes")
        self._config = config
        self._read: set[str] = set()

    def _raw(self, key: str, default: Any) -> Any:
        self._read.add(key)
        value = self._config.get(key)
        if value is None or value == "":
            if default is _REQUIRED:
                raise errors.InvalidConfigError(f"{key} is required")
            return default
        return value

    def text(self, key: str, default: Any = _REQUIRED) -> Any:
        """A string (``default`` when absent or empty; required without one)."""
        return self._raw(key, default)

    def integer(self, key: str, default: Any = _REQUIRED, *, minimum: int, maximum: int) -> int:
        """A whole number within ``minimum..maximum``."""
        value = self._raw(key, default)
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise errors.InvalidConfigError(f"{key} must be a whole number, got {value!r}") from None
        if not minimum <= number <= maximum:
            raise errors.InvalidConfigError(f"{key} must be within {minimum}..{maximum}, got {number}")
        return number

    def boolean(self, key: str, default: bool) -> bool:
        """``true``/``false`` (also ``1``/``0``, ``yes``/``no``)."""
        value = self._raw(key, default)
        if isinstance(value, bool):
            return value
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise errors.InvalidConfigError(f"{key} must be true or false, got {value!r}")

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _REQUIRED) -> str:
        """One of ``choices``."""
        value = self._raw(key, default)
        if value not in choices:
            raise errors.InvalidConfigError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    def names(self, key: str, default: Any = _REQUIRED) -> tuple[str, ...]:
        """A comma-separated list of names (blanks dropped)."""
        value = self._raw(key, default)
        if value is None:
            return ()
        if isinstance(value, tuple):
            return value
        return tuple(name.strip() for name in value.split(",") if name.strip())

    def pattern(self, key: str, default: Any = None) -> re.Pattern[str] | None:
        """A regular expression (matched against whole names)."""
        value = self._raw(key, default)
        if value is None:
            return None
        try:
            return re.compile(value)
        except (re.error, RecursionError, OverflowError) as error:
            raise errors.InvalidConfigError(f"{key} is not a valid regular expression: {error}") from None

    def template(self, key: str, default: Any, placeholders: tuple[str, ...]) -> str:
        """Text with ``{placeholder}`` fields; only ``placeholders`` may appear."""
        value = str(self._raw(key, default))
        for found in _PLACEHOLDER.findall(value):
            if found not in placeholders:
                raise errors.InvalidConfigError(
                    f"{key}: unknown placeholder {{{found}}}; use {', '.join('{' + p + '}' for p in placeholders)}")
        return value

    def finish(self) -> None:
        """Refuse the keys this connector type does not know."""
        unknown = sorted(set(self._config) - self._read)
        if unknown:
            raise errors.InvalidConfigError(
                f"unknown configuration key(s) {', '.join(unknown[:10])} for connector type "
                f"{self._config.get('type')!r}; see docs/connectors.md")


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisAddress:
    """Where a Redis server is: from ``redis.url`` (``redis[s]://[:password@]host[:port][/db]``; ``rediss``: TLS)."""

    host: str
    port: int
    database: int = 0
    password: str | None = None
    #: TLS (``rediss://``): the server verified against ``tls_ca`` (else the system store) and its hostname.
    tls: bool = False
    tls_ca: str | None = None
    #: The connector's own certificate and key, for a Redis that requires them (``tls-auth-clients``).
    tls_cert: str | None = None
    tls_key: str | None = None

    def __str__(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/{self.database}"


def redis_address(reader: SettingsReader) -> RedisAddress:
    """``redis.url`` (required) and ``redis.password`` (overrides a password in the URL)."""
    url = reader.text("redis.url")
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
        database_text = parts.path.strip("/") or "0"
        database = int(database_text)
    except ValueError as error:
        raise errors.InvalidConfigError(f"redis.url {url!r} is not redis://host[:port][/db]: {error}") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname or not 0 <= database <= 1_000_000:
        raise errors.InvalidConfigError(f"redis.url {url!r} is not redis://[:password@]host[:port][/db] "
                                        "(rediss:// for TLS)")
    password = reader.text("redis.password", None) or (unquote(parts.password) if parts.password else None)
    tls = parts.scheme == "rediss"
    tls_files = {key: reader.text(f"redis.tls.{key}", None) for key in ("ca", "cert", "key")}
    if not tls and any(tls_files.values()):
        raise errors.InvalidConfigError("redis.tls.* settings need TLS: write redis.url as rediss://host:port")
    if (tls_files["cert"] is None) != (tls_files["key"] is None):
        raise errors.InvalidConfigError("redis.tls.cert and redis.tls.key go together: set both or neither")
    return RedisAddress(host=parts.hostname, port=port, database=database, password=password, tls=tls,
                        tls_ca=tls_files["ca"], tls_cert=tls_files["cert"], tls_key=tls_files["key"])


def fill(template: str, **values: str) -> str:
    """``template`` with its ``{placeholder}`` fields replaced."""
    return _PLACEHOLDER.sub(lambda found: values[found.group(1)], template)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedConfig:
    """A checked configuration: its type, task count, who its tasks act as and the type's own settings."""

    type: str
    tasks_count: int
    settings: Any
    #: The principal the tasks' reads and writes are authorized as (the connector's creator).
    principal: Principal = ANONYMOUS


#: The key the admin service sets to the creating principal: every task acts as it.
PRINCIPAL_KEY = "principal"

#: Reads one connector type's own settings (its keys only; ``type`` and ``tasks.max`` are read already).
SettingsParser = Callable[[str, SettingsReader], Any]


def parse_config(name: str, config: Mapping[str, str], parsers: Mapping[str, SettingsParser]) -> ParsedConfig:
    """Check ``config`` for connector ``name``: ``type``, ``tasks.max``, then the type's keys (InvalidConfigError)."""
    reader = SettingsReader(config)
    connector_type = reader.choice("type", tuple(sorted(parsers)))
    tasks_count = reader.integer("tasks.max", 1, minimum=1, maximum=limits.connector_tasks_max)
    principal = parse_principal(reader.text(PRINCIPAL_KEY, str(ANONYMOUS)))
    settings = parsers[connector_type](name, reader)
    reader.finish()
    return ParsedConfig(type=connector_type, tasks_count=tasks_count, settings=settings, principal=principal)


def parse_principal(text: str) -> Principal:
    """``Kind:name`` (``User:alice``) as a principal; InvalidConfigError otherwise."""
    kind, separator, name = text.partition(":")
    if not separator or not kind or not name:
        raise errors.InvalidConfigError(f"{PRINCIPAL_KEY} must be KIND:NAME (e.g. User:alice), got {text[:80]!r}")
    return Principal(kind, name)


def tasks_count(config: Mapping[str, str]) -> int:
    """How many tasks a stored configuration runs (1 when ``tasks.max`` does not parse)."""
    try:
        count = int(config.get("tasks.max") or 1)
    except ValueError:
        return 1
    return count if 1 <= count <= limits.connector_tasks_max else 1
