"""A TLS-only Redis of a test's own: a CA, server and client certificates made by openssl.

The secured stack (digest-stream dev up --secure) has one TLS Redis; these tests also need one
that demands a client certificate (mTLS), and one whose port they know is TLS-only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.support import free_port, wait_until


@dataclass(frozen=True)
class Certificates:
    """PEM files: the CA, and a certificate with its key for the server and for a client."""

    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(folder: Path) -> Certificates:
    """A fresh CA and, signed by it, a server (127.0.0.1) and a client certificate."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed for the TLS tests (apt-get install openssl)")
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=test CA", "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    ext = folder / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        key, request = folder / f"{name}.key", folder / f"{name}.csr"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", str(key), "-out", str(request))  # fmt: skip
        _openssl("x509", "-req", "-in", str(folder / f"{name}.csr"), "-days", "2",
                 "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
                 "-extfile", str(ext), "-out", str(folder / f"{name}.pem"))  # fmt: skip
    return Certificates(ca, folder / "server.pem", folder / "server.key",
                        folder / "client.pem", folder / "client.key")  # fmt: skip


@contextmanager
def tls_redis(certs: Certificates, folder: Path, *, client_certificates: bool) -> Iterator[int]:
    """A TLS-only redis-server on a free port (its port), stopped by pid afterwards."""
    port = free_port()
    command = [
        shutil.which("redis-server") or "redis-server",
        "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", str(certs.server), "--tls-key-file", str(certs.server_key),
        "--tls-ca-cert-file", str(certs.ca),
        "--tls-auth-clients", "yes" if client_certificates else "no",
        "--save", "", "--appendonly", "no", "--dir", str(folder),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(
        port=port, ssl=True, ssl_ca_certs=str(certs.ca), ssl_certfile=str(certs.client),
        ssl_keyfile=str(certs.client_key), socket_connect_timeout=1,
    )  # fmt: skip

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    try:
        wait_until(answers, 20, f"TLS redis-server on port {port}")
        client.close()
        yield port
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(10)
