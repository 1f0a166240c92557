"""Configuration: flags > env > TOML file > defaults, `config show` masked, prefix overrides."""

from __future__ import annotations

import json
import tomllib
import uuid
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer

from digest_stream.cli import main
from digest_stream.kafka import consumer_config, producer_config
from digest_stream.ops.config import mask_url, masked_settings, secret_values
from digest_stream.settings import CONFIG_ENV, Settings
from digest_stream.store import DigestStore, MemoryStore, NewRecord, connect
from digest_stream.store.redis import RedisStore


def _show(args: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    result = CliRunner().invoke(main, ["config", "show", "--json", *args], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert isinstance(data, dict)
    return data


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DIGEST_STREAM_* from the test environment leaks into these checks."""
    import os

    for name in list(os.environ):
        if name.startswith("DIGEST_STREAM_"):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
def test_precedence_flags_over_env_over_file_over_defaults(tmp_path: Path) -> None:
    config = tmp_path / "ds.toml"
    config.write_text(
        "minimum_delay = 11\nincrement_delay = 12\nmaximum_delay = 13\nnamespace = 'fromfile'\n"
    )
    env = {"DIGEST_STREAM_INCREMENT_DELAY": "22", "DIGEST_STREAM_MAXIMUM_DELAY": "23"}
    data = _show(["--config", str(config), "--maximum-delay", "33"], env)
    assert data["minimum_delay"] == 11  # file
    assert data["increment_delay"] == 22  # env beats file
    assert data["maximum_delay"] == 33  # flag beats env
    assert data["namespace"] == "fromfile"
    assert data["ttl"] == 7 * 24 * 3600  # default
    # DIGEST_STREAM_CONFIG names the file when --config is absent.
    assert _show([], {CONFIG_ENV: str(config)})["namespace"] == "fromfile"


@pytest.mark.usefixtures("clean_env")
def test_config_show_toml_names_sources_and_parses(tmp_path: Path) -> None:
    config = tmp_path / "ds.toml"
    config.write_text('capacity = 5\n[overrides."mail:p:*"]\nminimum_delay = 60\n')
    result = CliRunner().invoke(
        main, ["config", "show", "--config", str(config), "--batch-size", "7"],
        env={"DIGEST_STREAM_TTL": "4000"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "capacity = 5  # file" in result.output
    assert "batch_size = 7  # flag" in result.output
    assert "ttl = 4000.0  # env" in result.output
    assert 'namespace = "d"  # default' in result.output
    parsed = tomllib.loads(result.output)  # the output is a usable config file
    assert parsed["overrides"] == {"mail:p:*": {"minimum_delay": 60.0}}


@pytest.mark.usefixtures("clean_env")
def test_config_show_masks_secrets(tmp_path: Path) -> None:
    config = tmp_path / "ds.toml"
    config.write_text(
        'redis_url = "rediss://svc:r3dis-pass@redis.example:6380/0"\n'
        "[kafka_config]\n"
        '"security.protocol" = "SASL_SSL"\n"sasl.mechanism" = "SCRAM-SHA-512"\n'
        '"sasl.username" = "svc"\n"sasl.password" = "k4fka-pass"\n'
        '"ssl.key.password" = "key-pass"\n"ssl.ca.location" = "/etc/ca.pem"\n'
    )
    for args in (["config", "show"], ["config", "show", "--json"]):
        result = CliRunner().invoke(main, [*args, "--config", str(config)])
        assert result.exit_code == 0, result.output
        for secret in ("r3dis-pass", "k4fka-pass", "key-pass"):
            assert secret not in result.output
        assert "svc:***@redis.example:6380" in result.output
        assert "/etc/ca.pem" in result.output
        assert "SCRAM-SHA-512" in result.output


def test_mask_url_keeps_everything_but_the_password() -> None:
    assert mask_url("redis://u:p@h:1/0") == "redis://u:***@h:1/0"
    assert mask_url("rediss://:p@h/0") == "rediss://:***@h/0"
    assert mask_url("redis://h:1/0") == "redis://h:1/0"
    assert mask_url("redis://u:p@[::1]:6379") == "redis://u:***@[::1]:6379"
    masked = masked_settings(Settings(kafka_config={"sasl.oauthbearer.config": "x=y"}))
    assert masked["kafka_config"] == {"sasl.oauthbearer.config": "***"}


def test_a_password_in_the_url_query_is_masked_too() -> None:
    # redis-py takes `?password=` as the password (from_url passes query arguments on).
    url = "rediss://svc@h:6380/0?password=qu3ry-pass&ssl_ca_certs=/etc/ca.pem"
    assert mask_url(url) == "rediss://svc@h:6380/0?password=***&ssl_ca_certs=/etc/ca.pem"
    assert mask_url("redis://u:p@h/0?password=q") == "redis://u:***@h/0?password=***"
    assert "qu3ry-pass" in secret_values(Settings(redis_url=url))


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("minimum_dely = 3\n", "unknown settings minimum_dely"),
        ("minimum_delay = \n", "config file"),
        ("capacity = 0\n", "DIGEST_STREAM_CAPACITY"),
        ('[overrides."mail"]\ncapacity = 3\n', "must be a timeline prefix ending in '*'"),
        ('[overrides."m:*"]\nmaximum_delay = 700000\n', "must exceed maximum_delay"),
        ('[overrides."m:*"]\ncapacty = 3\n', "DIGEST_STREAM_OVERRIDES"),
    ],
)
def test_bad_config_stops_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(content)
    result = CliRunner().invoke(main, ["config", "show", "--config", str(config)])
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("command", [["config", "show"], ["run"]])
@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"DIGEST_STREAM_MINIMUM_DELAY": "5000"},
            "DIGEST_STREAM_MINIMUM_DELAY (5000.0) must not exceed "
            "DIGEST_STREAM_MAXIMUM_DELAY (1800.0)",
        ),
        (
            {"DIGEST_STREAM_OVERRIDES": '{"mail:*": {"minimum_delay": 5000}}'},
            "DIGEST_STREAM_OVERRIDES 'mail:*': minimum_delay (5000.0) must not exceed "
            "maximum_delay (1800.0)",
        ),
    ],
)
def test_a_cool_down_longer_than_the_maximum_delay_stops_with_one_line(
    command: list[str], env: dict[str, str], words: str
) -> None:
    # Issue 36 (f): the rule is the policy's own; the settings still name what to change.
    result = CliRunner().invoke(main, command, env=env)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"digest-stream: invalid settings: {words}"]


@pytest.mark.usefixtures("clean_env")
def test_json_settings_work_as_flags() -> None:
    data = _show(["--kafka-config", '{"client.id": "x"}', "--carry-headers", '["traceparent"]'])
    assert data["kafka_config"] == {"client.id": "x"}
    assert data["carry_headers"] == ["traceparent"]


@pytest.mark.usefixtures("clean_env")
def test_kafka_config_takes_numbers_and_booleans_like_confluent_kafka(tmp_path: Path) -> None:
    # Issue 20, item 12: `{"...ms": 5000}` stopped the service with "Input should be a
    # valid string"; confluent-kafka takes ints, floats and bools.
    given = {"topic.metadata.refresh.interval.ms": 5000, "enable.idempotence": True,
             "queue.buffering.max.ms": 2.5, "client.id": "x"}  # fmt: skip
    data = _show([], {"DIGEST_STREAM_KAFKA_CONFIG": json.dumps(given)})
    assert data["kafka_config"] == given
    config = tmp_path / "ds.toml"
    config.write_text(
        '[kafka_config]\n"topic.metadata.refresh.interval.ms" = 5000\n'
        '"enable.idempotence" = true\n"queue.buffering.max.ms" = 2.5\n"client.id" = "x"\n'
    )
    assert _show(["--config", str(config)])["kafka_config"] == given
    shown = CliRunner().invoke(main, ["config", "show", "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    assert tomllib.loads(shown.output)["kafka_config"] == given  # written back as TOML
    # librdkafka accepts every client built from them.
    settings = Settings(kafka_config=given)
    Producer(producer_config(settings))
    Consumer(consumer_config(settings, "g")).close()


@pytest.mark.usefixtures("clean_env")
def test_the_partitioner_is_one_setting_not_a_kafka_config_property() -> None:
    assert _show([])["partitioner"] == "murmur2_random"
    assert _show(["--partitioner", "consistent_random"])["partitioner"] == "consistent_random"
    for args in (
        ["--kafka-config", '{"partitioner": "consistent_random"}'],
        ["--partitioner", "random"],  # places keyed messages anywhere: controls could not follow
    ):
        result = CliRunner().invoke(main, ["config", "show", *args])
        assert result.exit_code == 2, result.output
        assert "DIGEST_STREAM_" in result.output


def test_prefix_overrides_pick_the_longest_prefix() -> None:
    settings = Settings(
        capacity=100,
        overrides={"mail:*": {"capacity": 5}, "mail:p:*": {"minimum_delay": 7, "capacity": 2}},
    )
    resolve = settings.resolver()
    assert resolve("mail:p:1").capacity == 2
    assert resolve("mail:p:1").minimum_delay == 7
    assert resolve("mail:x").capacity == 5
    assert resolve("mail:x").minimum_delay == 300  # unset fields keep the default
    assert resolve("sms:1").capacity == 100


def _fill(store: DigestStore, timelines: list[str]) -> None:
    records = [
        NewRecord(t, f"r{n}", 1.0 + n, b"x", offset=i * 10 + n)
        for i, t in enumerate(timelines)
        for n in range(6)
    ]
    store.add(0, records, 1000.0)


def test_overrides_reach_the_memory_store() -> None:
    settings = Settings(overrides={"mail:p:*": {"capacity": 2}})
    store = MemoryStore(policy=settings.policy(), resolver=settings.resolver())
    _fill(store, ["mail:p:1", "mail:q:1"])
    assert store.inspect(0, "mail:p:1").pending == 2
    assert store.inspect(0, "mail:q:1").pending == 6


def test_overrides_reach_the_redis_store(redis_url: str, namespace: str) -> None:
    settings = Settings(
        redis_url=redis_url,
        namespace=namespace,
        minimum_delay=100,
        overrides={"mail:p:*": {"capacity": 2, "minimum_delay": 5}},
    )
    store = connect(settings)
    _fill(store, ["mail:p:1", "mail:q:1"])
    assert store.inspect(0, "mail:p:1").pending == 2
    assert store.inspect(0, "mail:q:1").pending == 6
    for timeline, delay in (("mail:p:1", 5), ("mail:q:1", 100)):
        digest = store.open(0, timeline, uuid.uuid4().hex, 1000.0)
        store.close(0, timeline, digest.id, 1000.0)
        assert store.inspect(0, timeline).due == 1000.0 + delay
    assert isinstance(store, RedisStore)
    assert isinstance(store.client, redis.Redis)
    store.disconnect()
