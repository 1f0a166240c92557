"""HTTP helpers for tests of the operations server: GETs, probes, Prometheus samples."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET; connection refused is status 0."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def probe(url: str) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of /healthz or /readyz."""
    status, body = get(url)
    return status, (json.loads(body) if body else {})


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample's value from Prometheus text, or None."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def metric_sum(text: str, name: str) -> float:
    """Sum of every sample of a name (e.g. over partitions)."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )
