"""The service's closed vocabularies, each one enum from which every encoding is derived.

Below the store and the wire (both import it, it imports nothing of the package), so the
store's Lua letters, the Avro enum, the metrics' labels and the models cannot drift apart:
a new member is added here (with its letter) and everything else follows or fails a test.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class DigestReason(StrEnum):
    """Why a digest went out now (``Digest.reason``; the Avro enum of schemas/digest.avsc,
    whose symbol order is checked against this at import, wire/symbols.py)."""

    IMMEDIATE = "IMMEDIATE"
    """First event of a quiet timeline: delivered at once."""
    COOLDOWN = "COOLDOWN"
    """The timeline's cool-down ended with records waiting."""
    FLUSH_AT = "FLUSH_AT"
    """The timeline held `flush_at` pending records."""
    SCHEDULE = "SCHEDULE"
    """The timeline's calendar schedule fired."""
    FLUSHED = "FLUSHED"
    """Someone asked for it (`digest-stream flush`, `EventProducer.flush_timeline(timeline)`)."""
    RECOVERED = "RECOVERED"
    """A delivery that had not completed was announced again (maintenance, a take-over)."""
    URGENT = "URGENT"
    """An event the timeline's `urgent_when` calls urgent came: out at once, through the
    cool-down (never sooner than 1 s after the last digest)."""

    @property
    def letter(self) -> str | None:
        """The one letter a timeline's meta in Redis records for it; None: not a store
        cause (RECOVERED is the delivery's)."""
        return _CAUSE_LETTERS.get(self)


#: The store's causes (why a timeline is due) and their letters in a timeline's meta: the
#: only letters; the Lua library gets them from store.limits.CAUSES, derived from these.
_CAUSE_LETTERS: Final = {
    DigestReason.IMMEDIATE: "i",
    DigestReason.COOLDOWN: "c",
    DigestReason.FLUSH_AT: "f",
    DigestReason.SCHEDULE: "s",
    DigestReason.FLUSHED: "x",
    DigestReason.URGENT: "u",
}


class Control(StrEnum):
    """A control operation that travels with a timeline's events (``NewRecord.control``)."""

    FLUSH = "flush"
    """Deliver what is pending now."""
    CANCEL = "cancel"
    """Remove the pending record ``id``."""
    CANCEL_ALL = "cancel_all"
    """Remove every pending record (``id`` is unused)."""
