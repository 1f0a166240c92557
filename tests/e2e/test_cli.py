"""The console commands against the real stack, through click's runner (same process)."""

from __future__ import annotations

from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from digest_stream.cli import main
from tests.support import unique, wait_until
from tests.support.pipeline import PipelineFactory, cli_flags


def test_topics_create_is_idempotent(kafka_bootstrap: str, kafka_admin: AdminClient) -> None:
    base = unique("cli")
    names = [f"{base}.{suffix}" for suffix in ("events", "schedule", "output", "dlq")]
    flags = ["--kafka-bootstrap-servers", kafka_bootstrap]
    for option, name in zip(
        ("--events-topic", "--schedule-topic", "--output-topic", "--dlq-topic"), names, strict=True
    ):
        flags += [option, name]
    try:
        first = CliRunner().invoke(main, ["topics", "create", "--partitions", "3", *flags])
        assert first.exit_code == 0, first.output
        assert first.output.count("created") == 4
        meta = kafka_admin.list_topics(timeout=10).topics
        assert all(len(meta[name].partitions) == 3 for name in names)
        again = CliRunner().invoke(main, ["topics", "create", *flags])
        assert again.exit_code == 0, again.output
        assert again.output.count("exists") == 4
    finally:
        for future in kafka_admin.delete_topics(names).values():
            future.result(timeout=30)


def test_invalid_setting_stops_with_one_line_naming_it() -> None:
    result = CliRunner().invoke(main, ["run", "--minimum-delay", "-1"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "DIGEST_STREAM_MINIMUM_DELAY" in lines[0]


def test_produce_then_tail_inspect_and_stats(pipeline_factory: PipelineFactory) -> None:
    pipe = pipeline_factory(partitions=2, minimum_delay=30.0, maximum_delay=60.0)
    app = pipe.app()
    flags = cli_flags(pipe.settings)
    produced = CliRunner().invoke(
        main,
        ["produce", "--timelines", "3", "--count", "9", "--rate", "0", "--prefix", "cli", *flags],
    )
    assert produced.exit_code == 0, produced.output
    assert "sent 9 events" in produced.output

    # Each of the 3 timelines gets its immediate digest; the rest waits out the cool-down.
    tailed = CliRunner().invoke(
        main, ["tail", "--from-beginning", "--max", "3", "--duration", "60", *flags]
    )
    assert tailed.exit_code == 0, tailed.output
    rows = [line for line in tailed.output.splitlines()[1:] if line.strip()]
    assert len(rows) == 3
    assert {row.split()[1] for row in rows} == {"cli:0", "cli:1", "cli:2"}
    # Issue 20, item 13: the fields that explain a digest. An immediate digest drops nothing:
    # its total (records the digest stood for) is the records it shows.
    header = tailed.output.splitlines()[0].split()
    assert header[2:5] == ["records", "total", "dropped"]
    assert "reason" in header
    for row in rows:
        cells = row.split()
        assert cells[3] == cells[2], row
        assert cells[header.index("reason")] == "IMMEDIATE", row

    shown = sum(int(row.split()[2]) for row in rows)

    # After its digest is closed each timeline waits out the cool-down (30 s): WAITING with
    # the events that came after its first digest, cooling in no set with none.
    def inspect(timeline: str) -> str:
        result = CliRunner().invoke(main, ["inspect", timeline, *flags])
        assert result.exit_code == 0, result.output
        return result.output

    pending = waiting = 0
    for timeline in ("cli:0", "cli:1", "cli:2"):

        def closed(t: str = timeline) -> bool:
            output = inspect(t)
            return "state          waiting" in output or "state          cooling" in output

        wait_until(closed, 30, f"{timeline} waiting or cooling after its first digest")
        output = inspect(timeline)
        line = next(x for x in output.splitlines() if x.startswith("pending"))
        held = int(line.split()[1])
        # a timeline waits when something is pending, cools down when nothing is
        state = "waiting" if held else "cooling"
        assert f"state          {state}" in output, output
        pending += held
        waiting += state == "waiting"
    assert shown + pending == 9  # every produced event is in a digest or waiting for the next

    stats = CliRunner().invoke(main, ["stats", *flags])
    assert stats.exit_code == 0, stats.output
    total = stats.output.splitlines()[-1].split()
    assert total[0] == "total"
    assert int(total[1]) == waiting  # the timelines with events waiting (cooling: in no set)
    assert app.metrics.value("digest_events_ingested_total") == 9
