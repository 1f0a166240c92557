"""The secured stack's configuration, without starting it: the broker's authorizer and
listeners, the TLS-only Redis and its users, the passwords' file, the exports."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from digest_stream.dev import secure
from digest_stream.store.redis.acl import acl_rules


@pytest.fixture(autouse=True)
def stack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DIGEST_STREAM_STACK_DIR", str(tmp_path))
    return tmp_path


def test_passwords_are_made_per_stack_and_private(stack_dir: Path) -> None:
    first = secure.credentials()
    assert secure.credentials() == first  # kept while the stack lives
    path = stack_dir / "secure" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(set(first.values())) == len(first)


def test_the_broker_authorizes_everything_and_speaks_tls_only_to_clients(tmp_path: Path) -> None:
    props = dict(
        line.split("=", 1) for line in secure.kafka_properties(tmp_path).splitlines() if line
    )
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"
    assert props["advertised.listeners"].startswith("SASL_SSL://")
    assert "PLAINTEXT:" not in props["listener.security.protocol.map"].replace("SASL_", "")
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"


def test_the_service_user_gets_prefixed_acls_only() -> None:
    bindings = secure.service_acls()
    assert bindings
    assert {str(b.principal) for b in bindings} == {"User:digest-stream"}
    assert {b.name for b in bindings} == {secure.TOPIC_PREFIX, secure.GROUP_PREFIX}
    assert {b.resource_pattern_type.name for b in bindings} == {"PREFIXED"}


def test_redis_is_tls_only_with_the_readmes_user() -> None:
    lines = secure._redis_config().read_text().splitlines()
    assert "port 0" in lines
    assert "user default off" in lines
    password = secure.credentials()["redis-service"]
    readme_line = " ".join(acl_rules("d", load_library=False))
    assert f"user digest-stream on >{password} resetkeys {readme_line}" in lines
    assert "+function|load" not in readme_line


def test_the_exports_point_the_settings_at_the_secured_stack() -> None:
    lines = secure.secure_exports()
    bootstrap = f"127.0.0.1:{secure.SECURE_KAFKA_PORT}"
    assert f"export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS={bootstrap}" in lines
    joined = "\n".join(lines)
    assert '"security.protocol": "SASL_SSL"' in joined
    assert "rediss://digest-stream:" in joined
    assert "ssl_ca_certs=" in joined
    assert "export DIGEST_STREAM_REDIS_LOAD_LIBRARY=false" in lines


def test_env_without_a_secured_stack_exports_nothing_of_it() -> None:
    from click.testing import CliRunner

    from digest_stream.cli import main

    plain = CliRunner().invoke(main, ["dev", "env"])
    assert secure.SECURE_ENV not in plain.output
    refused = CliRunner().invoke(main, ["dev", "env", "--secure"])
    assert refused.exit_code == 1
    assert "dev up --secure" in refused.output
