"""The operations HTTP server: /metrics (Prometheus text), /healthz and /readyz (JSON)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from digest_stream.ops.threads import name_os_thread

log = logging.getLogger(__name__)

_NOT_FOUND = b"not found: try /metrics, /healthz or /readyz\n"

Probe = Callable[[], tuple[bool, dict[str, Any]]]


class OpsServer:
    """A small threaded HTTP server on its own daemon thread."""

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, live: Probe, ready: Probe
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
            "/healthz": lambda: _probe(live),
            "/readyz": lambda: _probe(ready),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, kind, body = (
                        404,
                        "text/plain",
                        _NOT_FOUND,
                    )
                else:
                    try:
                        status, kind, body = route()
                    except Exception as exc:
                        log.exception("%s failed", self.path)
                        status, kind, body = 500, "text/plain", f"{exc}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # probes every second would drown the service's own logs

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._serve, name="digest-ops-http", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._httpd.server_address[1])

    def _serve(self) -> None:
        name_os_thread()
        self._httpd.serve_forever()

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread.start()
        log.info("metrics and health on http://%s:%d/metrics /healthz /readyz",
                 self._httpd.server_address[0], self.port)  # fmt: skip

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()


def _probe(check: Probe) -> tuple[int, str, bytes]:
    ok, details = check()
    body = json.dumps(details, sort_keys=True).encode() + b"\n"
    return (200 if ok else 503), "application/json", body
