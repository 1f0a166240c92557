"""Avro helpers for the wire tests: bytes as a producer with some schema writes them, and what
two decoders of the same bytes make of them."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import fastavro

from digest_stream.wire.codec import DecodeError


def write(schema: Mapping[str, Any], datum: Mapping[str, Any]) -> bytes:
    """Schemaless Avro bytes of ``datum`` under ``schema``, written by fastavro (not our codec)."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(dict(schema)), dict(datum))
    return buffer.getvalue()


def verdict(
    decode: Callable[[bytes], Any], data: bytes, fields: Callable[[Any], object]
) -> tuple[str, object]:
    """("ok", fields(value)) or ("error", reason): what a decoder makes of the bytes."""
    try:
        value = decode(data)
    except DecodeError as error:
        return "error", error.reason
    return "ok", fields(value)


def assert_agree(
    lean: Callable[[bytes], Any],
    full: Callable[[bytes], Any],
    fields: Callable[[Any], object],
    data: bytes,
) -> None:
    """A lean decoder gives the full decoder's fields, or fails with its reason."""
    assert verdict(lean, data, fields) == verdict(full, data, fields)
