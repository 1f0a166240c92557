"""Every known label value is exported from the start, so a first event shows as an increase;
observe_many gives the series observe gives."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from digest_stream.ops.metrics import (
    DEAD_LETTER_REASONS,
    DROP_REASONS,
    REPLAY_CAUSES,
    Metrics,
    observe_many,
)


def test_known_label_values_start_at_zero() -> None:
    text = generate_latest(Metrics().registry).decode()
    for reason in DEAD_LETTER_REASONS:
        assert f'digest_dead_letters_total{{reason="{reason}"}} 0.0' in text
    for reason in DROP_REASONS:
        assert f'digest_events_dropped_total{{reason="{reason}"}} 0.0' in text
    for cause in REPLAY_CAUSES:
        assert f'digest_replays_total{{cause="{cause}"}} 0.0' in text
    assert 'digest_rebalances_total{kind="lost",role="delivery"} 0.0' in text


@pytest.mark.parametrize(
    "amounts",
    [[], [1], [0, 1, 2, 3, 7, 250, 1000, 10_000, 10_001, 1e9], [0.5] * 7 + [3.0, -1.0]],
)
def test_observe_many_gives_the_series_observe_gives_once_per_amount(amounts: list[float]) -> None:
    one_by_one, batched = Metrics(), Metrics()
    for amount in amounts:
        one_by_one.records_per_digest.observe(amount)
    observe_many(batched.records_per_digest, amounts)

    def samples(metrics: Metrics) -> list[tuple[str, dict[str, str], float]]:
        return [
            (s.name, s.labels, s.value)
            for family in metrics.registry.collect()
            if family.name == "digest_records_per_digest"
            for s in family.samples
            if not s.name.endswith("_created")
        ]

    assert samples(batched) == samples(one_by_one)
    assert samples(batched)  # the family is there to compare
