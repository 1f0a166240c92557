"""Settings: env names, validation with one clear line per problem, README table in sync."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from digest_stream.ops.config import describe_error, settings_table
from digest_stream.settings import MAX_BATCH_SIZE, Settings, env_name
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.policy import OPTIONS, PolicyOverride, TimelinePolicy
from tests.support import REPO_ROOT

ROOT = REPO_ROOT


def test_defaults_follow_the_contract() -> None:
    s = Settings()
    p = s.policy()
    assert (p.minimum_delay, p.increment_delay, p.maximum_delay, p.ttl) == (300, 30, 1800, 604800)
    assert p.capacity == 10_000  # bounded by default (docs/store.md)
    assert s.namespace == "d"
    topics = (s.events_topic, s.schedule_topic, s.output_topic, s.dlq_topic)
    assert topics == ("digests.events", "digests.schedule", "digests.output", "digests.dlq")


def test_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGEST_STREAM_MINIMUM_DELAY", "2.5")
    monkeypatch.setenv("DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS", "h:1")
    s = Settings()
    assert s.policy().minimum_delay == 2.5
    assert s.kafka_bootstrap_servers == "h:1"


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"ttl": 100, "maximum_delay": 200}, "DIGEST_STREAM_TTL"),
        ({"minimum_delay": -1}, "DIGEST_STREAM_MINIMUM_DELAY"),
        ({"capacity": 0}, "DIGEST_STREAM_CAPACITY"),
        ({"on_state_loss": "ignore"}, "DIGEST_STREAM_ON_STATE_LOSS"),
        # records must outlive maximum_delay + the time maintenance takes to re-announce
        ({"ttl": 2000, "maintenance_timeout": 300, "maintenance_interval": 30}, "TTL"),
        ({"ttl": 2131, "overrides": {"a:*": {"ttl": 2130}}}, "DIGEST_STREAM_OVERRIDES 'a:*'"),
        ({"minimum_delay": 60, "maximum_delay": 50, "ttl": 500}, "DIGEST_STREAM_MINIMUM_DELAY"),
        ({"urgent_when": "severity"}, "DIGEST_STREAM_URGENT_WHEN"),
    ],
)
def test_invalid_settings_name_the_setting(overrides: dict[str, object], setting: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings.model_validate(overrides)
    lines = describe_error(info.value)
    assert len(lines) == 1
    assert setting in lines[0]
    if "ttl" in overrides:
        assert "DIGEST_STREAM_MAXIMUM_DELAY" in lines[0]
    if "maintenance_timeout" in overrides or "overrides" in overrides:
        for name in ("TTL", "MAINTENANCE_TIMEOUT", "MAINTENANCE_INTERVAL"):
            assert f"DIGEST_STREAM_{name}" in lines[0]


def test_an_override_of_urgent_when_is_checked_in_one_line() -> None:
    with pytest.raises(ValidationError) as info:
        Settings.model_validate({"overrides": {"a:*": {"urgent_when": "sev="}}})
    (line,) = describe_error(info.value)
    assert "DIGEST_STREAM_OVERRIDES 'a:*'" in line
    assert "urgent_when must be ATTRIBUTE=VALUE" in line


def test_batch_size_has_an_upper_bound() -> None:
    """Issue 36, item c: a batch has no size the store was not tested with (MAX_BATCH_SIZE);
    above it the service refuses to start, with one line naming the setting and the bound."""
    assert Settings(batch_size=MAX_BATCH_SIZE).batch_size == MAX_BATCH_SIZE
    with pytest.raises(ValidationError) as info:
        Settings.model_validate({"batch_size": MAX_BATCH_SIZE + 1})
    (line,) = describe_error(info.value)
    assert "DIGEST_STREAM_BATCH_SIZE" in line
    assert f"{MAX_BATCH_SIZE}" in line


@pytest.mark.parametrize(
    ("values", "line"),
    [
        (
            {"minimum_delay": 5000, "maximum_delay": 1800},
            "DIGEST_STREAM_MINIMUM_DELAY (5000.0) must not exceed "
            "DIGEST_STREAM_MAXIMUM_DELAY (1800.0)",
        ),
        (
            {"overrides": {"mail:*": {"maximum_delay": 100}}},
            "DIGEST_STREAM_OVERRIDES 'mail:*': minimum_delay (300.0) must not exceed "
            "maximum_delay (100.0)",
        ),
    ],
)
def test_settings_refuse_a_cool_down_longer_than_the_maximum_delay(
    values: dict[str, object], line: str
) -> None:
    # Issue 36 (f): the rule is TimelinePolicy's; the settings word it in their own names.
    with pytest.raises(ValidationError) as info:
        Settings.model_validate(values)
    assert describe_error(info.value) == [f"invalid settings: {line}"]


def test_each_policy_option_is_a_setting_with_its_default_and_bounds() -> None:
    # the settings' policy fields are TimelinePolicy's options, declared there once
    for spec in OPTIONS:
        field = Settings.model_fields[spec.name]
        assert field.get_default() == spec.default
        assert field.description == spec.doc
        assert field.annotation == spec.type
        assert PolicyOverride.model_fields[spec.name].get_default() is None
    assert Settings().policy() == TimelinePolicy()


def test_an_option_out_of_bounds_is_refused_alike_by_setting_override_and_policy() -> None:
    for spec in OPTIONS:
        bounds = spec.kind.bounds
        if "ge" not in bounds and "gt" not in bounds:
            continue
        bad = bounds.get("ge", bounds.get("gt")) - 1
        with pytest.raises(ValidationError) as info:
            Settings.model_validate({spec.name: bad})
        assert env_name(spec.name) in describe_error(info.value)[0]
        with pytest.raises(ValidationError):
            PolicyOverride(**{spec.name: bad})
        with pytest.raises(InvalidArgument, match=spec.name):
            TimelinePolicy(**{spec.name: bad})


def test_ttl_just_above_the_recovery_bound_is_accepted() -> None:
    settings = Settings(ttl=2131, maintenance_timeout=300, maintenance_interval=30)
    assert settings.policy().ttl > settings.policy().maximum_delay + 300 + 30


def test_readme_settings_table_is_generated_from_the_model() -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(
        r"<!-- settings-table:start -->\n(.*?)\n<!-- settings-table:end -->", readme, re.S
    )
    assert match, "README.md lacks the settings-table markers"
    assert match.group(1).strip() == settings_table().strip(), (
        "README settings table is stale: regenerate with `python -m digest_stream.ops.config`"
    )


def test_metrics_server_binds_loopback_unless_told_and_the_image_tells_it() -> None:
    # The probes and /metrics answer whoever reaches the port: loopback unless an operator
    # opens it; the container image opens it on purpose (its probes come from outside).
    assert Settings().metrics_host == "127.0.0.1"
    dockerfile = (ROOT / "Dockerfile").read_text("utf-8")
    assert "ENV DIGEST_STREAM_METRICS_HOST=0.0.0.0" in dockerfile.splitlines()


def test_an_event_size_that_could_never_be_published_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="DIGEST_STREAM_MAX_EVENT_BYTES"):
        Settings(max_message_bytes=100_000, max_event_bytes=90_000)
    assert Settings(max_message_bytes=100_000, max_event_bytes=80_000).max_event_bytes == 80_000


def test_redis_tls_files_reach_both_clients_and_need_rediss() -> None:
    # Issue 28, item 5: the CA of a rediss:// server, and a client certificate for mTLS.
    from digest_stream.ops.config import masked_settings
    from digest_stream.store.redis.client import redis_options

    for cluster in (False, True):
        settings = Settings(
            redis_url="rediss://h:6380/0", redis_cluster=cluster, redis_ssl_ca_certs="/ca.pem",
            redis_ssl_certfile="/c.pem", redis_ssl_keyfile="/c.key",
        )  # fmt: skip
        options = redis_options(settings)
        assert options["ssl_ca_certs"] == "/ca.pem"
        assert options["ssl_certfile"] == "/c.pem"
        assert options["ssl_keyfile"] == "/c.key"
    assert "ssl_ca_certs" not in redis_options(Settings(redis_url="rediss://h:6380/0"))
    shown = masked_settings(settings)  # config show: paths, not secrets
    assert (shown["redis_ssl_ca_certs"], shown["redis_ssl_keyfile"]) == ("/ca.pem", "/c.key")
    with pytest.raises(ValidationError) as refused:
        Settings(redis_url="redis://h:6379/0", redis_ssl_ca_certs="/ca.pem")
    assert describe_error(refused.value) == [
        "invalid settings: DIGEST_STREAM_REDIS_SSL_CA_CERTS set, but DIGEST_STREAM_REDIS_URL "
        "is not rediss://: use rediss:// to connect with TLS"
    ]
    with pytest.raises(ValidationError, match="DIGEST_STREAM_REDIS_SSL_KEYFILE needs"):
        Settings(redis_url="rediss://h:6380/0", redis_ssl_keyfile="/c.key")


def test_one_store_setting_chooses_the_backend() -> None:
    # Issue 38: the backend is a setting (only redis today), refused by name when unknown.
    from digest_stream.store import backend_of

    assert Settings().store == "redis"
    assert backend_of(Settings()).label == "Redis"
    with pytest.raises(ValidationError) as refused:
        Settings(store="cassandra")
    assert describe_error(refused.value) == [
        "invalid setting DIGEST_STREAM_STORE: unknown store 'cassandra': one of redis"
    ]


def test_the_redis_section_keeps_the_variables_users_set(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 38: the section moved into store/redis/, its env vars (and TOML keys) did not.
    values = {
        "DIGEST_STREAM_REDIS_URL": "rediss://u:pw@h:6380/0",
        "DIGEST_STREAM_REDIS_CLUSTER": "true",
        "DIGEST_STREAM_REDIS_SSL_CA_CERTS": "/ca.pem",
        "DIGEST_STREAM_REDIS_SSL_CERTFILE": "/c.pem",
        "DIGEST_STREAM_REDIS_SSL_KEYFILE": "/c.key",
        "DIGEST_STREAM_REDIS_LOAD_LIBRARY": "false",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    assert (s.redis_url, s.redis_cluster, s.redis_load_library) == (
        "rediss://u:pw@h:6380/0",
        True,
        False,
    )
    assert (s.redis_ssl_ca_certs, s.redis_ssl_certfile, s.redis_ssl_keyfile) == (
        "/ca.pem",
        "/c.pem",
        "/c.key",
    )
    assert {env_name(name) for name in Settings.model_fields} >= set(values)


def test_settings_refuse_a_ttl_that_quiet_hours_could_outwait() -> None:
    with pytest.raises(ValidationError, match="the longest window of DIGEST_STREAM_QUIET_HOURS"):
        Settings(quiet_hours="22:00-21:00", ttl=20 * 3600)
    with pytest.raises(ValidationError, match="DIGEST_STREAM_QUIET_HOURS '22:00' must be"):
        Settings(quiet_hours="22:00")
    with pytest.raises(ValidationError, match=r"DIGEST_STREAM_OVERRIDES 'n:\*'.*quiet_hours"):
        Settings(overrides={"n:*": {"quiet_hours": "7:00-8:00"}})
    Settings(quiet_hours="22:00-07:00", overrides={"n:*": {"quiet_hours": "23:00-06:00"}})
