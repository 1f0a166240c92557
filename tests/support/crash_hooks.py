"""Hooks that park a role at a crash point, so a test can kill it right there: delivery (or
the ingest's leading edge) between publish and close, the ingest between an add that opened
digests and their produce.

Loaded into a `digest-stream run` subprocess through the real `hooks` setting (no test switch in
the service): ``pipe.process(roles="delivery", **pause_before_close_env(marker))``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from digest_stream.ops.hooks import Hook
from digest_stream.settings import Settings
from digest_stream.store.base import AddResult, NewRecord
from digest_stream.wire.models import Digest

MARKER_ENV = "DIGEST_STREAM_TEST_PAUSE_MARKER"
# Long enough for any test to kill the process; short enough that a leak ends by itself.
PARK_SECONDS = 600.0


class PauseBeforeClose(Hook):
    """Writes the acknowledged digest's id to the marker file, then blocks the delivery thread."""

    def __init__(self, marker: Path) -> None:
        self._marker = marker

    def on_publish(
        self, partition: int, digest: Digest, headers: Sequence[tuple[str, bytes]]
    ) -> None:
        self._marker.write_text(digest.id)
        time.sleep(PARK_SECONDS)


def pause_before_close(settings: Settings) -> Hook:
    """The hook factory named in the `hooks` setting."""
    return PauseBeforeClose(Path(os.environ[MARKER_ENV]))


def pause_before_close_env(marker: Path) -> dict[str, str]:
    """Environment for a service process that parks after its first acknowledged digest."""
    return {
        "DIGEST_STREAM_HOOKS": json.dumps([f"{__name__}:pause_before_close"]),
        MARKER_ENV: str(marker),
    }


class PauseAfterLeadingAdd(Hook):
    """Writes the ids of the digests an add opened (the leading edge) to the marker file, then
    blocks the ingest thread: the store call is done, their produce never happens."""

    def __init__(self, marker: Path) -> None:
        self._marker = marker

    def on_add(self, partition: int, records: Sequence[NewRecord], result: AddResult) -> None:
        if result.opened:
            self._marker.write_text(" ".join(digest.id for digest in result.opened))
            time.sleep(PARK_SECONDS)


def pause_after_leading_add(settings: Settings) -> Hook:
    """The hook factory named in the `hooks` setting."""
    return PauseAfterLeadingAdd(Path(os.environ[MARKER_ENV]))


def pause_after_leading_add_env(marker: Path) -> dict[str, str]:
    """Environment for an ingest that parks right after its first add that opened digests."""
    return {
        "DIGEST_STREAM_HOOKS": json.dumps([f"{__name__}:pause_after_leading_add"]),
        MARKER_ENV: str(marker),
    }
