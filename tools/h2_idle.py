#!/usr/bin/env python3
"""h2_idle.py - what an idle HTTP/2 connection costs a server's processes.

Opens N connections by prior knowledge (h2c), each GETs one path (HPACK by
hand, curl's user-agent and accept put in the dynamic table as curl does,
and taken from it by the connection's later GETs), REQUESTS times one after
another (1 unless given), and then waits; the anonymous memory (smaps_rollup) of the given processes
is read before and after, and the difference per connection printed. Works
against any server that takes h2c by prior knowledge (nginx: `listen ...
http2;` on a plain port). Raise the open-file limit first for thousands.

    ulimit -n 20000; python3 tools/h2_idle.py PORT N PID[,PID...] [PATH] [SETTLE_S] [REQUESTS]
"""
import socket
import sys
import time
from pathlib import Path

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CONN_WINDOW = (1 << 31) - 1  # the connection's flow-control window, the most RFC 9113 allows


def frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + payload


def anon_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for ln in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if ln.startswith("Anonymous:"):
                total += int(ln.split()[1])
    return total


def connect(port: int, path: bytes, requests: int = 1) -> socket.socket:
    """A connection whose GETs of path on streams 1, 3, ... have been answered."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    first = (bytes([0x82, 0x86, 0x04, len(path)]) + path + bytes([0x01, 0x09]) + b"localhost" +
             bytes([0x40 | 58, 11]) + b"curl/7.88.1" + bytes([0x40 | 19, 3]) + b"*/*")
    # the same request once the table holds accept (62) and user-agent (63)
    again = bytes([0x82, 0x86, 0x04, len(path)]) + path + bytes([0x01, 0x09]) + b"localhost" + bytes([0xBF, 0xBE])
    # The connection's window opened wide: without it the server, rightly,
    # stops once 65,535 bytes of bodies have come (17 answers of a 4 KiB
    # page), and the tool waits for the rest until its timeout.
    s.sendall(PREFACE + frame(4, 0, 0) + frame(8, 0, 0, (CONN_WINDOW - 65535).to_bytes(4, "big")))
    data = b""
    for i in range(requests):
        stream = 1 + 2 * i
        s.sendall(frame(1, 0x05, stream, first if i == 0 else again))
        done = False
        while not done:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the answer ended")
            data += chunk
            while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
                length, ftype, flags = int.from_bytes(data[:3], "big"), data[3], data[4]
                if ftype in (0, 1) and flags & 0x01 and int.from_bytes(data[5:9], "big") & 0x7FFFFFFF == stream:
                    done = True
                if ftype == 4 and not flags & 0x01:
                    s.sendall(frame(4, 0x01, 0))  # the server's SETTINGS, acknowledged
                sid = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
                if ftype == 0 and length and not flags & 0x01:
                    # a body beyond the stream's first 64 KiB: its window given back as it comes
                    s.sendall(frame(8, 0, sid, length.to_bytes(4, "big")))
                data = data[9 + length:]
    return s


def main() -> None:
    port, n = int(sys.argv[1]), int(sys.argv[2])
    pids = [int(p) for p in sys.argv[3].split(",") if p]
    path = sys.argv[4].encode() if len(sys.argv) > 4 else b"/a.txt"
    settle = float(sys.argv[5]) if len(sys.argv) > 5 else 1.5
    requests = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    for _ in range(20):  # lazily made state, before the baseline
        connect(port, path).close()
    time.sleep(settle)
    before = anon_kib(pids)
    conns = [connect(port, path, requests) for _ in range(n)]
    time.sleep(settle)  # a server that gives back an idle connection's buffers after a while
    after = anon_kib(pids)
    print(f"{n} idle HTTP/2 connections after {requests} request(s) each: {(after - before) / n:.2f} KiB each "
          f"(anonymous memory {before} -> {after} KiB)")
    for c in conns:
        c.close()


if __name__ == "__main__":
    main()
