"""TLS helpers the integration tests share: a test CA and a server
certificate made with openssl (conftest.py's session fixture `certs` holds
them), server settings that turn TLS on, Python ssl clients, a recorded
ClientHello, and the byte-a-round trickle of slow clients."""
from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

import pytest

import util


def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"openssl {' '.join(args)}: {r.stderr}"


class Certs:
    """A CA, a server certificate it signed (for localhost and 127.0.0.1,
    written with its chain), the server's key, and a key of another pair."""

    def __init__(self, d: Path):
        self.dir = d
        self.ca = d / "ca.pem"
        self.chain = d / "chain.pem"
        self.key = d / "server.key"
        self.other_key = d / "other.key"


def make_certs(d: Path) -> Certs:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=spindle test CA", cwd=d)
    openssl("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=d)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "other.key",
            cwd=d)
    c = Certs(d)
    c.chain.write_bytes((d / "server.pem").read_bytes() + c.ca.read_bytes())
    return c


def tls_settings(certs: Certs, **more) -> dict:
    return {"tls": "on", "tls_certificate": str(certs.chain), "tls_certificate_key": str(certs.key), **more}


def client_context(certs: Certs) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def tls_conn(port: int, ctx: ssl.SSLContext, session=None, timeout: float = 5.0) -> util.Conn:
    raw = socket.create_connection((util.HOST, port), timeout=timeout)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        s = ctx.wrap_socket(raw, server_hostname="localhost", session=session)
    except BaseException:
        raw.close()
        raise
    return util.Conn(s, timeout)


def client_hello(certs: Certs) -> bytes:
    """The first flight of a real handshake, taken from a memory-BIO client."""
    ctx = client_context(certs)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def send_to_each(socks, data: bytes, failed: list) -> None:
    """One round of a trickle: `data` to every socket not in `failed`. A
    non-blocking TLS socket that cannot take it now skips the round; one
    that fails goes into `failed` and is skipped from then on."""
    for s in socks:
        if s in failed:
            continue
        try:
            s.send(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        except OSError:
            failed.append(s)
