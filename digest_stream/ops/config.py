"""Configuration for operators: the effective settings with secrets masked (`config show`, the
logs), a refused setting as one line naming its env var, and the README's settings table
(`python -m digest_stream.ops.config`)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import ValidationError

from digest_stream.settings import KafkaValue, Settings, env_name
from digest_stream.store import secret_urls

MASK = "***"

#: librdkafka properties whose values are secrets (passwords, keys, tokens, JAAS configs).
#: Paths such as ssl.key.location or ssl.ca.location are not secrets and stay readable.
SECRET_KAFKA_KEY = re.compile(
    r"password|secret|token|credential|jaas|oauthbearer\.config|\.key\.pem$|^ssl\.key$", re.I
)

#: Schema Registry client properties whose values are secrets (basic.auth.user.info is
#: "user:password"; bearer tokens and client secrets).
SECRET_REGISTRY_KEY = re.compile(r"password|secret|token|credential|user\.info", re.I)


#: A password given as a query argument (a store's client may take `?password=`, as redis-py's
#: from_url does).
_QUERY_PASSWORD = re.compile(r"(?P<head>(?:^|&)password=)(?P<value>[^&]*)", re.I)


def mask_url(url: str) -> str:
    """The URL with its password (if any, also `?password=`) replaced by ***; the user stays."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    parts = parts._replace(query=_QUERY_PASSWORD.sub(rf"\g<head>{MASK}", parts.query))
    if parts.password is None:
        return urlunsplit(parts)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}{port}"))


def url_passwords(url: str) -> list[str]:
    """The passwords a URL holds: its userinfo's and any `?password=` argument's."""
    try:
        parts = urlsplit(url)
        found = [parts.password] if parts.password else []
    except ValueError:
        return []
    return found + [unquote(m["value"]) for m in _QUERY_PASSWORD.finditer(parts.query)]


def mask_kafka_config(config: Mapping[str, KafkaValue]) -> dict[str, KafkaValue]:
    """librdkafka properties with secret values masked."""
    return {k: MASK if SECRET_KAFKA_KEY.search(k) else v for k, v in config.items()}


def masked_settings(settings: Settings) -> dict[str, Any]:
    """Every setting as JSON-able values, secrets masked."""
    data = settings.model_dump(mode="json")
    for name, url in secret_urls(settings).items():
        data[name] = mask_url(url)
    data["kafka_config"] = mask_kafka_config(settings.kafka_config)
    if settings.schema_registry_url:
        data["schema_registry_url"] = mask_url(settings.schema_registry_url)
    data["schema_registry_config"] = {
        k: MASK if SECRET_REGISTRY_KEY.search(k) else v
        for k, v in settings.schema_registry_config.items()
    }
    return data


def secret_values(settings: Settings) -> list[str]:
    """The literal secrets in these settings, so the log formatter can scrub them anywhere."""
    found = [str(v) for k, v in settings.kafka_config.items() if SECRET_KAFKA_KEY.search(k) and v]
    for key, value in settings.schema_registry_config.items():
        if SECRET_REGISTRY_KEY.search(key) and isinstance(value, str) and value:
            # "user:password": the password alone is what must never show.
            found.append(value.partition(":")[2] or value if key.endswith("user.info") else value)
    for url in (*secret_urls(settings).values(), settings.schema_registry_url or ""):
        found.extend(url_passwords(url))
    # Very short values would mask unrelated text; they are still masked in `config show`.
    return [v for v in found if len(v) >= 4]


def setting_sources(settings: Settings, flags: dict[str, Any]) -> dict[str, str]:
    """Where each setting's value came from: flag, env, file or default."""
    # Every source's values reach the model as explicit ones, so model_fields_set holds the
    # settings given by a flag, the env or the TOML file: what is left of it came from the
    # file, without reading it again. Env names match case-insensitively, as when loading.
    given = settings.model_fields_set
    environ = {key.upper() for key in os.environ}
    sources = {}
    for name in Settings.model_fields:
        if flags.get(name) is not None:
            sources[name] = "flag"
        elif env_name(name) in environ:
            sources[name] = "env"
        elif name in given:
            sources[name] = "file"
        else:
            sources[name] = "default"
    return sources


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic strings
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(values: dict[str, Any], sources: dict[str, str]) -> str:
    """Settings as a TOML document (usable as --config once secrets are filled in)."""
    lines = []
    for name, value in values.items():
        note = f"  # {sources.get(name, 'default')}"
        if value is None:
            lines.append(f"# {name} is unset{note}")
        else:
            lines.append(f"{name} = {_toml_value(value)}{note}")
    return "\n".join(lines)


def describe_error(error: ValidationError) -> list[str]:
    """One clear line per invalid setting, naming its env var."""
    lines = []
    for item in error.errors():
        loc = item.get("loc") or ()
        msg = str(item.get("msg", "")).removeprefix("Value error, ")
        if loc:
            lines.append(f"invalid setting {env_name(str(loc[0]))}: {msg}")
        else:
            lines.append(f"invalid settings: {msg}")
    return lines


def settings_table() -> str:
    """The README's configuration table, generated from the model so it cannot drift."""
    rows = ["| env var | default | description |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        value = field.get_default(call_default_factory=True)
        default = "" if value is None else f"`{value}`"
        rows.append(f"| `{env_name(name)}` | {default} | {field.description or ''} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_table())
