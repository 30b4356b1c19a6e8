"""Directory listings are built whole in memory and held until sent, against
one budget per serving process: clients that ask for a large listing and
never read it must not deny listings to everyone else. The budget is per
process, so one model (epoll, one process) shows it."""
from __future__ import annotations

import os
import socket

import pytest

import util

# Names of 240 bytes make an HTML listing of about 570 bytes per entry: 8000
# of them fill a listing to its 4 MiB cap.
BIG_ENTRIES = 8000
MAX_IDLE = 40           # idle readers at most: more than the whole budget holds (16 x 4 MiB)
CLIENT = "127.0.0.1"    # the idle readers' address
OTHER = "127.0.0.2"     # another client's (all of 127/8 is this host)


@pytest.fixture(scope="module")
def big_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("listbudget") / "www"
    (root / "big").mkdir(parents=True)
    seed = root / "seed.txt"
    seed.write_bytes(b"")
    for i in range(BIG_ENTRIES):  # links: much faster to make than files
        os.link(seed, root / "big" / (f"{i:05d}-" + "n" * 234))
    return root


@pytest.fixture
def srv(big_root, tmp_path):
    s = util.Server("epoll", big_root, tmp_path / "server",
                    {"autoindex": "html", "workers": 1, "max_connections": 256}).start()
    try:
        yield s
    finally:
        rc = s.stop()
    assert rc == 0, f"exit status {rc} after SIGTERM\n{s.diagnostics()}"


def _open_from(source: str, port: int, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.settimeout(10)
    s.connect((util.HOST, port))
    return s


def _idle_readers_until_refused(port: int) -> tuple[list[socket.socket], int]:
    """Clients from CLIENT that ask for the big listing and read nothing (a
    small receive buffer), one after another until one is refused (503) or
    MAX_IDLE are open; returns them and how many got a listing. (Each holds
    what the kernel's socket buffers did not take of its listing.)"""
    socks, held = [], 0
    for _ in range(MAX_IDLE):
        s = _open_from(CLIENT, port, rcvbuf=4096)
        socks.append(s)
        s.sendall(util.build_request("GET", "/big/"))
        head = s.recv(12)
        if head != b"HTTP/1.1 200":
            assert head == b"HTTP/1.1 503", f"an idle reader's listing: {head!r}"
            return socks, held
        held += 1
    return socks, held


def _get(source: str, port: int, target: str) -> util.Response:
    with util.Conn(_open_from(source, port), 10) as c:
        c.send(util.build_request("GET", target))
        return c.read_response()


def test_idle_readers_do_not_starve_other_clients(srv):
    """Clients that ask for a large listing and never read it take their
    address's share of the listing budget, and then are refused (503); another
    client still gets the listing, whole; and closing them gives it back."""
    idle, held = _idle_readers_until_refused(srv.port)
    try:
        assert held < MAX_IDLE, f"{held} idle readers held a large listing each, none refused"
        r = _get(OTHER, srv.port, "/big/")
        assert r.status == 200, f"another client's listing: {r.status} beside {held} idle readers"
        assert r.body.rstrip().endswith(b"</html>") and r.body.count(b"<tr>") > 1000
    finally:
        for s in idle:
            s.close()
    ok = util.wait_for(lambda: _get(CLIENT, srv.port, "/big/").status == 200, timeout=util.scaled(3))
    assert ok, "the listing budget was not given back when the idle readers closed"
