"""Start-up variants, graceful shutdown on SIGTERM, SIGPIPE robustness."""
from __future__ import annotations

import hashlib
import signal
import socket
import time

import pytest

import util
from conftest import A_TXT, HUGE_SIZE


def test_starts_with_workers_and_threads_flags(model, docroot, tmp_path):
    srv = util.Server(model, docroot.path, tmp_path, extra_args=["--workers", "2", "--threads", "2"])
    srv.start()
    try:
        for _ in range(5):
            assert srv.get("/a.txt").body == A_TXT
    finally:
        rc = srv.stop()
    assert rc == 0, srv.diagnostics()


def test_sigterm_idle_server_exits_zero_quickly(fresh_server):
    srv = fresh_server()
    assert srv.get("/a.txt").body == A_TXT
    t0 = time.monotonic()
    rc = srv.stop(timeout=10)
    assert rc == 0, srv.diagnostics()
    assert time.monotonic() - t0 < 3, "an idle server took over 3 s to stop"


def _refused(port: int) -> bool:
    """True if a new connection is refused (or reset) rather than accepted or
    left hanging."""
    try:
        with socket.create_connection((util.HOST, port), timeout=0.5) as s:
            # Accepted by the kernel; a server that stopped listening resets
            # it, one that still listens would answer.
            s.sendall(util.build_request("GET", "/a.txt"))
            s.settimeout(0.5)
            try:
                data = s.recv(100)
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
            return data == b""
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    except TimeoutError:  # SYN not answered: neither served nor refused
        return False


def test_graceful_shutdown_completes_inflight_download(fresh_server, huge_docroot):
    srv = fresh_server(root=huge_docroot.path)
    digest = hashlib.sha256((huge_docroot.path / "huge.bin").read_bytes()).hexdigest()
    with srv.connect(timeout=30, rcvbuf=16384) as c:
        c.send(util.build_request("GET", "/huge.bin"))
        head_deadline = time.monotonic() + 5
        head = c.read_head(head_deadline)
        assert head.startswith(b"HTTP/1.1 200 "), head
        # read slowly for a while: the download is well under way, far from done
        got = bytearray(c.buf)
        c.buf = b""
        for _ in range(20):
            got += c.sock.recv(16384)
            time.sleep(0.01)
        assert len(got) < HUGE_SIZE // 2
        srv.signal(signal.SIGTERM)
        # new connections are refused while the old one drains
        assert util.wait_for(lambda: _refused(srv.port), 3), \
            "new connections still accepted after SIGTERM"
        assert srv.alive(), "server exited before finishing the in-flight download"
        c.sock.settimeout(30)
        deadline = time.monotonic() + 60
        while len(got) < HUGE_SIZE and time.monotonic() < deadline:
            chunk = c.sock.recv(1 << 20)
            if not chunk:
                break
            got += chunk
    assert len(got) == HUGE_SIZE, f"download cut at {len(got)} of {HUGE_SIZE} bytes"
    assert hashlib.sha256(got).hexdigest() == digest
    try:
        rc = srv.proc.wait(10)
    except Exception:
        pytest.fail(f"server did not exit within 10 s after the drain\n{srv.diagnostics()}")
    assert rc == 0, srv.diagnostics()


def test_sigterm_with_idle_keepalive_connection_exits(fresh_server):
    srv = fresh_server(drain_timeout=2, keepalive_timeout=60)
    with srv.connect() as c:
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response().body == A_TXT
        t0 = time.monotonic()
        rc = srv.stop(timeout=10)
        assert rc == 0, srv.diagnostics()
        assert time.monotonic() - t0 < 5
        assert c.wait_closed(1), "idle connection left open after the server exited"


def test_sigterm_mid_request_head(fresh_server):
    """A half-received request during shutdown does not keep the process alive
    beyond the drain timeout, and it still exits 0."""
    srv = fresh_server(drain_timeout=1, header_timeout=30)
    with srv.connect() as c:
        c.send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.1)
        rc = srv.stop(timeout=10)
    assert rc == 0, srv.diagnostics()


def test_client_reset_mid_download_does_not_kill_server(server, docroot):
    before = util.long_lived_processes(server)
    assert before, "no serving process found"
    for _ in range(5):
        c = server.connect(rcvbuf=8192)
        c.send(util.build_request("GET", "/big.bin"))
        c.read_head(time.monotonic() + 5)
        c.sock.recv(8192)
        c.reset()  # RST while the server is still sending (EPIPE/ECONNRESET, not SIGPIPE death)
    time.sleep(0.2)
    server.assert_alive("after clients reset mid-download ")
    resp = server.get("/big.bin", timeout=30)
    assert hashlib.sha256(resp.body).hexdigest() == docroot.sha256("big.bin")
    # the master restarts a dead serving process at once: alive is not enough
    assert util.long_lived_processes(server) == before, "a serving process or worker was replaced"


def test_client_closes_before_response_does_not_kill_server(server):
    before = util.long_lived_processes(server)
    assert before, "no serving process found"
    for _ in range(5):
        with server.connect() as c:
            c.send(util.build_request("GET", "/big.bin"))
    c2 = server.connect()
    c2.send(util.build_request("GET", "/big.bin"))
    c2.reset()
    time.sleep(0.2)
    server.assert_alive()
    assert server.get("/a.txt").body == A_TXT
    assert util.long_lived_processes(server) == before, "a serving process or worker was replaced"
