"""Input flow control: a client that pipelines or floods while its responses
wait does not hold the server's loop or make it buffer without bound, and
received bytes reach the core whole and in order however the driver receives
them (uring: a multishot receive into a shared ring of 2 KiB buffers, copied
out in order; single-shot when that ring runs dry).

Every load here is bounded in clients, bytes and seconds, and stops by itself.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

import util
from conftest import A_TXT, BIG_SIZE

FLOOD_SECONDS = 3.0       # the most the flooder writes without reading
SMALL_REQUESTS = 1500     # pipelined behind the big one
PAD = b"p" * 1000         # so requests straddle the driver's 2 KiB receive buffers
FRESH_BOUND = 1.0         # seconds a fresh request may take, util.scaled()
FLOOD_BYTES_BOUND = 40 * 1024 * 1024  # what a server that stops reading lets in, with the kernel's buffers


def small_request(i: int) -> bytes:
    return util.build_request("GET", f"/a.txt?i={i}", [("X-Pad", PAD.decode())])


@pytest.mark.concurrent  # iterative: one connection at a time, by design
def test_flooding_pipeliner_beside_fresh_clients(fresh_server, docroot):
    """A client asks for a 5 MB file, then pipelines 1500 small requests
    (~1 KB each) without reading a byte: its first response blocks the
    server's send, and what it sends meanwhile must wait (in the kernel, or a
    bounded amount held by the server), not be read without end. Fresh
    clients are answered quickly meanwhile; then the flooder reads, finishes
    sending, and gets every response whole and in order."""
    srv = fresh_server()
    big = (docroot.path / "big.bin").read_bytes()
    batch = util.build_request("GET", "/big.bin") + b"".join(small_request(i) for i in range(SMALL_REQUESTS))

    flood = srv.connect(timeout=util.scaled(10), rcvbuf=8192)
    sent = 0
    try:
        flood.sock.setblocking(False)
        end = time.monotonic() + util.scaled(FLOOD_SECONDS)
        blocked_since = None
        while sent < len(batch) and time.monotonic() < end:
            try:
                sent += flood.sock.send(batch[sent:sent + 65536])
                blocked_since = None
            except BlockingIOError:
                blocked_since = blocked_since or time.monotonic()
                if time.monotonic() - blocked_since > 0.5:
                    break  # the server stopped reading us: that is the point
                time.sleep(0.01)
        assert sent <= FLOOD_BYTES_BOUND

        times = []
        for _ in range(5):
            t0 = time.monotonic()
            with srv.connect() as c:
                c.send(util.build_request("GET", "/a.txt", [("Connection", "close")]))
                resp = c.read_response()
                assert (resp.status, resp.body) == (200, A_TXT)
            times.append(time.monotonic() - t0)
        assert max(times) <= util.scaled(FRESH_BOUND), f"fresh requests beside the flooder took {times}"

        flood.sock.settimeout(util.scaled(10))
        rest_error = []

        def send_rest():
            try:
                flood.sock.sendall(batch[sent:])
            except OSError as e:  # seen by the reader as missing responses
                rest_error.append(e)

        writer = threading.Thread(target=send_rest, daemon=True)
        writer.start()
        resp = flood.read_response(timeout=util.scaled(20))
        assert resp.status == 200 and resp.body == big, "the big response, whole"
        assert len(big) == BIG_SIZE
        for i in range(SMALL_REQUESTS):
            resp = flood.read_response(timeout=util.scaled(10))
            assert (resp.status, resp.body) == (200, A_TXT), f"small response {i}: {resp}"
        writer.join(util.scaled(10))
        assert not writer.is_alive() and not rest_error, rest_error
    finally:
        flood.close()
    srv.assert_alive("after the flood ")


@pytest.mark.concurrent
def test_many_clients_at_once_with_a_tiny_receive_ring(fresh_server, monkeypatch):
    """uring with a 2-buffer receive ring (a test-only knob; other models
    ignore it): 40 clients each send 3 pipelined requests with 5 KB heads
    (each spans three 2 KiB buffers) at once, so the ring runs dry again and
    again; every response comes whole and in order, and the server serves on."""
    monkeypatch.setenv("SPINDLE_URING_BUFS", "2")
    srv = fresh_server()
    head_pad = [("X-Pad", "q" * 5000)]
    clients = [srv.connect(timeout=util.scaled(10)) for _ in range(40)]
    try:
        for n, c in enumerate(clients):
            c.send(b"".join(util.build_request("GET", f"/a.txt?c={n}&r={r}", head_pad) for r in range(3)))
        for round_ in range(2):  # a second round on the same connections, after the first
            for n, c in enumerate(clients):
                for r in range(3):
                    resp = c.read_response()
                    assert (resp.status, resp.body) == (200, A_TXT), f"client {n} request {r}: {resp}"
            if round_ == 0:
                for c in clients:
                    c.send(b"".join(util.build_request("GET", "/a.txt", head_pad) for _ in range(3)))
    finally:
        for c in clients:
            c.close()
    assert srv.get("/a.txt").body == A_TXT


def test_flooder_of_garbage_after_a_response_is_closed(fresh_server):
    """A client whose request is answered and which then pours bytes that
    are no request (a head past every limit) gets its error and is closed;
    the server goes on serving others."""
    srv = fresh_server()
    with srv.connect(timeout=util.scaled(10)) as c:
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response().body == A_TXT
        junk = b"X" * 65536
        c.sock.settimeout(util.scaled(5))
        try:
            for _ in range(64):  # at most 4 MB
                c.sock.sendall(junk)
        except OSError:
            pass  # closed under us: expected
        resp = c.read_response()
        assert resp.status in (400, 414, 431), resp
    assert srv.get("/a.txt").body == A_TXT


def test_kept_alive_connection_closes_when_asked(fresh_server):
    """A connection served a few requests (uring: reading by multishot, its
    socket in the ring's file table) and then asked to close is closed at
    once: its response, then EOF, and the server serves on."""
    srv = fresh_server()
    with srv.connect() as c:
        for i in range(3):
            c.send(util.build_request("GET", f"/a.txt?i={i}"))
            assert c.read_response().body == A_TXT
        c.send(util.build_request("GET", "/a.txt", [("Connection", "close")]))
        assert c.read_response().body == A_TXT
        assert c.wait_closed(util.scaled(2)), "still open 2 s after answering Connection: close"
    assert srv.get("/a.txt").body == A_TXT


@pytest.mark.parametrize("ring", ["default", "2"])
def test_half_close_behind_a_pipelined_batch_answers_it_all(fresh_server, docroot, monkeypatch, ring):
    """On a kept-alive connection (uring: its multishot receive armed), a
    client asks for a 5 MB file, pipelines requests behind it (heads of
    3-5 KB, spanning several 2 KiB receive buffers, some trickled in small
    pieces) and half-closes at once, reading nothing until it has sent
    everything: the requests and then the end of input arrive while the
    server is busy sending, so the driver holds them. Every response comes
    whole and in order, and only then the server closes: the end of input
    reaches the core after the bytes before it, never instead of them. With
    a 2-buffer ring (uring's test knob) receives also switch between the
    multishot and single-shot recvs mid-head."""
    if ring != "default":
        monkeypatch.setenv("SPINDLE_URING_BUFS", ring)
    srv = fresh_server()
    big = (docroot.path / "big.bin").read_bytes()
    with srv.connect(timeout=util.scaled(20)) as c:
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response().body == A_TXT
        heads = [util.build_request("GET", f"/a.txt?i={i}", [("X-Pad", "q" * (3000 + 100 * i))])
                 for i in range(20)]
        c.send(util.build_request("GET", "/big.bin") + b"".join(heads[:10]))
        time.sleep(0.1)  # the server is inside the big response now
        trickled = b"".join(heads[10:])
        for i in range(0, len(trickled), 700):
            c.send(trickled[i:i + 700])
            time.sleep(0.002)
        c.sock.shutdown(socket.SHUT_WR)
        resp = c.read_response(timeout=util.scaled(20))
        assert resp.status == 200 and resp.body == big, resp
        for i in range(20):
            resp = c.read_response()
            assert (resp.status, resp.body) == (200, A_TXT), f"request {i}: {resp}"
        assert c.wait_closed(util.scaled(5)), "still open after the half-closed batch was answered"
    assert srv.get("/a.txt").body == A_TXT
