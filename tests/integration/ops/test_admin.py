"""Admin commands: `delete TIMELINE` and `replay --partition P --from OFFSET`, with prompts."""

from __future__ import annotations

from click.testing import CliRunner

from digest_stream.cli import main
from digest_stream.store import NewRecord, connect
from tests.support import unique, wait_until
from tests.support.pipeline import PipelineFactory, settings_env


def test_delete_asks_first_unless_yes(pipeline_factory: PipelineFactory) -> None:
    pipe = pipeline_factory(partitions=2)
    store = connect(pipe.settings)
    timeline = unique("mail:p")
    store.add(1, [NewRecord(timeline, "r1", 1.0, b"x", offset=0)], 10.0)
    env = settings_env(pipe.settings)
    runner = CliRunner()

    refused = runner.invoke(main, ["delete", timeline], input="n\n", env=env)
    assert refused.exit_code == 1  # click's Abort
    assert f"timeline {timeline}: partition 1, ready, 1 pending records" in refused.output
    assert store.inspect(1, timeline).state == "ready"

    agreed = runner.invoke(main, ["delete", timeline], input="y\n", env=env)
    assert agreed.exit_code == 0, agreed.output
    assert store.inspect(1, timeline).state == "absent"

    store.add(1, [NewRecord(timeline, "r2", 1.0, b"x", offset=1)], 10.0)
    quiet = runner.invoke(main, ["delete", timeline, "--yes", "--partition", "1"], env=env)
    assert quiet.exit_code == 0, quiet.output
    assert "Delete timeline" not in quiet.output
    assert store.inspect(1, timeline).state == "absent"
    absent = runner.invoke(main, ["delete", timeline, "--yes"], env=env)
    assert "has no state" in absent.output


def test_replay_resets_fence_and_offset_and_refuses_an_active_group(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1)
    env = settings_env(pipe.settings)
    runner = CliRunner()
    app = pipe.app(roles="ingest,scheduler")
    with pipe.producer() as producer:
        for n in range(5):
            producer.send(unique("t"), f"e{n}", b"{}")
        producer.flush()
    wait_until(lambda: app.metrics.value("digest_events_ingested_total") == 5, 30, "5 ingested")

    busy = runner.invoke(main, ["replay", "--partition", "0", "--from", "2", "--yes"], env=env)
    assert busy.exit_code == 1
    assert f"consumer group {pipe.settings.group_id} is active" in busy.output
    assert "stop every ingest instance first" in busy.output

    app.stop()
    assert app.wait()
    store = connect(pipe.settings)
    assert store.applied_offset(0) == 4
    assert pipe.committed(0) == 5

    no = runner.invoke(main, ["replay", "--partition", "0", "--from", "2"], input="n\n", env=env)
    assert no.exit_code == 1
    assert "store fence      4 -> 1" in no.output
    assert "committed offset 5 -> 2" in no.output
    assert store.applied_offset(0) == 4  # nothing changed

    out_of_range = runner.invoke(
        main, ["replay", "--partition", "0", "--from", "99", "--yes"], env=env
    )
    assert out_of_range.exit_code == 1
    assert "outside what" in out_of_range.output

    yes = runner.invoke(main, ["replay", "--partition", "0", "--from", "2"], input="y\n", env=env)
    assert yes.exit_code == 0, yes.output
    assert store.applied_offset(0) == 1
    assert pipe.committed(0) == 2

    # The next start applies offsets 2..4 again.
    again = pipe.app(roles="ingest,scheduler")
    wait_until(lambda: again.metrics.value("digest_events_ingested_total") == 3, 30, "3 re-applied")
    wait_until(lambda: store.applied_offset(0) == 4, 30, "the fence is back at 4")
