"""Every known label value is exported from the start, so a first event shows as an increase."""

from __future__ import annotations

from prometheus_client import generate_latest

from digest_stream.ops.metrics import DEAD_LETTER_REASONS, DROP_REASONS, REPLAY_CAUSES, Metrics


def test_known_label_values_start_at_zero() -> None:
    text = generate_latest(Metrics().registry).decode()
    for reason in DEAD_LETTER_REASONS:
        assert f'digest_dead_letters_total{{reason="{reason}"}} 0.0' in text
    for reason in DROP_REASONS:
        assert f'digest_events_dropped_total{{reason="{reason}"}} 0.0' in text
    for cause in REPLAY_CAUSES:
        assert f'digest_replays_total{{cause="{cause}"}} 0.0' in text
    assert 'digest_rebalances_total{kind="lost",role="delivery"} 0.0' in text
