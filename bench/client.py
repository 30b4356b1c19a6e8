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
  hold HOST PORT PATH SIZE SCHEME N SOURCES PROBES LIMIT_S
                                      the scale experiment's idle connections,
                                      in one process (non-blocking sockets and
                                      epoll, TLS with "https"): prints a line
                                      once set up (after a few warm-up
                                      requests), then follows the lab's
                                      commands on stdin, one line each: "open"
                                      opens N keep-alive connections (from
                                      SOURCES loopback addresses 127.0.0.1, ...
                                      in turn) with one request each and
                                      holds them; "probe" times PROBES requests
                                      of a fresh client (one at a time, each
                                      on a new connection, connect() to the
                                      last body byte) while they are held;
                                      "close" (or the end of stdin) closes
                                      every connection. A JSON line answers
                                      each; after LIMIT_S it closes
                                      everything and exits by itself
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
import contextlib
import json
import os
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


HOLD_INFLIGHT = 64      # connections being opened at once: far below any listen backlog of the lab's servers
HOLD_WARM = 20          # fresh requests before the baseline: the server's lazily made state exists by then
HOLD_CONN_TIMEOUT_S = 30.0
IP_BIND_ADDRESS_NO_PORT = 24    # <linux/in.h>: a source port chosen at connect(), per destination


