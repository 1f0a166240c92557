"""Lifecycle hooks: one small plugin interface for custom behaviour around a digest's life.

Subclass `Hook`, override what you need, and register it: `App(settings, hooks=[MyHook()])`
or the `hooks` setting (`DIGEST_STREAM_HOOKS='["mypkg.hooks:factory"]'`, where the factory
is called with the Settings and returns a Hook). Hooks run on the role threads, once per
batch (never per record), so they must be quick; an exception in a hook is logged and
swallowed, it never stops the pipeline. With no hook registered the call sites cost one
truth test per batch.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from digest_stream.ops.metrics import Metrics
from digest_stream.settings import Settings
from digest_stream.store.base import AddResult, NewRecord
from digest_stream.wire.models import Digest

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]


class Hook:
    """Base class with no-op methods; override the events you care about."""

    def on_add(self, partition: int, records: Sequence[NewRecord], result: AddResult) -> None:
        """A batch of one input partition was applied to the store (after fencing)."""

    def on_ready(self, partition: int, timelines: Sequence[str], reason: str) -> None:
        """Timelines were announced on the schedule topic (IMMEDIATE, SCHEDULED, RECOVERED)."""

    def on_publish(self, partition: int, digest: Digest, headers: Headers) -> None:
        """The broker acknowledged every part of a digest (``digest`` is the whole digest)."""

    def on_close(self, partition: int, timeline: str, digest_id: str, closed: bool) -> None:
        """A digest was closed (``closed`` is False for an already closed or unknown id)."""

    def on_dead_letter(self, reason: str, detail: str, source: tuple[str, int, int]) -> None:
        """A message went to the DLQ; ``source`` is (topic, partition, offset)."""

    def on_stop(self, metrics: Metrics) -> None:
        """The roles stopped (or were given up on): ``metrics`` holds the process's final
        counts, e.g. to push them somewhere before the process exits."""


_EVENTS = ("on_add", "on_ready", "on_publish", "on_close", "on_dead_letter", "on_stop")


class Hooks:
    """The registered hooks, dispatched per event to the hooks that override it."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        self.hooks = tuple(hooks)
        # Only hooks that override an event are called for it.
        self._by_event: dict[str, tuple[Hook, ...]] = {
            name: tuple(h for h in self.hooks if getattr(type(h), name) is not getattr(Hook, name))
            for name in _EVENTS
        }
        self.wants_ready = bool(self._by_event["on_ready"])

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def _call(self, event: str, *args: Any) -> None:
        for hook in self._by_event[event]:
            try:
                getattr(hook, event)(*args)
            except Exception:
                log.exception("hook %s failed in %s (ignored)", type(hook).__name__, event)

    def on_add(self, partition: int, records: Sequence[NewRecord], result: AddResult) -> None:
        """Dispatch on_add."""
        self._call("on_add", partition, records, result)

    def on_ready(self, partition: int, timelines: Sequence[str], reason: str) -> None:
        """Dispatch on_ready."""
        self._call("on_ready", partition, timelines, reason)

    def on_publish(self, partition: int, digest: Digest, headers: Headers) -> None:
        """Dispatch on_publish."""
        self._call("on_publish", partition, digest, headers)

    def on_close(self, partition: int, timeline: str, digest_id: str, closed: bool) -> None:
        """Dispatch on_close."""
        self._call("on_close", partition, timeline, digest_id, closed)

    def on_dead_letter(self, reason: str, detail: str, source: tuple[str, int, int]) -> None:
        """Dispatch on_dead_letter."""
        self._call("on_dead_letter", reason, detail, source)

    def on_stop(self, metrics: Metrics) -> None:
        """Dispatch on_stop."""
        self._call("on_stop", metrics)


#: Shared by every component built without hooks.
NO_HOOKS = Hooks()


def load_hooks(specs: Iterable[str], settings: Settings) -> list[Hook]:
    """Import `module:attribute` factories and call each with the settings."""
    loaded = []
    for spec in specs:
        module_name, _, attribute = spec.partition(":")
        if not module_name or not attribute:
            raise ValueError(f"hook {spec!r}: expected 'module:attribute'")
        factory: Callable[[Settings], Hook] = getattr(
            importlib.import_module(module_name), attribute
        )
        hook = factory(settings)
        if not isinstance(hook, Hook):
            raise TypeError(f"hook {spec!r} returned {hook!r}, not a digest_stream.ops.hooks.Hook")
        loaded.append(hook)
    return loaded
