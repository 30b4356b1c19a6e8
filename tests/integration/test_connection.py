"""Persistent connections, Connection: close, HTTP/1.0, pipelining, partial sends."""
from __future__ import annotations

import hashlib
import socket
import time

import pytest

import util
from conftest import A_TXT, INDEX_HTML


def req(method="GET", target="/a.txt", headers=None, version="HTTP/1.1", host="localhost"):
    return util.build_request(method, target, headers, b"", version, host)


def test_keepalive_is_default_for_http11(server, docroot):
    with server.connect() as c:
        for i in range(5):
            c.send(req(target="/a.txt" if i % 2 == 0 else "/index.html"))
            resp = c.read_response()
            assert resp.status == 200
            assert resp.body == (A_TXT if i % 2 == 0 else INDEX_HTML)
            assert (resp.header("Connection") or "").lower() != "close"
        assert not c.wait_closed(0.2), "server closed a keep-alive connection"


def test_last_request_sent_with_its_fin_is_answered_then_closed(server):
    """A kept-alive client sends its last request and half-closes at once
    (shutdown(SHUT_WR)), so the request's bytes and the FIN arrive together:
    it gets its answer and then the close at once, not when the keep-alive
    timeout (15 s here) comes (epoll: the read that takes the bytes stops short
    of the FIN, whose readiness edge is spent already)."""
    with server.connect(timeout=util.scaled(5)) as c:
        c.send(req(target="/a.txt"))
        assert c.read_response().body == A_TXT
        time.sleep(0.1)  # idle: the server waits for the next request
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)  # bytes and FIN in one segment
        c.send(req(target="/index.html"))
        c.sock.shutdown(socket.SHUT_WR)
        resp = c.read_response()
        assert (resp.status, resp.body) == (200, INDEX_HTML)
        assert c.wait_closed(util.scaled(3)), "a half-closed client's connection stays open after its answer"


def test_connection_close_is_honoured(server):
    with server.connect() as c:
        c.send(req(headers=[("Connection", "close")]))
        resp = c.read_response()
        assert resp.status == 200 and resp.body == A_TXT
        assert (resp.header("Connection") or "").lower() == "close"
        assert c.wait_closed(2), "server kept the connection open after Connection: close"


def test_connection_close_token_in_list(server):
    with server.connect() as c:
        c.send(req(headers=[("Connection", "foo, Close")]))
        resp = c.read_response()
        assert resp.status == 200
        assert c.wait_closed(2)


def test_http10_closes_by_default(server):
    with server.connect() as c:
        c.send(req(version="HTTP/1.0", host=None))
        resp = c.read_response()
        assert resp.status == 200 and resp.body == A_TXT
        assert resp.version in ("HTTP/1.1", "HTTP/1.0")
        assert c.wait_closed(2), "HTTP/1.0 connection without keep-alive left open"


def test_http10_keepalive(server):
    with server.connect() as c:
        for _ in range(3):
            c.send(req(version="HTTP/1.0", host=None, headers=[("Connection", "keep-alive")]))
            resp = c.read_response()
            assert resp.status == 200 and resp.body == A_TXT
            assert (resp.header("Connection") or "").lower() == "keep-alive"
        assert not c.wait_closed(0.2)
        # and without the header again: served, then closed
        c.send(req(version="HTTP/1.0", host=None))
        assert c.read_response().body == A_TXT
        assert c.wait_closed(2)


def test_error_response_on_keepalive_connection_keeps_it(server):
    """A 404 is a normal response: the connection stays usable."""
    with server.connect() as c:
        c.send(req(target="/missing"))
        assert c.read_response().status == 404
        c.send(req())
        assert c.read_response().body == A_TXT


@pytest.mark.parametrize("n", [3, 10])
def test_pipelining_in_one_send(server, docroot, n):
    paths = ["/a.txt", "/index.html", "/style.css", "/missing", "/data.json", "/sub/",
             "/app.js", "/range.txt", "/noext", "/img.png"][:n]
    expected = {"/a.txt": A_TXT, "/index.html": INDEX_HTML, "/sub/": docroot.files["sub/index.html"]}
    with server.connect() as c:
        c.send(b"".join(req(target=p) for p in paths))
        for p in paths:
            resp = c.read_response()
            if p == "/missing":
                assert resp.status == 404
                continue
            assert resp.status == 200, p
            want = expected.get(p, docroot.files.get(p.lstrip("/")))
            assert resp.body == want, f"wrong body for {p} (responses out of order?)"
        assert not c.wait_closed(0.2)


def test_pipelining_many_requests_larger_than_input_buffer(server):
    """300 pipelined requests (~45 KB) in one send(): all answered, in order."""
    n = 300
    reqs = [req(target=f"/a.txt?n={i}", headers=[("X-Pad", "p" * 80)]) for i in range(n)]
    reqs[-1] = req(target="/index.html")
    with server.connect(timeout=20) as c:
        c.send(b"".join(reqs))
        for i in range(n - 1):
            resp = c.read_response()
            assert (resp.status, resp.body) == (200, A_TXT), f"response {i}: {resp}"
        assert c.read_response().body == INDEX_HTML


