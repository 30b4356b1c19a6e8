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
    assert time.monotonic() - t0 < util.scaled(3), "an idle server took over 3 s to stop"


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
        assert c.wait_closed(util.scaled(1)), "idle connection left open after the server exited"


def test_sigterm_mid_request_head(fresh_server):
    """A half-received request during shutdown does not keep the process alive
    beyond the drain timeout, and it still exits 0."""
    srv = fresh_server(drain_timeout=1, header_timeout=30)
    with srv.connect() as c:
        c.send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.1)
        t0 = time.monotonic()
        rc = srv.stop(timeout=10)
        elapsed = time.monotonic() - t0
    assert rc == 0, srv.diagnostics()
    # drain_timeout (1 s), prefork's worker exit grace (1 s) and process exits
    assert elapsed <= util.scaled(3), f"drain_timeout=1 but the server took {elapsed:.2f}s to exit"


def test_sigint_stops_like_sigterm(fresh_server):
    """README: SIGINT, like SIGTERM, stops listening at once, drains and exits 0."""
    srv = fresh_server()
    assert srv.get("/a.txt").body == A_TXT
    t0 = time.monotonic()
    srv.signal(signal.SIGINT)
    assert util.wait_for(lambda: _refused(srv.port), util.scaled(2)), "still accepting after SIGINT"
    rc = srv.proc.wait(util.scaled(5))
    srv.stopped = True
    assert rc == 0, srv.diagnostics()
    assert time.monotonic() - t0 < util.scaled(3)
    assert srv.stop() == 0


def test_sigterm_idle_keepalive_grace_answers_with_close(fresh_server):
    """README: on SIGTERM an idle keep-alive connection gets a one-second grace
    in which a request is still answered, with Connection: close, so a client
    about to reuse it sees no failure; then the connection is closed."""
    srv = fresh_server(drain_timeout=5, keepalive_timeout=60)
    with srv.connect() as c:
        c.send(util.build_request("GET", "/a.txt"))
        r = c.read_response()
        assert r.body == A_TXT and r.header("Connection") is None, r
        srv.signal(signal.SIGTERM)
        time.sleep(0.3)  # within the grace
        c.send(util.build_request("GET", "/index.html"))
        r = c.read_response(timeout=util.scaled(3))
        assert r.status == 200, r
        assert (r.header("Connection") or "").lower() == "close", r
        assert c.wait_closed(util.scaled(2)), "the connection stayed open after Connection: close"
    rc = srv.proc.wait(util.scaled(5))
    srv.stopped = True
    assert rc == 0, srv.diagnostics()


def test_sigterm_idle_keepalive_closed_after_grace(fresh_server):
    """An idle keep-alive connection that sends nothing is closed about a
    second after SIGTERM (the grace), not held until keepalive_timeout."""
    srv = fresh_server(drain_timeout=5, keepalive_timeout=60)
    with srv.connect() as c:
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response().body == A_TXT
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        assert c.wait_closed(util.scaled(4)), "idle connection kept open 4 s after SIGTERM"
        elapsed = time.monotonic() - t0
    assert 0.7 <= elapsed <= util.scaled(2.5), f"closed {elapsed:.2f}s after SIGTERM (grace: 1 s)"
    rc = srv.proc.wait(util.scaled(5))
    srv.stopped = True
    assert rc == 0, srv.diagnostics()


def test_drain_timeout_cuts_a_long_download(fresh_server, huge_docroot):
    """README: in-flight responses finish within drain_timeout: a download too
    slow to finish in it is cut, and the server exits 0 in time. (What the
    kernel already buffered still arrives after the exit, so the cut shows as
    a short body at EOF, not as an early EOF.)"""
    srv = fresh_server(root=huge_docroot.path, drain_timeout=1, send_timeout=60)
    with srv.connect(timeout=30, rcvbuf=16384) as c:
        c.send(util.build_request("GET", "/huge.bin"))
        c.read_head(time.monotonic() + 5)
        got = len(c.buf)
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        exited = None
        while time.monotonic() - t0 < util.scaled(6):  # read 16 KiB per 50 ms: far too slow
            if srv.proc.poll() is not None:
                exited = time.monotonic() - t0
                break
            got += len(c.sock.recv(16384))
            time.sleep(0.05)
        assert exited is not None, f"still running {util.scaled(6)}s after SIGTERM (drain_timeout=1)"
        assert exited <= util.scaled(3), f"exited {exited:.2f}s after SIGTERM (drain_timeout=1)"
        got += len(c.read_all(timeout=30))  # what the kernel still holds, then EOF
    assert got < HUGE_SIZE, "the whole 50 MB arrived: the download was not cut"
    srv.stopped = True
    assert srv.proc.returncode == 0, srv.diagnostics()


# A client that resets or leaves mid-response must cost the server nothing:
# EPIPE/ECONNRESET, never a SIGPIPE death. The master restarts a dead serving
# process at once, so "still alive" proves nothing: the same serving
# processes (and prefork workers) must serve before and after.

def _settled_processes(server) -> set:
    """The serving processes and workers once all are up (a server is ready
    when its master's socket accepts, maybe before it has forked them)."""
    assert server.get("/a.txt").body == A_TXT
    last = set()

    def same_twice():
        nonlocal last
        now = util.long_lived_processes(server)
        settled = now if now and now == last else None
        last = now
        return settled
    procs = util.wait_for(same_twice, util.scaled(5), interval=0.2)
    assert procs, "no serving process found"
    return procs


def test_client_reset_mid_download_does_not_kill_server(server, docroot):
    before = _settled_processes(server)
    for _ in range(5):
        c = server.connect(rcvbuf=8192)
        c.send(util.build_request("GET", "/big.bin"))
        c.read_head(time.monotonic() + util.scaled(5))
        c.sock.recv(8192)
        c.reset()  # RST while the server is still sending
    time.sleep(0.2)
    server.assert_alive("after clients reset mid-download ")
    resp = server.get("/big.bin", timeout=30)
    assert hashlib.sha256(resp.body).hexdigest() == docroot.sha256("big.bin")
    assert util.long_lived_processes(server) == before, "a serving process or worker was replaced"


def test_client_closes_before_response_does_not_kill_server(server):
    before = _settled_processes(server)
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
