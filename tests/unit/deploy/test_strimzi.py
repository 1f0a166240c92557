"""deploy/strimzi/kafkauser.yaml is what `digest-stream acls --format strimzi` prints for the
default names, and a KafkaUser Strimzi accepts (its schema's enums, checked here by hand)."""

from __future__ import annotations

from typing import Any

import yaml
from click.testing import CliRunner

from digest_stream.cli import main
from tests.support.deploy import DEPLOY

KAFKAUSER = DEPLOY / "strimzi" / "kafkauser.yaml"
#: Strimzi's KafkaUser CRD (v1beta2): resource types, pattern types and operations it accepts.
RESOURCE_TYPES = {"topic", "group", "cluster", "transactionalId"}
PATTERN_TYPES = {"literal", "prefix"}
OPERATIONS = {"Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
              "AlterConfigs", "DescribeConfigs", "IdempotentWrite", "All"}  # fmt: skip


def _printed(*args: str) -> str:
    result = CliRunner().invoke(main, ["acls", "--format", "strimzi", *args], env={})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_committed_user_is_what_the_command_prints() -> None:
    committed = "".join(
        line for line in KAFKAUSER.read_text().splitlines(keepends=True)
        if not line.startswith("#")
    )  # fmt: skip
    assert committed == _printed(), "regenerate deploy/strimzi/kafkauser.yaml (see its header)"


def test_the_user_fits_strimzis_schema() -> None:
    for text in (KAFKAUSER.read_text(), _printed("--for", "all")):
        user: dict[str, Any] = yaml.safe_load(text)
        assert user["apiVersion"] == "kafka.strimzi.io/v1beta2"
        assert user["kind"] == "KafkaUser"
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
        rules = user["spec"]["authorization"]["acls"]
        assert rules
        for rule in rules:
            assert rule["resource"]["type"] in RESOURCE_TYPES
            assert rule["resource"]["patternType"] in PATTERN_TYPES
            assert set(rule["operations"]) <= OPERATIONS