def test_pipelining_with_head_and_close(server):
    batch = (req("HEAD", "/index.html") + req("GET", "/a.txt") + req("HEAD", "/a.txt")
             + req("GET", "/index.html", headers=[("Connection", "close")])
             + req("GET", "/a.txt"))  # after close: must not be answered
    with server.connect() as c:
        c.send(batch)
        h1 = c.read_response("HEAD")
        g1 = c.read_response()
        h2 = c.read_response("HEAD")
        g2 = c.read_response()
        assert (h1.status, h1.body, h1.header("Content-Length")) == (200, b"", str(len(INDEX_HTML)))
        assert (g1.status, g1.body) == (200, A_TXT)
        assert (h2.status, h2.body, h2.header("Content-Length")) == (200, b"", "13")
        assert (g2.status, g2.body) == (200, INDEX_HTML)
        assert c.wait_closed(2), "requests after Connection: close were answered"


def test_pipelined_big_responses_apply_backpressure(server, docroot):
    """Several large (sendfile) responses queued behind each other, read slowly
    at first: nothing is dropped, nothing reordered."""
    digest = docroot.sha256("big.bin")
    batch = req(target="/big.bin") + req(target="/a.txt") + req(target="/big.bin") + req()
    with server.connect(timeout=30, rcvbuf=32768) as c:
        c.send(batch)
        time.sleep(0.3)  # let the server fill the socket buffers
        r1 = c.read_response(timeout=30)
        r2 = c.read_response()
        r3 = c.read_response(timeout=30)
        r4 = c.read_response()
    assert hashlib.sha256(r1.body).hexdigest() == digest
    assert r2.body == A_TXT
    assert hashlib.sha256(r3.body).hexdigest() == digest
    assert r4.body == A_TXT


def test_request_split_into_small_sends(server):
    data = req(headers=[("User-Agent", "split-test"), ("Accept", "*/*")])
    with server.connect() as c:
        c.send_slowly(data, chunk=3, pause=0.005)
        resp = c.read_response()
        assert (resp.status, resp.body) == (200, A_TXT)
        # once more, byte by byte with a longer pause around the head terminator
        head, tail = data[:-4], data[-4:]
        c.send_slowly(head, chunk=7, pause=0.002)
        time.sleep(0.1)
        c.send_slowly(tail, chunk=1, pause=0.05)
        resp = c.read_response()
        assert (resp.status, resp.body) == (200, A_TXT)


def test_leftover_bytes_after_request_kept(server):
    first, second = req(target="/a.txt"), req(target="/index.html")
    half = len(second) // 2
    with server.connect() as c:
        c.send(first + second[:half])
        r1 = c.read_response()
        assert (r1.status, r1.body) == (200, A_TXT)
        time.sleep(0.1)
        c.send(second[half:])
        r2 = c.read_response()
        assert (r2.status, r2.body) == (200, INDEX_HTML)


def test_leftover_split_inside_crlf(server):
    """The next request's bytes end between the CR and LF of its blank line."""
    first, second = req(target="/index.html"), req(target="/a.txt")
    with server.connect() as c:
        c.send(first + second[:-1])
        assert c.read_response().body == INDEX_HTML
        time.sleep(0.1)
        c.send(second[-1:])
        assert c.read_response().body == A_TXT


def test_leading_empty_lines_before_request_tolerated(server):
    """RFC 9112 2.2: a server SHOULD ignore at least one empty line before the request-line."""
    with server.connect() as c:
        c.send(b"\r\n" + req())
        resp = c.read_response()
    assert (resp.status, resp.body) == (200, A_TXT)


def test_absolute_form_target(server):
    with server.connect() as c:
        c.send(req(target="http://localhost/a.txt"))
        resp = c.read_response()
    assert (resp.status, resp.body) == (200, A_TXT)


def test_many_sequential_connections(server):
    for _ in range(50):
        resp = server.get("/a.txt")
        assert resp.body == A_TXT


@pytest.mark.concurrent
def test_two_clients_interleaved(server):
    with server.connect() as c1, server.connect() as c2:
        c1.send(req())
        c2.send(req(target="/index.html"))
        assert c2.read_response().body == INDEX_HTML
        assert c1.read_response().body == A_TXT
        c2.send(req())
        c1.send(req(target="/index.html"))
        assert c1.read_response().body == INDEX_HTML
        assert c2.read_response().body == A_TXT


@pytest.mark.concurrent
def test_fifty_concurrent_connections(server):
    conns = []
    try:
        for _ in range(50):
            conns.append(server.connect())
        for i, c in enumerate(conns):
            c.send(req(target="/a.txt" if i % 2 else "/index.html"))
        for i, c in enumerate(conns):
            assert c.read_response().body == (A_TXT if i % 2 else INDEX_HTML)
        for c in conns:  # and a second round on the same connections
            c.send(req())
        for c in conns:
            assert c.read_response().body == A_TXT
    finally:
        for c in conns:
            c.close()


@pytest.mark.concurrent
def test_partial_request_does_not_block_others(server):
    with server.connect() as slow:
        slow.send(b"GET /a.txt HTTP/1.1\r\nHost: local")
        t0 = time.monotonic()
        resp = server.get("/index.html", timeout=3)
        assert resp.body == INDEX_HTML
        assert time.monotonic() - t0 < 1.0
        slow.send(b"host\r\n\r\n")
        assert slow.read_response().body == A_TXT


@pytest.mark.concurrent
def test_slow_reader_does_not_block_others(server):
    """A client that does not read a 5 MB response must not stall anyone else."""
    with server.connect(rcvbuf=4096) as slow:
        slow.send(req(target="/big.bin"))
        time.sleep(0.2)
        t0 = time.monotonic()
        resp = server.get("/a.txt", timeout=3)
        assert resp.body == A_TXT
        assert time.monotonic() - t0 < 1.0
