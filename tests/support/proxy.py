"""A small real TCP proxy on loopback, to make a server unreachable on demand.

`TcpProxy(upstream_host, upstream_port)` listens on 127.0.0.1 (a free port) and forwards every
connection to the upstream, one thread per direction. `block()` closes every open connection
and refuses new ones (accepted, then reset at once, like a host that went away); `unblock()`
forwards again. `lose_reply_to(marker)` lets the next request holding `marker` reach the
server, then drops its reply and resets the connection (the server ran it; the client never
hears back, as after a network cut at the wrong moment). `close()` stops the listener and every
connection.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType

_CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), so the peer sees a dead connection, not a clean EOF."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    """Threaded loopback TCP proxy with an on/off switch."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._blocked = threading.Event()
        self._closed = threading.Event()
        self.accepted = 0
        self.refused = 0
        self._lose_marker: bytes | None = None
        self._doomed: set[socket.socket] = set()  # upstreams whose next reply is dropped
        self.replies_lost = 0
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """host:port clients should use."""
        return f"127.0.0.1:{self.port}"

    def block(self) -> None:
        """Drop every open connection and refuse new ones until unblock()."""
        self._blocked.set()
        with self._lock:
            victims = list(self._open)
            self._open.clear()
        for sock in victims:
            _reset(sock)

    def lose_reply_to(self, marker: bytes) -> None:
        """Forward the next request holding ``marker``, then drop its reply and reset."""
        with self._lock:
            self._lose_marker = marker

    def unblock(self) -> None:
        """Forward connections again."""
        self._blocked.clear()

    def close(self) -> None:
        """Stop listening and drop everything."""
        self._closed.set()
        self.block()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._blocked.is_set():
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                self.refused += 1
                _reset(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                if self._blocked.is_set():
                    _reset(client)
                    _reset(upstream)
                    continue
                self._open.update((client, upstream))
            self.accepted += 1
            for source, sink, request in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump,
                    args=(source, sink, request),
                    name="tcp-proxy-pump",
                    daemon=True,
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, request: bool) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                with self._lock:
                    if request and self._lose_marker is not None and self._lose_marker in data:
                        # marked before it is sent: its reply cannot come back first
                        self._lose_marker = None
                        self._doomed.add(sink)
                    elif not request and source in self._doomed:
                        self._doomed.discard(source)
                        self.replies_lost += 1
                        break  # the reply is dropped; both ends reset below
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            _reset(source)
            _reset(sink)
