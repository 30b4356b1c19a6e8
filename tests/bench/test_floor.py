"""The floor servers (tools/floor/) that tools/peer_cpu.py measures as the least
CPU per request any keep-alive server can spend: they must answer every request,
however the bytes arrive, or their figure would be too low to mean anything."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import peer_cpu  # noqa: E402

REQUEST = b"GET /hello.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(params=sorted(peer_cpu.FLOORS))
def floor(request, tmp_path):
    port = peer_cpu.free_port()
    proc = subprocess.Popen([str(peer_cpu.build_floor(request.param, tmp_path)), str(port)])
    try:
        peer_cpu.wait_port(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def read_responses(sock: socket.socket, count: int) -> bytes:
    data, end = b"", time.monotonic() + 5
    while data.count(peer_cpu.SMALL) < count and time.monotonic() < end:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def test_a_floor_answers_each_request_however_its_bytes_arrive(floor):
    with socket.create_connection(("127.0.0.1", floor), timeout=5) as s:
        s.sendall(REQUEST * 3 + REQUEST[:10])      # three whole requests and a piece
        time.sleep(0.05)
        s.sendall(REQUEST[10:41])                   # the terminator split across writes
        time.sleep(0.05)
        s.sendall(REQUEST[41:])
        data = read_responses(s, 4)
        assert data.count(b"HTTP/1.1 200 OK\r\n") == 4
        assert data.count(peer_cpu.SMALL) == 4 and data.endswith(peer_cpu.SMALL)


def test_a_floor_answers_a_deep_pipeline_in_full(floor):
    # 2,000 responses (~400 KB) exceed one send and the socket buffer, so the
    # floor has to carry on where a short send stopped
    with socket.create_connection(("127.0.0.1", floor), timeout=5) as s:
        s.sendall(REQUEST * 2000)
        data = read_responses(s, 2000)
        assert data.count(b"HTTP/1.1 200 OK\r\n") == 2000 and data.endswith(peer_cpu.SMALL)


def test_a_floor_keeps_serving_after_clients_leave(floor):
    for _ in range(20):                              # peers that close, some mid-response
        s = socket.create_connection(("127.0.0.1", floor), timeout=5)
        s.sendall(REQUEST * 50)
        s.close()
    with socket.create_connection(("127.0.0.1", floor), timeout=5) as s:
        s.sendall(REQUEST)
        assert read_responses(s, 1).count(peer_cpu.SMALL) == 1


def test_floors_measure_the_keep_alive_cell_only():
    out = subprocess.run([sys.executable, str(REPO / "tools" / "peer_cpu.py"), "--servers", "floor-uring",
                          "--cells", "ka,conn", "--repeats", "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--cells ka only" in out.stderr


@pytest.mark.parametrize("rcvbuf,count", [(0, 2000), (4096, 20000)])
def test_a_floor_answers_what_was_asked_before_the_client_half_closed(floor, rcvbuf, count):
    # a client may send its requests and then its FIN (shutdown(SHUT_WR)):
    # every request that arrived still gets its response before the close,
    # also when the client's small receive buffer makes the floor wait for
    # room to send (5 MB of responses) while the FIN is already there
    with socket.socket() as s:
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(5)
        s.connect(("127.0.0.1", floor))
        s.sendall(REQUEST * count)
        s.shutdown(socket.SHUT_WR)
        data, end = b"", time.monotonic() + 20
        while time.monotonic() < end:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        assert data.count(b"HTTP/1.1 200 OK\r\n") == count and data.endswith(peer_cpu.SMALL)
