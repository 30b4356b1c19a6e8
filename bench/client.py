"""Small raw-socket HTTP clients the lab runs as separate processes, pinned to
the load generator's core (python -m bench.client ...). They print one JSON
object on stdout.

  latency HOST PORT PATH N PAR SIZE   seed 001: N requests, PAR at a time, each on
                                      a new connection with Connection: close;
                                      per-request time from connect() to the
                                      last body byte. With SIZE =
                                      "any:DMIN:DMAX:BUCKETS", PATH's {d} and {b}
                                      become a random delay and bucket per request
                                      (workload requests; any body size)
  idle HOST PORT PATH N SIZE [https] [SOURCES]
                                      opens N keep-alive connections (over TLS
                                      with "https", certificate unchecked; from
                                      SOURCES loopback addresses 127.0.0.1,
                                      127.0.0.2, ... in turn, 1 by default), does
                                      one request on each, prints a JSON line
                                      (with last_response_mono, the
                                      CLOCK_MONOTONIC time of the last response),
                                      then holds them until stdin closes
  pipeline HOST PORT PATH CONNS DEPTH SECONDS RESPONSE_BYTES
                                      CONNS keep-alive connections, each writing
                                      DEPTH GETs at once and reading the DEPTH
                                      responses (RESPONSE_BYTES each, head and
                                      body) for SECONDS; per-batch latency (wrk's
                                      percentiles are wrong when pipelining)
  slow HOST PORT WRITERS READERS SECONDS HEAD_PATH BIG_PATH
                                      slow clients: WRITERS connections send a
                                      GET of HEAD_PATH one byte per round,
                                      READERS ask for BIG_PATH through a 4 KiB
                                      receive buffer and read 32 bytes per round
                                      (a round every SLOW_ROUND_S); prints a JSON
                                      line once every reader has had bytes (the
                                      server holds them all) or 1.5 s passed, then
                                      trickles until stdin closes or SECONDS
                                      pass, and prints how many the server
                                      dropped
"""
from __future__ import annotations

