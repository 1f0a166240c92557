"""Re-export for tests/integration/roles/test_ingest_overlap.py, which still imports the proxy
from here; it lives in tests/support/proxy.py. Remove this file once that test imports it."""

from __future__ import annotations

from tests.support.proxy import TcpProxy

__all__ = ["TcpProxy"]
