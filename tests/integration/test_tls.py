"""HTTPS under every model: a CA and certificates made at test time
with openssl, curl and Python's ssl as clients; keep-alive, pipelining, Range
and a multi-MiB file over TLS; clients that leave mid-handshake, send garbage
or dawdle through it; session resumption across processes; a bad certificate
or key at start-up and on reload."""
from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

import util
from conftest import A_TXT, BIG_SIZE, RANGE_DATA
from tlsutil import Certs, client_context, client_hello, send_to_each, tls_conn, tls_settings

HOST = util.HOST


@pytest.fixture
def tls_server(servers, certs):
    return servers(**tls_settings(certs, metrics="on"))


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "--max-time", str(util.scaled(10)), *args], capture_output=True,
                          timeout=util.scaled(20))


# ---------------------------------------------------------------------------

def test_curl_tls13_and_tls12(model, tls_server, certs):
    """curl verifies the chain against the test CA and negotiates h2 by ALPN
    (http/1.1 when it offers only that); TLS 1.2 gets an ECDHE suite; TLS 1.1
    is refused."""
    url = f"https://localhost:{tls_server.port}/a.txt"
    pin = ["--cacert", str(certs.ca), "--resolve", f"localhost:{tls_server.port}:{HOST}"]
    r = curl(*pin, "-v", url)
    assert r.returncode == 0, r.stderr
    assert r.stdout == A_TXT
    err = r.stderr.decode()
    assert "TLSv1.3" in err and "ALPN: server accepted h2" in err, err
    r = curl(*pin, "-v", "--http1.1", url)
    assert r.returncode == 0 and r.stdout == A_TXT, r.stderr
    assert "ALPN: server accepted http/1.1" in r.stderr.decode(), r.stderr
    r = curl(*pin, "-v", "--tls-max", "1.2", url)
    assert r.returncode == 0 and r.stdout == A_TXT, r.stderr
    assert re.search(r"TLSv1\.2 / ECDHE-", r.stderr.decode()), r.stderr
    r = curl(*pin, "--tlsv1.0", "--tls-max", "1.1", "--ciphers", "DEFAULT@SECLEVEL=0", url)
    assert r.returncode != 0, "TLS 1.1 was accepted"
    # and the server still serves
    assert curl(*pin, url).stdout == A_TXT


def test_keepalive_and_pipelining(model, tls_server, certs):
    """Three requests in one TLS write, answered in order; the connection then
    serves another, and the plaintext core never sees a record."""
    with tls_conn(tls_server.port, client_context(certs)) as c:
        assert c.sock.selected_alpn_protocol() == "http/1.1"
        c.send(b"".join(util.build_request("GET", t) for t in ("/a.txt", "/range.txt", "/sub/page.txt")))
        bodies = [c.read_response("GET").body for _ in range(3)]
        assert bodies == [A_TXT, RANGE_DATA, b"a page in sub\n"]
        c.send(util.build_request("GET", "/a.txt"))
        r = c.read_response("GET")
        assert r.status == 200 and r.body == A_TXT


def test_range_and_big_file(model, tls_server, certs, docroot):
    """A file body (5 MiB: the sendfile path on plain TCP) and ranges of it
    arrive byte-exact through the layer's pread + encrypt path."""
    big = (docroot.path / "big.bin").read_bytes()
    assert len(big) == BIG_SIZE
    with tls_conn(tls_server.port, client_context(certs), timeout=util.scaled(20)) as c:
        c.send(util.build_request("GET", "/big.bin"))
        r = c.read_response("GET")
        assert r.status == 200 and len(r.body) == BIG_SIZE
        assert hashlib.sha256(r.body).digest() == hashlib.sha256(big).digest()
        c.send(util.build_request("GET", "/big.bin", {"Range": "bytes=1000000-3999999"}))
        r = c.read_response("GET")
        assert r.status == 206 and r.body == big[1000000:4000000]
        c.send(util.build_request("GET", "/range.txt", {"Range": "bytes=-10"}))
        r = c.read_response("GET")
        assert r.status == 206 and r.body == RANGE_DATA[-10:]


def test_hsts_over_tls_only(model, servers, certs):
    """hsts = VALUE adds Strict-Transport-Security to HTTPS responses, errors
    included; a plain-HTTP instance with the same setting sends none (RFC
    6797 7.2)."""
    srv = servers(**tls_settings(certs, hsts="max-age=63072000"))
    with tls_conn(srv.port, client_context(certs)) as c:
        for target in ("/a.txt", "/missing"):
            c.send(util.build_request("GET", target))
            r = c.read_response("GET")
            assert r.header("Strict-Transport-Security") == "max-age=63072000", r
    plain = servers(hsts="max-age=63072000")
    r = plain.get("/a.txt")
    assert r.status == 200 and not r.has("Strict-Transport-Security"), r


