"""ops/acls.py: the Kafka ACLs per role and command, merged and printed."""

from __future__ import annotations

from confluent_kafka.admin._acl import AclOperation

from digest_stream.ops.acls import (
    RUN_ROLES,
    TAIL_GROUP_PREFIX,
    Acl,
    Names,
    acls,
    kafka_acls_lines,
    needs,
    without_implied,
)

NAMES = Names(
    events="ev", schedule="sc", output="out", dlq="dlq", group="g", delivery_group="g-del"
)


def test_the_service_needs_these_and_nothing_else() -> None:
    # The list docs/operations.md shows; a change here is a change users must apply.
    assert acls(NAMES, RUN_ROLES) == [
        Acl("group", "g", "literal", ("Read",)),
        Acl("group", "g-del", "literal", ("Read",)),
        Acl("topic", "dlq", "literal", ("Write",)),
        Acl("topic", "ev", "literal", ("Read",)),
        Acl("topic", "out", "literal", ("Write",)),
        Acl("topic", "sc", "literal", ("Read", "Write")),
    ]


def test_describe_is_dropped_only_where_read_or_write_grants_it() -> None:
    assert without_implied(["Describe", "Write"]) == ("Write",)
    assert without_implied(["Describe", "Read"]) == ("Read",)
    assert without_implied(["Describe"]) == ("Describe",)
    assert acls(NAMES, ["inspect-delete-stats"]) == [Acl("topic", "ev", "literal", ("Describe",))]
    assert acls(NAMES, ["flush-cancel"]) == [Acl("topic", "ev", "literal", ("Write",))]


def test_tails_default_group_is_a_prefix_whatever_the_names() -> None:
    (group,) = [a for a in acls(NAMES, ["tail"]) if a.resource == "group"]
    assert group == Acl("group", TAIL_GROUP_PREFIX, "prefixed", ("Read",))
    (line,) = [x for x in kafka_acls_lines([group], "User:me") if "--group" in x]
    assert line.endswith(f"--group {TAIL_GROUP_PREFIX} --resource-pattern-type prefixed")


def test_every_operation_is_one_kafka_knows() -> None:
    for table in needs(NAMES).values():
        for need in table:
            assert AclOperation[need.operation.upper()]
            assert need.why


def test_the_command_prints_them_for_the_configured_names() -> None:
    from click.testing import CliRunner

    from digest_stream.cli import main

    args = ["acls", "--principal", "User:svc", "--events-topic", "my.events",
            "--group-id", "my-group"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "--allow-principal User:svc --operation Read --topic my.events\n" in result.output
    assert "--allow-principal User:svc --operation Read --group my-group\n" in result.output
    table = CliRunner().invoke(main, [*args, "--for", "tail", "--format", "table"])
    assert "digest-stream-tail-" in table.output
    assert "my.events" not in table.output  # tail needs the output topic only
