"""How a digest travels on the output topic: the ``DigestFormat`` seam, and the formats.

A format encodes a Digest into one message value, sizes it (so a digest too large for one
message is split into parts that each fit), frames the value for the wire and reads it back.
The service picks one at start (``output_format``); a new format is one module here and its
name in ``FORMATS`` (the settings' choice lists the same names).

A format may also lay a whole digest out from the stored events' own bytes, without models
(``from_stored``): Avro does (the events are stored as Avro), others answer None and the
digest goes through the models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from digest_stream.wire.formats.avro import AvroFormat
from digest_stream.wire.formats.base import DigestFormat, DigestHead, FormatName, Header
from digest_stream.wire.formats.json import JsonFormat

__all__ = ["FORMATS", "DigestFormat", "DigestHead", "FormatName", "Header", "choose"]


def choose(
    name: FormatName,
    *,
    registry_url: str | None = None,
    registry_config: Mapping[str, Any] | None = None,
    topic: str = "",
) -> DigestFormat:
    """The format ``name``, ready to publish to ``topic`` (with a registry URL the Avro
    Digest schema is registered now: a refusal stops the start, not the hot path)."""
    return FORMATS[name](registry_url, registry_config or {}, topic)


def _json(url: str | None, config: Mapping[str, Any], topic: str) -> DigestFormat:
    return JsonFormat()  # never framed: nothing to register


#: Each format's constructor by name: (registry URL, its client config, output topic).
FORMATS: dict[FormatName, Callable[[str | None, Mapping[str, Any], str], DigestFormat]] = {
    "avro": AvroFormat.for_topic,
    "json": _json,
}