def test_redirect_https(model, servers):
    """redirect_https = on: a plain port answers 301 to the same target on
    the HTTPS port, for the host the client named; a Host that cannot go
    into a Location header gets a 400."""
    srv = servers(redirect_https="on", redirect_https_port="8443")
    r = srv.get("/sub/page.txt?x=1&y=%20", headers={"Host": "example.com:8080"}, host=None)
    assert r.status == 301
    assert r.header("Location") == "https://example.com:8443/sub/page.txt?x=1&y=%20"
    r = srv.get("/", headers={"Host": "[::1]:80"}, host=None)
    assert r.status == 301 and r.header("Location") == "https://[::1]:8443/"
    r = srv.get("/", headers={"Host": "a\"b"}, host=None)
    assert r.status == 400


def test_bad_clients_do_not_hurt(model, tls_server, certs):
    """Clients that leave mid-handshake (a half ClientHello, then EOF; a whole
    one, then a reset, also one so quick that the server's reply meets it), and some that send garbage instead of a ClientHello
    (closed, with an alert where OpenSSL has one to say): each counts as a
    failed handshake, and the server goes on serving."""
    port = tls_server.port
    before = util.stat_json(port)["tls"]["handshake_failures"]
    hello = client_hello(certs)
    with util.Conn.open(port) as c:
        c.send(hello[: len(hello) // 2])
    for pause in (0.05, 0):  # after the server's reply, or (likely) before it is written
        with util.Conn.open(port) as c:
            c.send(hello)
            time.sleep(pause)
            c.reset()
    # plain HTTP (OpenSSL answers it with no alert), a malformed handshake
    # record (answered with a fatal alert), zeros
    for garbage, alert in ((b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", False),
                           (b"\x16\x03\x01\x00\x20\x01" + b"\xff" * 31, True), (b"\x00" * 64, False)):
        with util.Conn.open(port) as c:
            c.send(garbage)
            c.sock.settimeout(util.scaled(5))
            got = b""
            while data := c.sock.recv(4096):  # until the server closes
                got += data
        assert b"HTTP/" not in got
        if alert:
            assert got[:1] == b"\x15", f"expected a TLS alert record, got {got[:20]!r}"
    with tls_conn(port, client_context(certs)) as c:
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response("GET").body == A_TXT
    # five for sure; the quickest reset may be gone before accept() returns it
    s = util.wait_stats(port, lambda s: s["tls"]["handshake_failures"] >= before + 5, util.scaled(5))
    assert s["tls"]["handshake_failures"] >= before + 5, s["tls"]


def test_connect_and_close_is_not_a_failed_handshake(model, tls_server, certs):
    """A TCP health check or a port scan connects and closes without a byte:
    no handshake was tried, so none failed (the counter would otherwise grow
    with every check a load balancer makes)."""
    port = tls_server.port
    before = util.stat_json(port)
    for _ in range(5):
        socket.create_connection((util.HOST, port)).close()
    with tls_conn(port, client_context(certs)) as c:
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response("GET").body == A_TXT
    want = before["connections_accepted"] + 6
    s = util.wait_stats(port, lambda s: s["connections_accepted"] >= want and s["connections_active"] == 0,
                        util.scaled(5))
    assert s["connections_accepted"] >= want, s
    assert s["tls"]["handshake_failures"] == before["tls"]["handshake_failures"], s["tls"]


def test_slow_handshake_cut_by_header_timeout(model, servers, certs):
    """A client that sends half a ClientHello and waits is closed once
    header_timeout passes, like a slow request head."""
    srv = servers(**tls_settings(certs, header_timeout="1s"))
    hello = client_hello(certs)
    with util.Conn.open(srv.port, timeout=util.scaled(10)) as c:
        c.send(hello[:40])
        t0 = time.monotonic()
        with pytest.raises((util.ConnectionClosed, ConnectionResetError)):
            if c.sock.recv(4096) == b"":
                raise util.ConnectionClosed("closed")
        waited = time.monotonic() - t0
    assert 0.8 <= waited <= util.scaled(4), f"closed after {waited:.2f}s with header_timeout = 1s"
    with tls_conn(srv.port, client_context(certs)) as c:
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response("GET").body == A_TXT


def _fresh_https_waits(port: int, ctx: ssl.SSLContext, count: int = 5) -> list[float]:
    """`count` HTTPS requests, each on a new connection (handshake included):
    their durations in seconds."""
    waits = []
    for _ in range(count):
        t0 = time.monotonic()
        with tls_conn(port, ctx, timeout=util.scaled(5)) as c:
            c.send(util.build_request("GET", "/a.txt", [("Connection", "close")]))
            assert c.read_response("GET").body == A_TXT
        waits.append(time.monotonic() - t0)
        time.sleep(0.2)
    return waits


SLOW_HANDSHAKES = 50


# Whether a fresh client waits is the subject of the next two (`timing`):
# under ASan they run under epoll only. The TLS wire's partial
# records, both ways, are one module whichever model drives it (the same
# module under epoll here, and fuzz_tls's random splits); each model's
# reads and writes over TLS run there in the keep-alive, pipelining, big
# file and Expect tests above and below, and its handshake left half-way in
# test_slow_handshake_cut_by_header_timeout.
@pytest.mark.concurrent
@pytest.mark.timing
def test_slow_handshakes_do_not_delay_a_fresh_client(model, fresh_server, certs):
    """50 clients trickling a ClientHello a byte at a time (TLS's slowloris)
    beside a fresh HTTPS client: with default threads the fresh one is
    answered within 1 s. A worker may hold a connection only while it has
    bytes to process, in the handshake as in the request head."""
    srv = fresh_server(**tls_settings(certs))
    hello = client_hello(certs)
    crowd = [util.Conn.open(srv.port, timeout=util.scaled(5)) for _ in range(SLOW_HANDSHAKES)]
    stop = threading.Event()
    closed = []

    def trickle():  # one byte per client per 0.3 s, bounded by the ClientHello and by stop
        for i in range(len(hello) - 1):  # never the last byte: the handshake never completes
            send_to_each(crowd, hello[i:i + 1], closed)
            if stop.wait(0.3):
                return
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        time.sleep(1.0)  # every slow client has begun its handshake
        waits = _fresh_https_waits(srv.port, client_context(certs))
        assert not closed, f"{len(closed)} slow handshakes were cut within seconds (header_timeout is 10 s)"
    finally:
        stop.set()
        t.join(timeout=5)
        for c in crowd:
            c.close()
    assert max(waits) < util.scaled(1.0), \
        f"a fresh HTTPS request beside {SLOW_HANDSHAKES} slow handshakes took {max(waits):.2f}s: {waits}"


SLOW_TLS_CLIENTS = 40  # of each kind: more than pool's and prefork's default threads


@pytest.mark.concurrent
@pytest.mark.timing
def test_slow_tls_readers_and_writers_do_not_delay_a_fresh_client(model, fresh_server, certs):
    """After the handshake: slow readers (a 5 MiB download read one TLS record
    per half second through a small receive buffer, so the server's writes
    block mid-record) and slow writers (a request head sent a byte per record
    per half second). A fresh HTTPS client is answered within 1 s: the
    worker is given back whenever TLS must wait for the socket, either way."""
    srv = fresh_server(**tls_settings(certs))
    ctx = client_context(certs)
    readers, writers = [], []
    head = util.build_request("GET", "/a.txt")
    try:
        for _ in range(SLOW_TLS_CLIENTS):
            raw = socket.create_connection((HOST, srv.port), timeout=util.scaled(5))
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c = ctx.wrap_socket(raw, server_hostname="localhost")
            c.sendall(util.build_request("GET", "/big.bin"))
            c.setblocking(False)
            readers.append(c)
            w = tls_conn(srv.port, ctx, timeout=util.scaled(5))
            w.sock.setblocking(False)
            writers.append(w.sock)
        stop = threading.Event()
        got = [0] * len(readers)
        dropped = []

        def trickle():  # bounded: the head's length in rounds, or stop
            for i in range(len(head) - 1):  # never the last byte
                for k, r in enumerate(readers):
                    try:
                        got[k] += len(r.recv(16384))
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                        pass
                    except OSError:
                        dropped.append(r)
                send_to_each(writers, head[i:i + 1], dropped)
                if stop.wait(0.5):
                    return
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            time.sleep(1.5)  # every reader has response bytes, every writer sent some
            waits = _fresh_https_waits(srv.port, ctx)
        finally:
            stop.set()
            t.join(timeout=10)
        assert not dropped, f"{len(dropped)} slow TLS clients were dropped before header_timeout"
        assert all(got) and max(got) < BIG_SIZE, f"the slow readers' downloads: {got}"
    finally:
        for c in readers + writers:
            c.close()
    assert max(waits) < util.scaled(1.0), \
        f"a fresh HTTPS request beside slow TLS readers and writers took {max(waits):.2f}s: {waits}"


def test_expect_100_continue_over_tls(model, tls_server, certs):
    """Expect: 100-continue over TLS: the 100 arrives before the body is sent,
    and a request that will be refused gets its final status at once (RFC
    9110 10.1.1), as over plain TCP."""
    ctx = client_context(certs)
    with tls_conn(tls_server.port, ctx) as c:
        c.send(util.build_request("GET", "/a.txt", [("Content-Length", "5"), ("Expect", "100-continue")]))
        interim = c.read_response(timeout=util.scaled(3))
        assert interim.status == 100, interim
        c.send(b"hello" + util.build_request("GET", "/a.txt"))
        assert c.read_response("GET").body == A_TXT
        assert c.read_response("GET").body == A_TXT
    with tls_conn(tls_server.port, ctx) as c:
        c.send(util.build_request("DELETE", "/a.txt", [("Content-Length", "5"), ("Expect", "100-continue")]))
        r = c.read_response(timeout=util.scaled(3))
        assert r.status == 405 and r.header("Connection") == "close", r
    with tls_conn(tls_server.port, ctx) as c:
        c.send(util.build_request("GET", "/a.txt", [("Content-Length", "5"), ("Expect", "fast-please")]))
        r = c.read_response(timeout=util.scaled(3))
        assert r.status == 417, r


def _resumed_count(port: int, ctx: ssl.SSLContext, n: int) -> tuple[int, int]:
    """A full handshake, then n fresh connections offering its session:
    (resumed, tried)."""
    with tls_conn(port, ctx) as c:
        c.send(util.build_request("GET", "/a.txt"))
        c.read_response("GET")  # a TLS 1.3 ticket arrives after the handshake
        session = c.sock.session
    assert session is not None and session.has_ticket
    resumed = 0
    for _ in range(n):
        with tls_conn(port, ctx, session=session) as c:
            c.send(util.build_request("GET", "/a.txt"))
            assert c.read_response("GET").body == A_TXT
            resumed += c.sock.session_reused
    return resumed, n


def test_resumption(model, tls_server, certs):
    """Tickets resume on every connection, whichever thread or process of the
    generation takes it; the statistics count the resumed handshakes."""
    before = util.stat_json(tls_server.port)["tls"]
    resumed, tried = _resumed_count(tls_server.port, client_context(certs), 6)
    assert resumed == tried
    def counted(s):
        return (s["tls"]["resumed"] >= before["resumed"] + tried
                and s["tls"]["handshakes"] >= before["handshakes"] + tried + 1)

    s = util.wait_stats(tls_server.port, counted, util.scaled(5))
    assert counted(s), (before, s["tls"])
    with tls_conn(tls_server.port, client_context(certs)) as c:  # and /metrics says so
        c.send(util.build_request("GET", "/metrics"))
        text = c.read_response("GET").body.decode()
    m = re.search(r"^spindle_tls_resumed_total (\d+)$", text, re.M)
    assert m and int(m.group(1)) >= before["resumed"] + tried, text[-2000:]
    assert re.search(r"^spindle_tls_handshake_failures_total \d+$", text, re.M)


@contextlib.contextmanager
def own_server(model: str, root: Path, workdir: Path, settings: dict):
    """A dedicated server for a test that picks its models itself; it must
    stop cleanly."""
    srv = util.Server(model, root, workdir, settings).start()
    try:
        yield srv
    finally:
        rc = srv.stop() if srv.alive() else srv.proc.returncode
        srv.kill()
    assert rc == 0, f"exit status {rc}\n{srv.diagnostics()}"


@pytest.mark.parametrize("proc_model", ["prefork", "fork"])
def test_resumption_across_processes(proc_model, certs, docroot, tmp_path):
    """prefork with two worker processes (a connection lands on either) and
    fork (every connection is a process of its own): a ticket from one
    process resumes in another, since the master drew the generation's
    ticket secret before forking. Also with TLS 1.2 (RFC 5077 tickets)."""
    with own_server(proc_model, docroot.path, tmp_path / "srv", tls_settings(certs, workers=2, threads=2)) as srv:
        ctx12 = client_context(certs)
        ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
        for ctx in (client_context(certs), ctx12):
            resumed, tried = _resumed_count(srv.port, ctx, 8)
            assert resumed == tried, f"{resumed} of {tried} resumed ({ctx.maximum_version})"
        if proc_model == "prefork":
            workers = util.proc_children(util.serving_pids(srv.proc.pid)[0])
            assert len(workers) == 2, workers


def _bad_pair(certs: Certs, tmp_path: Path, what: str) -> tuple[str, str, str]:
    """(certificate, key, the file a message must name) for one kind of fault."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    cert, key = str(certs.chain), str(certs.key)
    if what == "mismatched key":
        key = str(certs.other_key)
    elif what == "missing key":
        key = str(tmp_path / "nonexistent.key")
    else:
        cert = str(garbage)
    return cert, key, key if what != "garbage certificate" else cert


@pytest.mark.parametrize("what", ["mismatched key", "missing key", "garbage certificate"])
def test_bad_certificate_or_key_stops_startup(certs, tmp_path, docroot, what):
    """Start-up fails with a message naming the file at fault."""
    cert, key, named = _bad_pair(certs, tmp_path, what)
    srv = util.Server("epoll", docroot.path, tmp_path / "srv",
                      {"tls": "on", "tls_certificate": cert, "tls_certificate_key": key})
    with pytest.raises(util.ServerError):
        srv.start(ready_timeout=util.scaled(5))
    srv.kill()
    if srv in util.LIVE_SERVERS:
        util.LIVE_SERVERS.remove(srv)
    text = srv.diagnostics()
    assert srv.proc.returncode not in (0, None), text
    assert named in text, f"the message does not name {named}:\n{text}"


@pytest.mark.parametrize("what", ["mismatched key", "missing key", "garbage certificate"])
def test_check_refuses_what_start_and_reload_refuse(certs, tmp_path, docroot, what):
    """--check (systemd's ExecReload runs it before the SIGHUP) loads the
    certificate and key as a start would: a pair the reload would refuse
    fails the check, naming the file; a good pair passes, shown as https."""
    def check(cert: str, key: str):
        return util.run_spindle("--root", str(docroot.path), "--port", "8443", "--check", "--set", "tls=on",
                                "--set", f"tls_certificate={cert}", "--set", f"tls_certificate_key={key}")
    cert, key, named = _bad_pair(certs, tmp_path, what)
    r = check(cert, key)
    assert r.returncode == 2 and named in r.stderr, (r.returncode, r.stderr)
    r = check(str(certs.chain), str(certs.key))
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)
    assert "https://127.0.0.1:8443/" in r.stdout, r.stdout


@pytest.mark.parametrize("proc_model", ["epoll", "prefork"])
def test_bad_certificate_on_reload_keeps_the_old_one(proc_model, certs, docroot, tmp_path):
    """A reload that finds the certificate file broken is refused, naming the
    file, and HTTPS keeps working with the certificate loaded before."""
    chain = tmp_path / "chain.pem"
    shutil.copy(certs.chain, chain)
    settings = {"tls": "on", "tls_certificate": str(chain), "tls_certificate_key": str(certs.key)}
    with own_server(proc_model, docroot.path, tmp_path / "srv", settings) as srv:
        chain.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
        srv.signal(signal.SIGHUP)

        def refused():
            return "still serving with the old one" in srv.error_log.read_text(errors="replace")

        assert util.wait_for(refused, util.scaled(5)), srv.diagnostics()
        log = srv.error_log.read_text(errors="replace")
        assert str(chain) in log, log
        with tls_conn(srv.port, client_context(certs)) as c:
            c.send(util.build_request("GET", "/a.txt"))
            assert c.read_response("GET").body == A_TXT


def test_plain_and_https_side_by_side(model, certs, docroot, tmp_path):
    """listen lines with the tls flag: one instance serves plain
    HTTP on one address and HTTPS on another TCP port and a UNIX socket; the
    wire is chosen by the listener a connection came in on, and two loops
    (epoll, uring) each take their share of both. hsts is sent over HTTPS
    here too (with `listen` lines, `tls` itself stays off)."""
    from test_listen import ListenServer

    other = util.free_port()
    sock = tmp_path / "tls.sock"
    srv = ListenServer(model, docroot.path, tmp_path / "srv", [f"127.0.0.1:{other} tls", f"unix:{sock} tls"],
                       settings={"workers": 2, "tls_certificate": str(certs.chain),
                                 "tls_certificate_key": str(certs.key), "hsts": "max-age=600"})
    srv.start()
    try:
        for _ in range(3):
            assert srv.get("/a.txt").body == A_TXT  # plain on the harness's port
            with tls_conn(other, client_context(certs)) as c:
                c.send(util.build_request("GET", "/a.txt"))
                r = c.read_response("GET")
                assert r.body == A_TXT and r.header("Strict-Transport-Security") == "max-age=600", r
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.settimeout(5)
            raw.connect(str(sock))
            with util.Conn(client_context(certs).wrap_socket(raw, server_hostname="localhost"), 5) as c:
                c.send(util.build_request("GET", "/a.txt"))
                assert c.read_response("GET").body == A_TXT
        # plain bytes on the TLS port are a failed handshake, not a request
        with util.Conn.open(other) as c:
            c.send(util.build_request("GET", "/a.txt"))
            c.sock.settimeout(util.scaled(5))
            assert b"HTTP/" not in c.sock.recv(4096)
    finally:
        rc = srv.stop()
    assert rc == 0, srv.diagnostics()


def test_redirect_https_is_allowed_beside_a_tls_address(certs, docroot):
    """redirect_https moves only requests that came over plain HTTP, so an
    instance may have it and a TLS address (test_sites.py follows the
    redirect across both)."""
    r = util.run_spindle("--root", str(docroot.path), "--check", "--set", "redirect_https=on",
                         "--set", f"listen=127.0.0.1:{util.free_port()} tls",
                         "--set", f"tls_certificate={certs.chain}", "--set", f"tls_certificate_key={certs.key}")
    assert r.returncode == 0, (r.returncode, r.stderr)


def _plain_ok(port: int) -> bool:
    with util.Conn.open(port, timeout=5) as c:
        c.send(util.build_request("GET", "/a.txt", headers={"Connection": "close"}))
        return c.read_response(timeout=5).body == A_TXT


def _tls_ok(port: int, certs: Certs) -> bool:
    c = tls_conn(port, client_context(certs))
    try:
        c.send(util.build_request("GET", "/a.txt", headers={"Connection": "close"}))
        return c.read_response(timeout=5).body == A_TXT
    finally:
        c.close()


@pytest.mark.parametrize("model", ["epoll", "prefork"])
def test_reload_turns_tls_on_and_off_on_an_address_that_stays(model, certs, docroot, tmp_path):
    """`tls` added to (or taken from) a listen line whose address stays: the
    socket stays, and the new generation must speak what the new line says
    (it kept the first line's choice: plain HTTP where the operator asked
    for HTTPS, without a word)."""
    from supervision import ConfigServer, wait_log
    q = util.free_port()
    conf = tmp_path / "spindle.conf"
    srv = ConfigServer(conf, docroot.path, tmp_path / "srv")

    def write(tls: str) -> None:
        conf.write_text(f"[server]\nmodel = {model}\nlisten = 127.0.0.1:{srv.port}\nlisten = 127.0.0.1:{q}{tls}\n"
                        f"[tls]\ntls_certificate = {certs.chain}\ntls_certificate_key = {certs.key}\n")

    argv = srv.argv
    srv.argv = lambda: (write(""), argv())[1]
    srv.start()
    try:
        assert _plain_ok(q)
        for n, tls in ((2, " tls"), (3, "")):
            write(tls)
            srv.signal(signal.SIGHUP)
            assert wait_log(srv, rf"generation {n - 1} \(pid \d+\) finished", 15), srv.diagnostics()
            assert (_tls_ok(q, certs) if tls else _plain_ok(q)), f"reload {n}: {tls or 'plain'} expected"
            assert _plain_ok(srv.port)
    finally:
        assert srv.stop() == 0, srv.diagnostics()


def test_socket_activation_with_a_tls_listen_line(certs, docroot, tmp_path):
    """A `listen ... tls` line naming an inherited socket serves HTTPS on it
    (the inherited socket's address was used as it came, without the line's
    options: plain HTTP on the HTTPS port)."""
    from test_listen import start_activated, stop_activated, wait_started
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind((HOST, 0))
    tcp.listen(16)
    port = tcp.getsockname()[1]
    work = tmp_path / "srv"
    proc = start_activated([tcp], docroot.path, work, "--set", f"listen=127.0.0.1:{port} tls",
                           "--set", f"tls_certificate={certs.chain}", "--set", f"tls_certificate_key={certs.key}")
    try:
        wait_started(work)
        assert _tls_ok(port, certs)
    finally:
        stop_activated(proc, work)
        tcp.close()
# -- kernel TLS (TX) ---------------------------------------------------------

def _kernel_has_tls() -> bool:
    ulp = Path("/proc/sys/net/ipv4/tcp_available_ulp")
    return ulp.exists() and "tls" in ulp.read_text().split()


def test_kernel_tls_detection_logged(model, tls_server):
    """Start-up says whether file bodies go through kernel TLS + sendfile or
    are read and encrypted in user space, as the kernel's ULP list has it."""
    want = "kernel TLS is available" if _kernel_has_tls() else "no kernel TLS ('tls' not in tcp_available_ulp)"
    assert util.wait_for(lambda: want in tls_server.error_log.read_text(errors="replace"), util.scaled(5)), \
        tls_server.error_log.read_text(errors="replace")


def test_kernel_tls_attempt_and_fallback(model, fresh_server, certs, docroot, monkeypatch):
    """SPINDLE_KTLS=try makes every TLS 1.3 connection attempt the switch
    (secret from the key log, records counted, keys derived, TCP_ULP +
    TLS_TX). Where the kernel refuses it, the log names the sequence number
    the kernel would have started at (1: the NewSessionTicket went out under
    the application keys) and the connection goes on in user space: a
    sendfile-sized body and a keep-alive request after it arrive intact.
    Where the kernel accepts, the same bytes come through kernel TLS."""
    monkeypatch.setenv("SPINDLE_KTLS", "try")
    srv = fresh_server(**tls_settings(certs, log_level="debug"))
    ctx = client_context(certs)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    big = (docroot.path / "big.bin").read_bytes()
    with tls_conn(srv.port, ctx, timeout=util.scaled(20)) as c:
        c.send(util.build_request("GET", "/big.bin"))
        r = c.read_response("GET")
        assert r.status == 200 and hashlib.sha256(r.body).digest() == hashlib.sha256(big).digest()
        c.send(util.build_request("GET", "/a.txt"))
        r = c.read_response("GET")
        assert r.status == 200 and r.body == A_TXT
    outcome = "on" if _kernel_has_tls() else r"refused \([^)]+\)"
    rx = re.compile(rf"kernel TLS {outcome} for TLS 1\.3 TX from record 1\b")
    assert util.wait_for(lambda: rx.search(srv.error_log.read_text(errors="replace")), util.scaled(5)), \
        srv.error_log.read_text(errors="replace")


def _tls_fault(certs: Certs, tmp_path: Path, what: str) -> tuple[str, str, str]:
    """(certificate, key, words the message must hold after the file's name)."""
    cert, key = str(certs.chain), str(certs.key)
    der = tmp_path / "chain.der"
    subprocess.run(["openssl", "x509", "-in", cert, "-outform", "der", "-out", str(der)], check=True)
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", key, "-aes256", "-passout", "pass:secret", "-out", str(encrypted)],
                   check=True)
    return {
        "certificate missing": (str(tmp_path / "none.pem"), key,
                                f"tls_certificate '{tmp_path / 'none.pem'}': cannot read it: No such file"),
        "certificate not PEM": (str(der), key, f"tls_certificate '{der}': not a PEM file"),
        "certificate holds none": (key, key, f"tls_certificate '{key}': holds no certificate (only: PRIVATE KEY)"),
        "certificate does not decode": (str(broken), key, f"tls_certificate '{broken}': its certificate does not decode"),
        "key not PEM": (cert, str(der), f"tls_certificate_key '{der}': not a PEM file"),
        "key holds none": (cert, cert, f"tls_certificate_key '{cert}': holds no private key (only: CERTIFICATE)"),
        "key encrypted": (cert, str(encrypted), f"tls_certificate_key '{encrypted}': the key is encrypted"),
        "key of another certificate": (cert, str(certs.other_key),
                                       f"tls_certificate_key '{certs.other_key}' is not the key of tls_certificate"),
    }[what]


@pytest.mark.parametrize("what", ["certificate missing", "certificate not PEM", "certificate holds none",
                                  "certificate does not decode", "key not PEM", "key holds none", "key encrypted",
                                  "key of another certificate"])
def test_tls_file_errors_say_what_is_wrong_in_words(certs, tmp_path, docroot, what):
    """Each fault of the certificate or key is named with its file, in words
    (not OpenSSL's 'PEM lib'), at start and under --check alike."""
    cert, key, words = _tls_fault(certs, tmp_path, what)
    args = ["--root", str(docroot.path), "--port", str(util.free_port()), "--set", "tls=on",
            "--set", f"tls_certificate={cert}", "--set", f"tls_certificate_key={key}"]
    r = util.run_spindle(*args, "--check", timeout=15)
    assert r.returncode == 2 and words in r.stderr, (r.returncode, r.stderr)
    assert "PEM lib" not in r.stderr.split("(OpenSSL:")[0], r.stderr


# -- what idle connections cost ------------------------------------------------

# Under a sanitizer build the figures are not judged (see _sanitized): a
# fifth of the clients drive the same release and regrowth paths there.
CLIENT_SHARE = 5 if util.sanitized() else 1
IDLE_CONNS = 250 // CLIENT_SHARE    # TLS keep-alive clients, each idle after one request (twice)
HALF_OPEN = 120 // CLIENT_SHARE     # handshakes whose client sends its ClientHello, then nothing (twice)
# KiB of proportional set size (PSS) per connection. OpenSSL 3.0's own state
# is about 14 KiB per idle session and 45 KiB per handshake waiting for the
# client's Finished (most of it a 21 KiB message buffer OpenSSL frees only when
# the handshake ends); the bounds leave room for the core's state and the
# allocator, not for the wire's 16 KiB input buffer or OpenSSL's 17 KiB record
# buffers kept while the client is silent.
IDLE_KIB_MAX = 30
HALF_OPEN_KIB_MAX = 51


def _pss_kib(srv: util.Server) -> int:
    total = 0
    for pid in util.instance_processes(srv):
        with contextlib.suppress(OSError):
            for ln in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if ln.startswith("Pss:"):
                    total += int(ln.split()[1])
    return total


def _sanitized() -> bool:
    """An ASan/TSan build: its allocator's redzones and quarantine make
    memory figures meaningless (the connections are still exercised)."""
    data = util.spindle_bin().read_bytes()
    return b"__asan_init" in data or b"__tsan_init" in data


class _StalledHandshake:
    """A TLS client over memory BIOs on a raw socket: it sends its ClientHello
    and stops, leaving the server's flight unread, until request() completes
    the handshake and asks for `target` with Connection: close."""

    def __init__(self, port: int, ctx: ssl.SSLContext):
        self.sock = socket.create_connection((HOST, port), timeout=util.scaled(10))
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname="localhost")
        with pytest.raises(ssl.SSLWantReadError):
            self.obj.do_handshake()
        self.sock.sendall(self.out.read())
        assert self.sock.recv(1, socket.MSG_PEEK) == b"\x16"  # the server's flight is on its way

    def _until_done(self, op):
        for _ in range(1000):
            try:
                return op()
            except ssl.SSLWantReadError:
                self.sock.sendall(self.out.read())
                data = self.sock.recv(65536)
                if not data:
                    raise util.ConnectionClosed("closed mid-handshake or mid-response")
                self.inc.write(data)
        raise AssertionError("no progress")

    def request(self, target: str) -> bytes:
        self._until_done(self.obj.do_handshake)
        self.obj.write(util.build_request("GET", target, {"Connection": "close"}))
        self.sock.sendall(self.out.read())
        got = b""
        with contextlib.suppress(ssl.SSLZeroReturnError, ssl.SSLEOFError, util.ConnectionClosed):
            while data := self._until_done(lambda: self.obj.read(65536)):  # b"": close_notify
                got += data
        return got

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("idle_model", ["epoll", "uring", "pool"])
def test_idle_tls_connections_hold_little_memory(idle_model, certs, docroot, tmp_path):
    """TLS keep-alive clients idle after one request each, and handshakes
    stalled after the ClientHello, add at most IDLE_KIB_MAX and
    HALF_OPEN_KIB_MAX KiB of PSS each to the instance (the wire kept its
    input buffer, its records and the memory BIOs' largest buffers, and
    OpenSSL its read buffer through a handshake, for as long as a client was
    silent; uring released nothing). Each figure is the growth from a second
    batch: what the first one freed after its last response (the buffers of
    the connections that had not waited a scan interval yet) is already in
    the baseline. Then every idle client sends its next request, one of them
    for a file body that grows the buffers again, and gets the right
    answers: what was released comes back. Three of the stalled handshakes
    then complete and get an answer too."""
    settings = tls_settings(certs, workers=1, threads=4, keepalive_timeout="60s", header_timeout="60s",
                            max_connections=2 * (IDLE_CONNS + HALF_OPEN) + 20)
    ctx = client_context(certs)
    hello = client_hello(certs)
    settle = 1.0  # five 200 ms scan intervals without I/O
    idle, half = [], []

    def open_idle() -> None:
        for _ in range(IDLE_CONNS):
            c = tls_conn(srv.port, ctx, timeout=util.scaled(10))
            idle.append(c)
            c.send(util.build_request("GET", "/a.txt"))
            assert c.read_response("GET").body == A_TXT
        time.sleep(settle)

    def open_half() -> None:
        for _ in range(HALF_OPEN - (3 if not half else 0)):
            c = util.Conn.open(srv.port, timeout=util.scaled(10))
            half.append(c)
            c.send(hello)
            assert c.sock.recv(1)[:1] == b"\x16"  # the server's flight is on its way
        if len(half) < HALF_OPEN:
            half.extend(_StalledHandshake(srv.port, ctx) for _ in range(3))
        time.sleep(settle)

    with own_server(idle_model, docroot.path, tmp_path / "srv", settings) as srv:
        try:
            for _ in range(20):  # lazily initialised state and the heap's first growth
                with tls_conn(srv.port, ctx) as c:
                    c.send(util.build_request("GET", "/a.txt"))
                    assert c.read_response("GET").body == A_TXT
            pss = []
            for step in (open_idle, open_idle, open_half, open_half):
                step()
                pss.append(_pss_kib(srv))
            idle_kib = (pss[1] - pss[0]) / IDLE_CONNS
            half_kib = (pss[3] - pss[2]) / HALF_OPEN
            print(f"{idle_model}: {idle_kib:.1f} KiB per idle TLS connection, {half_kib:.1f} KiB per stalled "
                  f"handshake (PSS after each batch: {pss} KiB)")
            if not _sanitized():
                assert idle_kib <= IDLE_KIB_MAX, f"{idle_kib:.1f} KiB per idle TLS connection"
                assert half_kib <= HALF_OPEN_KIB_MAX, f"{half_kib:.1f} KiB per stalled handshake"
            big = (docroot.path / "big.bin").read_bytes()
            for i, c in enumerate(idle):
                if i == IDLE_CONNS // 2:
                    c.send(util.build_request("GET", "/big.bin", {"Range": "bytes=0-199999"}))
                    r = c.read_response("GET")
                    assert r.status == 206 and r.body == big[:200000], r
                c.send(util.build_request("GET", "/range.txt"))
                r = c.read_response("GET")
                assert r.status == 200 and r.body == RANGE_DATA, r
            for c in half:
                if isinstance(c, _StalledHandshake):
                    got = c.request("/range.txt")
                    assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(RANGE_DATA), got[:200]
        finally:
            for c in idle + half:
                c.close()
