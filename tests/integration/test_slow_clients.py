"""Fault campaign: slow and trickling clients beside a fresh one (issue 9).

Slow writers trickle a request head, or a request body, a byte at a time;
slow readers ask for a large file and read it a few bytes at a time through a
small receive buffer. With hundreds of them connected, a fresh client must
still be answered quickly: a model may hold a worker for a connection only
while it has bytes to process, never while it waits for the client.

Every load here is bounded in clients, bytes and seconds, and stops by itself.
"""
from __future__ import annotations

import errno
import socket
import threading
import time

import pytest

import util
from conftest import A_TXT, BIG_SIZE

SLOW_CLIENTS = 200           # of each kind
CAMPAIGN_SECONDS = 20.0      # the most the slow clients keep trickling (stopped sooner)
ROUND_SECONDS = 0.5          # each slow client moves a byte (or reads a few) per round
FRESH_BOUND = 1.0            # seconds a fresh request may take, util.scaled()

# fork and thread give every connection a process or thread: allow the load.
CAMPAIGN_SETTINGS = {"max_connections": 4 * SLOW_CLIENTS + 64}

pytestmark = pytest.mark.concurrent  # iterative: one connection at a time, by design


def _open(port: int, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(5)
    s.connect((util.HOST, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    return s


class SlowCrowd:
    """Slow clients driven by one background thread, one step per round, for
    at most `seconds`; stops by itself or on stop()."""

    def __init__(self, port: int, writers: int, readers: int, seconds: float):
        self.port = port
        self.seconds = seconds
        self.writers: list[tuple[socket.socket, bytes]] = []
        self.readers: list[socket.socket] = []
        self.sent = [0] * writers
        self.received = [0] * readers
        self.dropped = 0     # connections the server closed while they trickled
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        for i in range(writers):
            if i % 2 == 0:  # a head, one byte at a time
                data = (f"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nX-Slow: {i:04d}\r\n\r\n").encode()
            else:           # a complete head, then its body one byte at a time
                data = (b"POST /a.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 64\r\n\r\n"
                        + b"b" * 64)
            s = _open(port)
            if i % 2 == 1:
                s.send(data[:data.index(b"\r\n\r\n") + 4])
                self.sent[i] = data.index(b"\r\n\r\n") + 4
            self.writers.append((s, data))
        for _ in range(readers):
            s = _open(port, rcvbuf=4096)
            s.send(util.build_request("GET", "/big.bin"))
            self.readers.append(s)

    def _step(self):
        for i, (s, data) in enumerate(self.writers):
            if s.fileno() < 0 or self.sent[i] >= len(data):
                continue
            try:
                self.sent[i] += s.send(data[self.sent[i]:self.sent[i] + 1])
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self.dropped += 1
                    s.close()
        for i, s in enumerate(self.readers):
            if s.fileno() < 0:
                continue
            try:
                got = s.recv(32)
                if not got:
                    self.dropped += 1
                    s.close()
                self.received[i] += len(got)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self.dropped += 1
                    s.close()

    def _run(self):
        end = time.monotonic() + self.seconds
        while time.monotonic() < end and not self.stop_event.is_set():
            self._step()
            self.stop_event.wait(ROUND_SECONDS)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(timeout=10)
        for s, _ in self.writers:
            s.close()
        for s in self.readers:
            s.close()


def _fresh_requests(srv: util.Server, count: int, pause: float) -> list[float]:
    """`count` fresh requests, each on a new connection; returns their durations."""
    times = []
    for _ in range(count):
        t0 = time.monotonic()
        resp = srv.get("/a.txt", timeout=10)
        times.append(time.monotonic() - t0)
        assert resp.status == 200 and resp.body == A_TXT
        time.sleep(pause)
    return times


def _campaign(srv: util.Server, writers: int, readers: int):
    bound = util.scaled(FRESH_BOUND)
    with SlowCrowd(srv.port, writers, readers, CAMPAIGN_SECONDS) as crowd:
        time.sleep(2 * ROUND_SECONDS)  # every slow client has started
        times = _fresh_requests(srv, 5, ROUND_SECONDS / 2)
        assert crowd.thread.is_alive(), "the slow clients stopped before the fresh requests ended"
    slowest = max(times)
    assert slowest < bound, (
        f"a fresh request took {slowest:.2f} s (all: {', '.join(f'{t:.2f}' for t in times)}) beside "
        f"{writers} slow writers and {readers} slow readers; bound {bound:.1f} s")
    # The slow clients were really there: the readers got response bytes
    # slowly, and the server dropped none of them while they trickled.
    if readers:
        assert 0 < max(crowd.received) < BIG_SIZE
    assert crowd.dropped == 0, f"{crowd.dropped} slow clients were dropped before header_timeout"


def test_fresh_client_beside_slow_writers(model, fresh_server):
    """200 clients trickling a head or a body, a byte per half second."""
    _campaign(fresh_server(**CAMPAIGN_SETTINGS), SLOW_CLIENTS, 0)


def test_fresh_client_beside_slow_readers(model, fresh_server):
    """200 clients reading a 5 MB file a few bytes per half second."""
    _campaign(fresh_server(**CAMPAIGN_SETTINGS), 0, SLOW_CLIENTS)


def test_fresh_client_beside_slow_readers_and_writers(model, fresh_server):
    """Both kinds at once, 200 of each."""
    _campaign(fresh_server(**CAMPAIGN_SETTINGS), SLOW_CLIENTS, SLOW_CLIENTS)