import asyncio
import json
import resource
import statistics
import sys
import time


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, int]:
    """Returns (status, body length); reads exactly Content-Length bytes."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for ln in lines[1:]:
        if ln.lower().startswith(b"content-length:"):
            length = int(ln.split(b":", 1)[1])
    await reader.readexactly(length)
    return status, length


async def _latency(host, port, path, n, par, size):
    import random
    spec = None
    if isinstance(size, str):      # "any:DMIN:DMAX:BUCKETS": workload requests, any body size
        _, dmin, dmax, nb = size.split(":")
        spec = (int(dmin), int(dmax), int(nb))
    sem = asyncio.Semaphore(par)
    times, errors = [], []

    async def one(i):
        target = path
        if spec:
            target = path.format(d=random.randint(spec[0], spec[1]), b=random.randrange(spec[2]))
        req = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        async with sem:
            t0 = time.perf_counter()
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
                writer.write(req)
                status, length = await asyncio.wait_for(_read_response(reader), 30)
                writer.close()
                dt = time.perf_counter() - t0
                if status != 200 or (spec is None and length != size):
                    errors.append(f"request {i}: status {status}, {length} bytes (want 200, {size})")
                else:
                    times.append(dt)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                errors.append(f"request {i}: {type(e).__name__}: {e}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t0
    out = {"ok": len(times), "errors": len(errors), "error_samples": errors[:5], "wall_s": wall}
    if times:
        out.update(avg_ms=statistics.mean(times) * 1e3, min_ms=min(times) * 1e3,
                   max_ms=max(times) * 1e3,
                   std_ms=(statistics.pstdev(times) * 1e3 if len(times) > 1 else 0.0),
                   p50_ms=statistics.median(times) * 1e3, rps=len(times) / wall,
                   lat_ms=sorted(round(t * 1e3, 3) for t in times))
    return out


async def _idle(host, port, path, n, size, tls=False, sources=1):
    req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    conns, errors = [], []
    sem = asyncio.Semaphore(200)  # bounded burst: stays far below the listen backlog
    ctx = None
    if tls:
        import ssl
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE       # the lab's certificate is self-signed, made for the run
        ctx.set_alpn_protocols(["http/1.1"])
    last = 0.0

    async def one(i):
        nonlocal last
        # More than one source address: each has its own ephemeral ports.
        local = (f"127.0.0.{1 + i % sources}", 0) if sources > 1 else None
        async with sem:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost" if ctx else None,
                                            local_addr=local), 30)
                writer.write(req)
                status, length = await asyncio.wait_for(_read_response(reader), 30)
                last = time.monotonic()
                if status != 200 or length != size:
                    errors.append(f"conn {i}: status {status}, {length} bytes")
                conns.append((reader, writer))
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                errors.append(f"conn {i}: {type(e).__name__}: {e}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    # Every connection must still be open (a server that closed some would
    # make them readable with EOF).
    await asyncio.sleep(0.2)
    open_now = sum(1 for r, _ in conns if not r.at_eof())
    print(json.dumps({"opened": len(conns), "open": open_now, "errors": len(errors),
                      "error_samples": errors[:5], "setup_s": time.perf_counter() - t0,
                      "last_response_mono": last}),
          flush=True)
    # Hold until the lab closes our stdin (it measures the server meanwhile).
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    open_end = sum(1 for r, _ in conns if not r.at_eof())
    for _, w in conns:
        w.close()
    print(json.dumps({"open_at_end": open_end}), flush=True)


async def _pipeline(host, port, path, conns, depth, seconds, response_bytes):
    batch = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() * depth
    want = depth * response_bytes
    times, errors = [], []
    deadline = time.perf_counter() + seconds

    reconnects = 0

    async def one(i):
        nonlocal reconnects
        writer = None
        try:
            while time.perf_counter() < deadline:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
                t0 = time.perf_counter()
                writer.write(batch)
                try:
                    data = await asyncio.wait_for(reader.readexactly(want), 10)
                except asyncio.IncompleteReadError as e:
                    data = e.partial
                dt = time.perf_counter() - t0
                if len(data) == want and data.count(b"HTTP/1.1 200 ") == depth:
                    times.append(dt)
                    continue
                # A server may close a keep-alive connection after so many requests
                # (nginx's and lighttpd's keepalive_requests), saying so: reconnect
                # and leave that batch out. Anything else is a wrong response.
                if b"\r\nConnection: close\r\n" in data or b"\r\nconnection: close\r\n" in data:
                    reconnects += 1
                    writer.close()
                    writer = None
                    continue
                errors.append(f"conn {i}: {len(data)} of {want} bytes, {data.count(b'HTTP/1.1 200 ')} of {depth} "
                              f"responses 200 ({response_bytes} bytes expected each)")
                return
        except (OSError, asyncio.TimeoutError) as e:
            errors.append(f"conn {i}: {type(e).__name__}: {e}")
        finally:
            if writer is not None:
                writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(conns)))
    wall = time.perf_counter() - t0
    out = {"ok": len(times) * depth, "batches": len(times), "reconnects": reconnects, "errors": len(errors),
           "error_samples": errors[:5],
           "wall_s": wall, "rps": len(times) * depth / wall if wall > 0 else 0.0}
    if times:
        ts = sorted(times)
        pick = lambda q: ts[min(len(ts) - 1, max(0, int(q * len(ts) + 0.999999) - 1))] * 1e3
        out.update(mean_ms=statistics.mean(ts) * 1e3, p50_ms=pick(0.5), p90_ms=pick(0.9), p99_ms=pick(0.99),
                   max_ms=ts[-1] * 1e3)
    return out


SLOW_ROUND_S = 0.25     # a slow client moves a byte (or reads 32) this often: a head takes ~10 s
SLOW_READY_S = 1.5      # at most this long for every reader to be answered (a served one is, within a round)


def _slow(host, port, writers, readers, seconds, head_path, big_path):
    """Slow clients held open beside the lab's measurement (see the module's
    first comment). Plain non-blocking sockets, one round every SLOW_ROUND_S."""
    import errno
    import socket
    import threading
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    t0 = time.monotonic()
    ws, rs, errors = [], [], []

    def conn(rcvbuf=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(5)
        s.connect((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        return s

    for i in range(writers):
        try:
            ws.append([conn(), f"GET {head_path} HTTP/1.1\r\nHost: {host}\r\nX-Slow: {i:05d}\r\n\r\n".encode(), 0])
        except OSError as e:
            errors.append(f"writer {i}: {e}")
    for i in range(readers):
        try:
            s = conn(4096)
            s.send(f"GET {big_path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            rs.append([s, 0])
        except OSError as e:
            errors.append(f"reader {i}: {e}")
    dropped = 0
    ready_at = None
    end = t0 + seconds
    while time.monotonic() < end and not done.is_set():
        for w in ws:           # a round: one byte from each writer, up to 32 bytes into each reader
            s, data, sent = w
            if s is None or sent >= len(data) - 1:     # never the last byte: the head stays incomplete
                continue
            try:
                w[2] += s.send(data[sent:sent + 1])
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    dropped += 1
                    s.close()
                    w[0] = None
        for r in rs:
            s = r[0]
            if s is None:
                continue
            try:
                got = s.recv(32)
                if not got:
                    raise ConnectionResetError(errno.ECONNRESET, "closed")
                r[1] += len(got)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    dropped += 1
                    s.close()
                    r[0] = None
        if ready_at is None and (all(r[1] for r in rs if r[0]) or time.monotonic() - t0 > SLOW_READY_S):
            # every reader is being answered (the writers sent their first byte in the first round), or
            # SLOW_READY_S passed: a model that never takes them all up shows it in the measurement that follows
            ready_at = time.monotonic()
            print(json.dumps({"writers": len(ws), "readers": len(rs), "errors": len(errors),
                              "error_samples": errors[:3], "ready_s": ready_at - t0,
                              "readers_served": sum(1 for r in rs if r[1]),
                              "writers_sent": sum(w[2] for w in ws), "dropped": dropped}), flush=True)
        done.wait(SLOW_ROUND_S)
    held = sum(1 for w in ws if w[0]) + sum(1 for r in rs if r[0])
    for s in [w[0] for w in ws] + [r[0] for r in rs]:
        if s is not None:
            s.close()
    print(json.dumps({"held_at_end": held, "dropped": dropped, "held_s": time.monotonic() - (ready_at or t0)}),
          flush=True)


def main(argv: list[str]) -> int:
    nofile = _raise_nofile()
    cmd = argv[0]
    if cmd == "latency":
        host, port, path, n, par = argv[1], int(argv[2]), argv[3], int(argv[4]), int(argv[5])
        size = argv[6] if argv[6].startswith("any:") else int(argv[6])
        out = asyncio.run(_latency(host, port, path, n, par, size))
        out["nofile"] = nofile
        print(json.dumps(out))
        return 0
    if cmd == "idle":
        host, port, path, n, size = argv[1], int(argv[2]), argv[3], int(argv[4]), int(argv[5])
        tls = len(argv) > 6 and argv[6] == "https"
        sources = int(argv[7]) if len(argv) > 7 else 1
        asyncio.run(_idle(host, port, path, n, size, tls, sources))
        return 0
    if cmd == "pipeline":
        host, port, path = argv[1], int(argv[2]), argv[3]
        conns, depth, seconds, size = int(argv[4]), int(argv[5]), float(argv[6]), int(argv[7])
        print(json.dumps(asyncio.run(_pipeline(host, port, path, conns, depth, seconds, size))))
        return 0
    if cmd == "slow":
        host, port, writers, readers = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
        _slow(host, port, writers, readers, float(argv[5]), argv[6], argv[7])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