def _response_done(buf: bytes) -> tuple[int, int] | None:
    """(status, body length) once buf holds a whole response, else None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].split(b"\r\n")
    length = 0
    for ln in lines[1:]:
        if ln.lower().startswith(b"content-length:"):
            length = int(ln.split(b":", 1)[1])
    if len(buf) < end + 4 + length:
        return None
    return int(lines[0].split()[1]), length


def _percentile(ts: list[float], q: float) -> float:
    return ts[min(len(ts) - 1, max(0, int(q * len(ts) + 0.999999) - 1))]


def _hold(host, port, path, size, tls, n, sources, probes, limit_s):
    """Idle keep-alive connections for the scale experiment (see the module's
    first comment): one thread, non-blocking sockets on one epoll, so that
    opening and holding 15,000 of them costs the client little and the
    server's figures are the server's."""
    import errno
    import select
    import socket
    deadline = time.monotonic() + limit_s
    ctx = None
    ssl = None
    if tls:
        import ssl
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE       # the lab's certificate is self-signed, made for the run
        ctx.set_alpn_protocols(["http/1.1"])
    req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    ep = select.epoll()
    held: dict[int, object] = {}          # fd -> socket, each after its one request
    closed_by_server = 0

    def say(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    def fresh_request(timeout: float) -> float:
        """One request on a new connection, closed after its answer: seconds
        from connect() to the last body byte."""
        t0 = time.perf_counter()
        s = socket.create_connection((host, port), timeout=timeout)
        try:
            if ctx is not None:
                s = ctx.wrap_socket(s, server_hostname="localhost")
            s.sendall(req)
            buf = b""
            while (done := _response_done(buf)) is None:
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError(f"closed after {len(buf)} bytes")
                buf += chunk
        finally:
            s.close()
        if done != (200, size):
            raise ValueError(f"status {done[0]}, {done[1]} bytes (want 200, {size})")
        return time.perf_counter() - t0

    def held_event(fd: int, ev: int) -> None:
        """A held connection woke: the server closed it (counted, closed here),
        or a TLS record with no data arrived (a session ticket)."""
        nonlocal closed_by_server
        s = held[fd]
        gone = bool(ev & (select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR))
        if not gone:
            try:
                gone = not s.recv(4096)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                gone = not (ssl is not None and isinstance(e, ssl.SSLWantReadError))
        if gone:
            ep.unregister(fd)
            s.close()
            del held[fd]
            closed_by_server += 1

    def reap_held() -> None:
        for fd, ev in ep.poll(0):
            if fd in held:
                held_event(fd, ev)

    def open_all() -> dict:
        active: dict[int, list] = {}      # fd -> [socket, state, bytes read, started]
        errors: list[str] = []
        last = 0.0
        t0 = time.perf_counter()
        nxt = 0

        def fail(fd: int, why: str) -> None:
            c = active.pop(fd)
            with contextlib.suppress(OSError, ValueError):
                ep.unregister(fd)
            c[0].close()
            errors.append(why)

        def advance(fd: int) -> None:
            nonlocal last
            c = active[fd]
            s, state = c[0], c[1]
            if state == "connect":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    return fail(fd, f"connect: {os.strerror(err)}")
                if ctx is not None:
                    s = c[0] = ctx.wrap_socket(s, server_hostname="localhost", do_handshake_on_connect=False)
                    state = c[1] = "handshake"
                else:
                    state = c[1] = "send"
            if state == "handshake":
                try:
                    s.do_handshake()
                except ssl.SSLWantReadError:
                    ep.modify(fd, select.EPOLLIN)
                    return
                except ssl.SSLWantWriteError:
                    ep.modify(fd, select.EPOLLOUT)
                    return
                state = c[1] = "send"
            if state == "send":
                s.send(req)                   # 60 bytes into an empty socket buffer: never short
                state = c[1] = "read"
                ep.modify(fd, select.EPOLLIN)
            while True:                       # "read"
                try:
                    chunk = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as e:
                    if ssl is not None and isinstance(e, ssl.SSLWantReadError):
                        return
                    raise
                if not chunk:
                    return fail(fd, f"closed after {len(c[2])} bytes")
                c[2] += chunk
                done = _response_done(c[2])
                if done is not None:
                    break
            if done != (200, size):
                return fail(fd, f"status {done[0]}, {done[1]} bytes (want 200, {size})")
            del active[fd]
            held[fd] = s
            ep.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)   # only a close by the server wakes it
            last = time.monotonic()

        while (nxt < n or active) and time.monotonic() < deadline:
            while nxt < n and len(active) < HOLD_INFLIGHT:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                if sources > 1:       # each source address has its own ephemeral ports
                    s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                    s.bind((f"127.0.0.{1 + nxt % sources}", 0))
                nxt += 1
                err = s.connect_ex((host, port))
                if err not in (0, errno.EINPROGRESS):
                    s.close()
                    errors.append(f"connect: {os.strerror(err)}")
                    continue
                active[s.fileno()] = [s, "connect", b"", time.monotonic()]
                ep.register(s.fileno(), select.EPOLLOUT)
            for fd, ev in ep.poll(0.2):
                if fd in active:
                    try:
                        advance(fd)
                    except (OSError, ValueError) as e:
                        fail(fd, f"{type(e).__name__}: {e}")
                elif fd in held:
                    held_event(fd, ev)
            now = time.monotonic()
            for fd in [fd for fd, c in active.items() if now - c[3] > HOLD_CONN_TIMEOUT_S]:
                fail(fd, f"no answer within {HOLD_CONN_TIMEOUT_S:g} s")
        for fd in list(active):
            fail(fd, "the client's time limit passed")
        time.sleep(0.2)       # a server that closes what it was just asked on shows it now
        reap_held()
        return {"opened": len(held) + closed_by_server, "open": len(held), "errors": len(errors),
                "error_samples": errors[:5], "setup_s": time.perf_counter() - t0, "last_response_mono": last,
                "closed_by_server": closed_by_server}

    def probe() -> dict:
        lat, errors = [], []
        for i in range(probes):
            if time.monotonic() > deadline:
                errors.append("the client's time limit passed")
                break
            try:
                lat.append(fresh_request(5.0))
            except (OSError, ValueError) as e:
                errors.append(f"probe {i}: {type(e).__name__}: {e}")
        reap_held()
        out = {"probe_ok": len(lat), "probe_errors": len(errors), "probe_error_samples": errors[:5],
               "open": len(held), "closed_by_server": closed_by_server}
        if lat:
            ts = sorted(lat)
            out.update(p50_ms=_percentile(ts, 0.5) * 1e3, p99_ms=_percentile(ts, 0.99) * 1e3,
                       mean_ms=statistics.mean(ts) * 1e3, max_ms=ts[-1] * 1e3, lat_ms=[round(t * 1e3, 3) for t in ts])
        return out

    warm_errors = []
    for i in range(HOLD_WARM):
        try:
            fresh_request(5.0)
        except (OSError, ValueError) as e:
            warm_errors.append(f"warm-up {i}: {type(e).__name__}: {e}")
    say({"ready": True, "warm_errors": len(warm_errors), "warm_error_samples": warm_errors[:3]})
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([sys.stdin], [], [], min(1.0, max(0.0, deadline - time.monotonic())))
            if not r:
                continue
            cmd = sys.stdin.readline().strip()
            if cmd == "open":
                say(open_all())
            elif cmd == "probe":
                say(probe())
            else:             # "close", or the end of stdin
                break
    finally:
        reap_held()
        at_end = len(held)
        for s in held.values():
            s.close()
        ep.close()
        say({"open_at_end": at_end, "closed_by_server": closed_by_server})


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
    if cmd == "hold":
        host, port, path, size = argv[1], int(argv[2]), argv[3], int(argv[4])
        _hold(host, port, path, size, argv[5] == "https", int(argv[6]), int(argv[7]), int(argv[8]),
              float(argv[9]))
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
