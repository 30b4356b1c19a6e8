"""Live statistics: the shared-memory segment, spindle-stat, /metrics and /status.

Every count is checked exactly, in every model: process models (fork,
prefork) write from many processes into one segment."""
from __future__ import annotations

import json
import re
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import util
from conftest import A_TXT, ERROR_404, RANGE_DATA

STAT_BIN = util.STAT_BIN
stat_json = util.stat_json
wait_stats = util.wait_stats


def shm_path(name) -> Path:
    return Path(f"/dev/shm/spindle-{name}")


@pytest.fixture(scope="module", autouse=True)
def _stat_binary():
    if not STAT_BIN.exists():
        pytest.fail(f"{STAT_BIN} does not exist (run `make`)", pytrace=False)


def _known_mix(srv: util.Server) -> None:
    """7 GET 200, 3 HEAD 200, 2 GET 404, 1 GET 206, 1 GET 304: 14 requests."""
    first = srv.get("/a.txt")
    assert first.status == 200 and first.body == A_TXT
    for _ in range(6):
        assert srv.get("/a.txt").status == 200
    for _ in range(3):
        assert srv.request("HEAD", "/a.txt").status == 200
    for _ in range(2):
        assert srv.get("/no-such-file.txt").status == 404
    r = srv.get("/range.txt", {"Range": "bytes=0-9"})
    assert r.status == 206 and r.body == RANGE_DATA[:10]
    assert srv.get("/a.txt", {"If-None-Match": first.header("ETag")}).status == 304


def test_counts_are_exact(fresh_server):
    srv = fresh_server()
    _known_mix(srv)
    s = wait_stats(srv.port, lambda s: s["requests"] >= 14)
    assert s["requests"] == 14
    assert s["methods"] == {"GET": 11, "HEAD": 3, "other": 0}
    assert s["status_codes"] == {"200": 10, "206": 1, "304": 1, "400": 0, "404": 2, "500": 0}
    assert s["status_classes"] == {"1xx": 0, "2xx": 11, "3xx": 1, "4xx": 2, "5xx": 0}
    assert s["errors"] == 0 and s["send_failures"] == 0
    assert s["bytes_sent"] == 7 * len(A_TXT) + 10 + 2 * len(ERROR_404)  # HEAD and 304: no body
    assert sum(w["requests"] for w in s["workers"]) == 14
    assert sum(b["count"] for b in s["latency_us"]["buckets"]) == 14
    assert s["alive"] is True and s["pid"] == srv.proc.pid
    # every connection is closed by now (the readiness probe's too)
    s = wait_stats(srv.port, lambda s: s["connections_active"] == 0)
    assert s["connections_active"] == 0
    assert s["connections_accepted"] >= 14


def test_counters_survive_a_reload(fresh_server):
    """README: a reload keeps the segment and its counters."""
    srv = fresh_server()
    _known_mix(srv)
    wait_stats(srv.port, lambda s: s["requests"] >= 14)
    segment = os.stat(shm_path(srv.port)).st_ino
    srv.signal(signal.SIGHUP)
    gen2 = util.wait_for(lambda: "generation 2: serving process" in srv.error_log.read_text(), 3)
    assert gen2, f"the reload did not start generation 2\n{srv.diagnostics()}"
    assert srv.get("/a.txt").body == A_TXT  # served by the new generation
    s = wait_stats(srv.port, lambda s: s["requests"] >= 15)
    assert s["requests"] == 15, s["requests"]
    assert s["status_codes"]["200"] == 11 and s["status_codes"]["404"] == 2
    assert os.stat(shm_path(srv.port)).st_ino == segment, "the reload replaced the segment"


class _ListenLines(util.Server):
    """Its addresses are `listen` lines: 127.0.0.1 on the harness's port (its
    readiness check connects there) and a UNIX socket; --bind/--port name
    what a configuration without them would use, 127.0.0.1:8080 here."""

    def __init__(self, model, root, workdir, sock, settings):
        super().__init__(model, root, workdir, settings)
        self.sock = sock

    def argv(self):
        a = super().argv()
        a[a.index("--port") + 1] = "8080"
        return a + ["--set", f"listen=127.0.0.1:{self.port}", "--set", f"listen=unix:{self.sock} mode=0600"]


@pytest.mark.parametrize("mname, workers, threads, head", [
    ("epoll", 1, 16, "epoll model, 1 event loop "),
    ("prefork", 2, 1, "prefork model, 2 processes x 1 thread "),
    ("pool", 1, 1, "pool model, 1 thread "),
    ("thread", 1, 16, "thread model, a thread per connection "),
])
def test_viewer_names_the_listen_addresses_and_prints_whole_counts(mname, workers, threads, head, docroot,
                                                                   tmp_path):
    """The screen's head names every address served (not bind:port, which
    `listen` lines replace), says who serves in the model's own words with
    the right number, and counts are whole numbers, not 3.0; /status agrees."""
    sock = tmp_path / "s.sock"
    srv = _ListenLines(mname, docroot.path, tmp_path / "srv", sock,
                       {"workers": workers, "threads": threads, "stats_name": f"listen{os.getpid()}{mname}",
                        "metrics": "on"})
    srv.start()
    try:
        for _ in range(3):
            assert srv.get("/a.txt").status == 200
        name = srv.settings["stats_name"]
        util.wait_for(lambda: json.loads(subprocess.run(
            [str(STAT_BIN), "--once", "--json", "--name", name], capture_output=True, text=True,
            timeout=10).stdout)["requests"] >= 3, 5)
        r = subprocess.run([str(STAT_BIN), "--once", "--name", name], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert head in lines[0], lines[0]
        assert lines[1] == f"127.0.0.1:{srv.port}, unix:{sock}  root {docroot.path}", lines[1]
        assert "8080" not in r.stdout
        requests = next(ln for ln in lines if ln.strip().startswith("requests "))
        assert re.match(r"^\s*requests\s+3\s+connections", requests), requests
        worker_counts = [ln.split("|")[0].split() for ln in lines[lines.index("  worker   requests") + 1:] if "|" in ln]
        assert sum(int(c[1]) for c in worker_counts) == 3, worker_counts
        out = subprocess.run([str(STAT_BIN), "--once", "--json", "--name", name], capture_output=True,
                             text=True, timeout=10).stdout
        j = json.loads(out)
        assert j["listen"] == f"127.0.0.1:{srv.port}, unix:{sock}", j["listen"]
        # bind and port (127.0.0.1:8080 by default) name no socket here
        assert j["bind"] is None and j["port"] is None and "8080" not in out, out
        page = srv.get("/status").body.decode()  # the status page says the same
        assert f"<th>listening on</th><td>127.0.0.1:{srv.port}, unix:{sock}</td>" in page, page
        assert f"<td>{mname}, {head.split(', ', 1)[1].strip()}</td>" in page, page
    finally:
        assert srv.stop() == 0, srv.diagnostics()


class _PortInFile(util.Server):
    """bind and port come from its configuration file (no --bind/--port),
    so a reload can move the port; stats_name stays auto."""

    def __init__(self, conf: Path, model: str, root: Path, workdir: Path, settings=None):
        super().__init__(model, root, workdir, settings, extra_args=["--config", str(conf)])
        self.conf = conf

    def argv(self) -> list[str]:
        self.write(self.port)
        return util.without_bind_and_port(super().argv())

    def write(self, port: int) -> None:
        self.conf.write_text(f"[server]\nbind = {util.HOST}\nport = {port}\nworkers = 1\n")


def _move_port(srv: _PortInFile) -> int:
    """Reloads srv onto a new port; returns it once generation 2 has taken
    over (the segment is renamed then) and generation 1 is gone. Generation 1
    may finish first: a reload within its start-up grace drains it as soon
    as the grace ends, before generation 2's own ends."""
    new = util.free_port()
    srv.write(new)
    srv.signal(signal.SIGHUP)
    done = util.wait_for(lambda: re.search(r"generation 1 \(pid \d+\) finished", srv.error_log.read_text()) and
                         re.search(r"stats: /dev/shm/spindle-\d+ is now", srv.error_log.read_text()), util.scaled(10))
    assert done, f"the reload did not replace generation 1 and rename the segment\n{srv.diagnostics()}"
    srv.port = new
    return new


@pytest.mark.parametrize("mname", ["epoll", "fork"])
def test_counters_survive_a_reload_that_moves_the_port(mname, docroot, tmp_path):
    """stats_name = auto names the segment after the port; a reload to
    another port renames it, so the counters carry on (as for any reload)
    and spindle-stat --port finds them under the new port, and the old
    port's name is free for an instance that serves there now."""
    srv = _PortInFile(tmp_path / "spindle.conf", mname, docroot.path, tmp_path / "srv")
    srv.start()
    old = srv.port
    other = None
    try:
        _known_mix(srv)
        wait_stats(old, lambda s: s["requests"] >= 14)
        segment = os.stat(shm_path(old)).st_ino
        new = _move_port(srv)
        assert shm_path(new).exists(), f"no segment under the new port\n{srv.diagnostics()}"
        assert srv.get("/a.txt").body == A_TXT
        s = wait_stats(new, lambda s: s["requests"] >= 15)
        assert s["requests"] == 15 and s["status_codes"]["404"] == 2, s
        assert s["instance"] == str(new) and s["listen"] == f"127.0.0.1:{new}", s
        assert os.stat(shm_path(new)).st_ino == segment, "the reload replaced the segment"
        assert not shm_path(old).exists(), "the old port's name outlived the move"
        other = util.Server(mname, docroot.path, tmp_path / "other").start(port=old)
        assert other.get("/a.txt").body == A_TXT
        assert wait_stats(old, lambda s: s["requests"] >= 1)["requests"] == 1  # its own, fresh
    finally:
        if other:
            assert other.stop() == 0, other.diagnostics()
        assert srv.stop() == 0, srv.diagnostics()
    assert not shm_path(new).exists(), "the renamed segment outlived the instance"


def test_reload_to_a_port_whose_name_a_live_instance_holds_keeps_the_old_name(docroot, tmp_path):
    """Two instances may derive one name (auto and the same port on two
    addresses; here the other names itself so): the reload neither takes
    nor removes the live one's segment, it serves on the new port with its
    counters under the old name and says so."""
    srv = _PortInFile(tmp_path / "spindle.conf", "epoll", docroot.path, tmp_path / "srv")
    srv.start()
    old = srv.port
    taken = util.free_port()
    holder = util.Server("epoll", docroot.path, tmp_path / "holder", {"stats_name": str(taken)}).start()
    try:
        holder_segment = os.stat(shm_path(taken)).st_ino
        for _ in range(3):
            assert srv.get("/a.txt").status == 200
        wait_stats(old, lambda s: s["requests"] >= 3)
        srv.write(taken)
        srv.signal(signal.SIGHUP)
        util.wait_for(lambda: "statistics stay under" in srv.error_log.read_text(), util.scaled(10))
        assert f"statistics stay under /dev/shm/spindle-{old}: /spindle-{taken} belongs to a running spindle " \
               f"(pid {holder.proc.pid})" in srv.error_log.read_text(), srv.diagnostics()
        srv.port = taken
        assert srv.get("/a.txt").body == A_TXT
        s = wait_stats(old, lambda s: s["requests"] >= 4)
        assert s["requests"] == 4 and s["pid"] == srv.proc.pid, s
        assert os.stat(shm_path(taken)).st_ino == holder_segment
        assert stat_json(taken)["pid"] == holder.proc.pid
    finally:
        assert holder.stop() == 0, holder.diagnostics()
        assert srv.stop() == 0, srv.diagnostics()
    assert not shm_path(old).exists()


def test_keepalive_reuse_counted(fresh_server):
    srv = fresh_server()
    with srv.connect() as c:
        for _ in range(4):
            c.send(util.build_request("GET", "/a.txt"))
            assert c.read_response().status == 200
    s = wait_stats(srv.port, lambda s: s["requests"] >= 4)
    assert s["requests"] == 4
    assert s["keepalive_reuses"] == 3


def test_two_viewers_at_once(fresh_server):
    srv = fresh_server()
    for _ in range(5):
        srv.get("/a.txt")
    wait_stats(srv.port, lambda s: s["requests"] >= 5)
    live = subprocess.Popen([str(STAT_BIN), "--port", str(srv.port), "--interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        once = [subprocess.Popen([str(STAT_BIN), "--once", "--json", "--port", str(srv.port)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        outs = [p.communicate(timeout=10) for p in once]
        assert all(p.returncode == 0 for p in once), outs
        views = [json.loads(o) for o, _ in outs]
        assert views[0]["requests"] == views[1]["requests"] == 5
        time.sleep(0.4)
        assert live.poll() is None, live.stderr.read()
    finally:
        live.send_signal(signal.SIGINT)
        out, err = live.communicate(timeout=5)
    assert live.returncode == 0, err
    assert b"requests/s" in out and b"latency" in out


def test_viewer_without_instance():
    r = subprocess.run([str(STAT_BIN), "--once", "--port", "1"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    assert "no spindle instance" in r.stderr


def test_segment_removed_on_sigterm(fresh_server):
    srv = fresh_server()
    assert srv.get("/a.txt").status == 200
    assert shm_path(srv.port).exists()
    assert srv.stop() == 0, srv.diagnostics()
    assert not shm_path(srv.port).exists()


def _port_free(port: int) -> bool:
    try:
        with socket.create_connection((util.HOST, port), timeout=0.2):
            return False
    except OSError:
        return True


def test_stale_segment_from_killed_instance_is_reclaimed(model, docroot, tmp_path):
    first = util.Server(model, docroot.path, tmp_path / "first").start()
    port = first.port
    assert first.get("/a.txt").status == 200
    first.kill()  # SIGKILL: no chance to clean up
    assert shm_path(port).exists(), "the killed instance's segment should be left behind"
    assert util.wait_for(lambda: _port_free(port), 10), "orphaned serving processes kept the port"
    second = util.Server(model, docroot.path, tmp_path / "second")
    second.port = port
    second.proc = subprocess.Popen(second.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, cwd=second.workdir)
    try:
        assert util.wait_for(lambda: second.proc.poll() is not None or not _port_free(port), 5)
        second.assert_alive("at start-up over a stale segment ")
        assert second.get("/a.txt").status == 200
        s = wait_stats(port, lambda s: s["requests"] >= 1)
        assert s["pid"] == second.proc.pid and s["requests"] == 1
        assert "reclaiming stale segment" in second.error_log.read_text()
    finally:
        assert second.stop() == 0, second.diagnostics()
    assert not shm_path(port).exists()


def test_live_instance_name_refused(model, fresh_server):
    name = f"pytest-{os.getpid()}-{model}"
    srv = fresh_server(stats_name=name)
    assert shm_path(name).exists()
    r = util.run_spindle("--port", str(util.free_port()), "--model", model, "--root", str(srv.root),
                         "--set", f"stats_name={name}", "--set", "error_log=-")
    assert r.returncode != 0
    assert "in use by a running spindle" in r.stderr
    assert srv.alive() and shm_path(name).exists(), "the refused start must not touch the live segment"
    assert srv.get("/a.txt").status == 200


def _metrics(srv: util.Server) -> tuple[dict, bytes]:
    r = srv.get("/metrics")
    assert r.status == 200, r
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4")
    samples = {}
    for fam in text_string_to_metric_families(r.body.decode()):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, r.body


def test_metrics_agree_with_viewer(fresh_server):
    srv = fresh_server(metrics="on")
    _known_mix(srv)
    wait_stats(srv.port, lambda s: s["requests"] >= 14)
    m, body = _metrics(srv)
    # the /metrics request itself is counted after its body was rendered
    s = wait_stats(srv.port, lambda s: s["requests"] >= 15)

    def val(name, **labels):
        return m[(name, tuple(sorted(labels.items())))]

    assert val("spindle_requests_total", method="GET") == s["methods"]["GET"] - 1 == 11
    assert val("spindle_requests_total", method="HEAD") == s["methods"]["HEAD"] == 3
    for code, n in s["status_codes"].items():
        assert val("spindle_responses_total", code=code) == n - (1 if code == "200" else 0)
    assert val("spindle_bytes_sent_total") == s["bytes_sent"] - len(body)
    assert val("spindle_request_duration_seconds_count") == 14
    assert val("spindle_request_duration_seconds_bucket", le="+Inf") == 14
    assert val("spindle_connections_accepted_total") <= s["connections_accepted"]
    # endpoints answer before the file cache is consulted
    assert val("spindle_cache_hits_total") == s["cache"]["hits"]
    assert val("spindle_cache_misses_total") == s["cache"]["misses"]
    workers = sum(v for (name, _), v in m.items() if name == "spindle_worker_requests_total")
    assert workers == 14
    page = srv.get("/status")
    assert page.status == 200 and b"spindle" in page.body and b"per worker" in page.body


def test_metrics_forbidden_outside_stats_allow(fresh_server):
    srv = fresh_server(metrics="on", stats_allow="10.0.0.0/8 ::1/128")
    for path in ("/metrics", "/status"):
        r = srv.get(path)
        assert r.status == 403, r
        assert b"forbidden" in r.body.lower() and b"spindle_" not in r.body


def test_metrics_off_by_default(server):
    assert server.get("/metrics").status == 404


def test_bad_stats_allow_refused_at_config():
    r = util.run_spindle("--set", "stats_allow=10.0.0.0/33", "--check")
    assert r.returncode == 2
    assert "stats_allow" in r.stderr and "10.0.0.0/33" in r.stderr


def test_cache_hit_and_revalidation(fresh_server, tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    f = root / "f.txt"
    f.write_bytes(b"version one\n")
    srv = fresh_server(root=root, cache_revalidate="200ms")
    # one connection: in the fork model each connection has its own process (and cache)
    with srv.connect() as c:
        for _ in range(2):
            c.send(util.build_request("GET", "/f.txt"))
            assert c.read_response().body == b"version one\n"
        s = wait_stats(srv.port, lambda s: s["requests"] >= 2)
        assert (s["cache"]["hits"], s["cache"]["misses"]) == (1, 1)
        if srv.model != "fork":  # per-connection processes report no cache gauges
            assert s["cache"]["entries"] == 1 and s["cache"]["bytes"] >= len(b"version one\n")
        f.write_bytes(b"version two, longer\n")
        time.sleep(0.3)
        c.send(util.build_request("GET", "/f.txt"))
        assert c.read_response().body == b"version two, longer\n"
        s = wait_stats(srv.port, lambda s: s["requests"] >= 3)
        assert (s["cache"]["hits"], s["cache"]["misses"]) == (1, 2)


# --------------------------------------------------------------------------
# Cache gauges across overlapping drains
# --------------------------------------------------------------------------

def _wait_log(srv: util.Server, pattern: str, timeout: float):
    rx = re.compile(pattern)
    return util.wait_for(lambda: rx.search(srv.error_log.read_text(errors="replace")), timeout)


@pytest.mark.concurrent
def test_cache_gauges_when_a_generation_drains_across_two_reloads(model, fresh_server, huge_docroot):
    """Generation 1 drains a slow download through two reloads; generation 3
    then shares no gauges with it, and when generation 1 finally ends its
    cache's gauges go, not generation 3's."""
    if model == "fork":
        pytest.skip("fork: a per-connection process's cache dies with it; no gauges to keep")
    small = huge_docroot.path / "gauge.txt"
    if not small.exists():
        small.write_bytes(b"g" * 2000)
    srv = fresh_server(root=huge_docroot.path, drain_timeout=60, keepalive_timeout=1)
    with srv.connect(timeout=30, rcvbuf=16384) as slow:
        slow.send(util.build_request("GET", "/huge.bin"))
        assert slow.read_head(time.monotonic() + util.scaled(5)).startswith(b"HTTP/1.1 200 ")
        assert srv.get("/gauge.txt", headers={"Connection": "close"}).status == 200
        srv.signal(signal.SIGHUP)
        assert _wait_log(srv, r"generation 2: serving process \d+", util.scaled(5)), srv.diagnostics()
        assert srv.get("/gauge.txt", headers={"Connection": "close"}).status == 200
        srv.signal(signal.SIGHUP)
        assert _wait_log(srv, r"generation 3: serving process \d+", util.scaled(5)), srv.diagnostics()
        assert _wait_log(srv, r"generation 2 \(pid \d+\) finished", util.scaled(10)), srv.diagnostics()
        assert srv.get("/gauge.txt", headers={"Connection": "close"}).status == 200
        s = wait_stats(srv.port, lambda s: s["cache"]["entries"] >= 2)
        assert s["cache"]["entries"] >= 2, f"generations 1 and 3 each cache gauge.txt: {s['cache']}"
    # the slow client is gone: generation 1 ends
    assert _wait_log(srv, r"generation 1 \(pid \d+\) finished", util.scaled(15)), srv.diagnostics()
    s = stat_json(srv.port)
    assert s["generation"] >= 3
    assert s["cache"]["entries"] >= 1 and s["cache"]["bytes"] >= 2000, \
        f"generation 3 still caches gauge.txt, but its gauges read {s['cache']}"


# --------------------------------------------------------------------------
# A hostile or corrupted segment
# --------------------------------------------------------------------------

# struct stats_header offsets (src/stats/shm.h)
OFF_LAYOUT, OFF_NSLOTS, OFF_NCACHES, OFF_SLOT_SIZE = 16, 68, 72, 76
OFF_CACHES, OFF_SLOTS, OFF_PORT = 80, 88, 96
OFF_NAME, OFF_MODEL, OFF_VERSION, OFF_BIND, OFF_ROOT, OFF_LISTEN = 112, 176, 208, 224, 288, 800
REAL_SLOTS_OFF = 3392 + 1024 * 64  # the header (with its site names), rounded to 64, then the cache blocks


@pytest.fixture(scope="module")
def real_segment(tmp_path_factory, docroot) -> bytes:
    """The bytes of a real segment, left by an instance that has stopped."""
    name = f"seg{os.getpid()}"
    srv = util.Server("iterative", docroot.path, tmp_path_factory.mktemp("segsrc"),
                      {"stats_name": name}).start()
    try:
        assert srv.get("/a.txt").status == 200
        data = shm_path(name).read_bytes()
    finally:
        assert srv.stop() == 0, srv.diagnostics()
    assert struct.unpack_from("<i", data, OFF_PORT)[0] == srv.port  # the offsets above are right
    assert struct.unpack_from("<Q", data, OFF_SLOTS)[0] == REAL_SLOTS_OFF
    assert data[OFF_LISTEN:].startswith(f"127.0.0.1:{srv.port}\0".encode())
    return data


def _run_stat_on(name: str, data: bytes, *args: str) -> subprocess.CompletedProcess:
    p = shm_path(name)
    p.write_bytes(data)
    try:
        return subprocess.run([str(STAT_BIN), "--name", name, "--once", *args], capture_output=True,
                              timeout=10)
    finally:
        p.unlink(missing_ok=True)


def _patched(data: bytes, *edits: tuple[str, int, object]) -> bytes:
    b = bytearray(data)
    for fmt, off, val in edits:
        if isinstance(val, bytes):
            b[off:off + len(val)] = val
        else:
            struct.pack_into(fmt, b, off, val)
    return bytes(b)


CORRUPTIONS = {
    "slots_off_wraps": [("<Q", OFF_SLOTS, 2**64 - 64)],
    "caches_off_wraps": [("<Q", OFF_CACHES, 2**64 - 64 * 8)],
    "slots_past_the_end": [("<Q", OFF_SLOTS, 2**40)],
    "huge_slot_size": [("<I", OFF_SLOT_SIZE, 2**32 - 64)],
    "slots_off_misaligned": [("<Q", OFF_SLOTS, REAL_SLOTS_OFF + 8)],
    "caches_over_header": [("<Q", OFF_CACHES, 0)],
    "layout_beyond_file": [("<Q", OFF_LAYOUT, 2**63)],
    "too_many_caches": [("<I", OFF_NCACHES, 2**32 - 1)],
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_viewer_reports_a_corrupted_segment(real_segment, case):
    name = f"bad{os.getpid()}"
    for args in (["--json"], []):
        r = _run_stat_on(name, _patched(real_segment, *CORRUPTIONS[case]), *args)
        assert r.returncode == 1, f"{case} {args}: exit {r.returncode} (a crash is negative)\n{r.stderr!r}"
        assert b"inconsistent" in r.stderr, r.stderr
        assert r.stdout == b""


def test_viewer_reports_a_truncated_segment(real_segment):
    r = _run_stat_on(f"short{os.getpid()}", real_segment[:4096], "--json")
    assert r.returncode == 1 and r.stderr, (r.returncode, r.stderr)


def test_viewer_escapes_the_segment_strings(real_segment):
    """Strings come from the segment, which a writer could fill with terminal
    escapes, quotes, and no terminating NUL at all."""
    evil = b"\x1b[2J\x1b]0;owned\x07\"\\\n\r\x7f"
    data = _patched(real_segment,
                    ("", OFF_NAME, (evil * 8)[:64]),        # no NUL: runs into model
                    ("", OFF_MODEL, (b"m\x1b" * 16)[:32]),
                    ("", OFF_VERSION, b"v" * 16),
                    ("", OFF_BIND, evil + b"\0"),
                    ("", OFF_ROOT, b"/r\xff\xfe\x01" * 100 + b"\0" * 12),
                    ("", OFF_LISTEN, (evil * 64)[:512]))   # no NUL: runs into the padding
    r = _run_stat_on(f"esc{os.getpid()}", data, "--json")
    assert r.returncode == 0, r.stderr
    assert not any(c < 0x20 and c != 0x0a for c in r.stdout), r.stdout[:400]
    assert 0x7f not in r.stdout
    doc = json.loads(r.stdout)
    assert doc["instance"] == (evil * 8)[:64].decode("latin-1")
    assert doc["bind"] == evil.decode("latin-1")
    assert doc["model"] == ("m\x1b" * 16)[:32]
    assert doc["version"] == "v" * 16
    assert doc["listen"] == (evil * 64)[:512].decode("latin-1")
    r = _run_stat_on(f"esc{os.getpid()}", data)  # the screen view
    assert r.returncode == 0, r.stderr
    assert not any(c < 0x20 and c != 0x0a for c in r.stdout), r.stdout[:400]
    assert b"\\x1b" in r.stdout


OFF_PID, OFF_STARTTIME = 24, 32


def _claiming_live_owner(data: bytes) -> bytes:
    """A segment whose header names a running process (this test) as its
    creator: believed, it would keep spindle from starting."""
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return _patched(data, ("<i", OFF_PID, os.getpid()), ("<Q", OFF_STARTTIME, start))


HOSTILE = {
    # (mode, how the bytes are made)
    "world_writable": (0o666, lambda d: _claiming_live_owner(d)),
    "wrong_size": (0o600, lambda d: _claiming_live_owner(d) + b"\0" * 4096),
    "garbage": (0o600, lambda d: os.urandom(len(d))),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_precreated_doubtful_segment_is_reclaimed(model, fresh_server, real_segment, case):
    name = f"hostile{os.getpid()}{case[:3]}"
    mode, make = HOSTILE[case]
    p = shm_path(name)
    p.write_bytes(make(real_segment))
    os.chmod(p, mode)
    try:
        srv = fresh_server(stats_name=name)
        assert srv.get("/a.txt").status == 200
        st = p.stat()
        assert st.st_uid == os.geteuid() and (st.st_mode & 0o777) == 0o640, oct(st.st_mode)
        assert "reclaiming /dev/shm/spindle-" + name in srv.error_log.read_text()
        r = subprocess.run([str(STAT_BIN), "--once", "--json", "--name", name], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["pid"] == srv.proc.pid
        assert srv.stop() == 0, srv.diagnostics()
        assert not p.exists(), "the reclaimed segment is ours now and goes with us"
    finally:
        p.unlink(missing_ok=True)


def test_precreated_segment_of_another_user_is_refused_not_trusted(model, fresh_server, real_segment):
    if os.geteuid() != 0:
        pytest.skip("making a segment owned by another user needs root")
    name = f"foreign{os.getpid()}"
    p = shm_path(name)
    data = _claiming_live_owner(real_segment)
    p.write_bytes(data)
    os.chmod(p, 0o644)
    os.chown(p, 54321, 54321)
    try:
        srv = fresh_server(stats_name=name)  # starts: the claim of a live owner is not believed
        assert srv.get("/a.txt").status == 200
        log = srv.error_log.read_text()
        assert f"/dev/shm/spindle-{name} belongs to uid 54321" in log, log[-2000:]
        st = p.stat()
        assert st.st_uid == 54321 and p.read_bytes() == data, "someone else's segment was touched"
        assert srv.stop() == 0
        assert p.exists() and p.stat().st_uid == 54321
    finally:
        p.unlink(missing_ok=True)


def test_viewer_survives_the_segment_shrinking_under_it(real_segment):
    """The live view maps the segment; whoever can write it can also truncate
    it, and the next copy then faults (SIGBUS): reported, not a crash."""
    name = f"shrink{os.getpid()}"
    p = shm_path(name)
    p.write_bytes(_claiming_live_owner(real_segment))  # else the view ends: "has stopped"
    try:
        viewer = subprocess.Popen([str(STAT_BIN), "--name", name, "--interval", "0.05"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)
        os.truncate(p, 4096)
        try:
            out, _err = viewer.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            viewer.kill()
            viewer.communicate()
            pytest.fail("spindle-stat kept running on a truncated segment")
        assert viewer.returncode == 1, f"exit {viewer.returncode} (a crash is negative)"
        assert b"shrank" in out, out[-500:]
    finally:
        p.unlink(missing_ok=True)


def test_endpoints_survive_a_scribbled_segment(model, fresh_server):
    """Anyone running as the server's user can write its segment: /metrics and
    /status must not believe its layout (a slot count or offset past the
    mapping made them read out of bounds) nor print its strings into HTML
    unescaped, and new connections must not take their slot from it (a slot
    count of 0 divided by zero). The server answers and keeps serving."""
    srv = fresh_server(metrics="on")
    assert srv.get("/a.txt").status == 200
    seg = shm_path(srv.port)
    evil = b"<script>alert(1)</script>"
    with open(seg, "r+b") as f:
        for fmt, off, val in ((("<I", OFF_NSLOTS, 0),)):
            f.seek(off)
            f.write(struct.pack(fmt, val))
    for _ in range(4):  # new connections (a thread or process each, in some models)
        assert srv.get("/a.txt").status == 200
    with open(seg, "r+b") as f:
        for fmt, off, val in (("<I", OFF_NSLOTS, 2**32 - 1), ("<Q", OFF_SLOTS, 2**40),
                              ("<I", OFF_SLOT_SIZE, 2**31), ("<I", OFF_NCACHES, 2**32 - 1),
                              ("<Q", OFF_CACHES, 2**44)):
            f.seek(off)
            f.write(struct.pack(fmt, val))
        f.seek(OFF_NAME)
        f.write((evil * 30)[:OFF_BIND - OFF_NAME])  # name, model, version: no NUL
    for path in ("/metrics", "/status", "/metrics"):
        r = srv.get(path)
        assert r.status in (200, 500), r
        assert b"<script>" not in r.body
    for _ in range(4):
        assert srv.get("/a.txt").status == 200
    assert srv.proc.poll() is None


_INTERESTING = (0, 1, 63, 64, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 64, 2**64 - 1)


def _fuzzed(data: bytes, rng) -> bytes:
    """A few header words set to boundary or random values, slot counters
    maxed out, now and then a truncation."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        size = rng.choice((4, 8))
        off = rng.randrange(8, 112, size)  # past the magic and version, to reach the parser's checks
        val = rng.choice(_INTERESTING) if rng.random() < 0.7 else rng.getrandbits(64)
        b[off:off + size] = (val % 2**(8 * size)).to_bytes(size, "little")
    if rng.random() < 0.5:  # huge counts: sums wrap, percentiles of 2^64 requests
        start = REAL_SLOTS_OFF + rng.randrange(0, 4) * 448
        b[start:start + 448] = b"\xff" * 448
    if rng.random() < 0.3:
        b[OFF_NAME:OFF_BIND] = bytes(rng.getrandbits(8) for _ in range(OFF_BIND - OFF_NAME))
    if rng.random() < 0.15:
        del b[rng.randrange(0, len(b)):]
    return bytes(b)


def test_viewer_fuzzed_segments(real_segment):
    """Random corruptions of a real segment, bounded in count and time: the
    viewer reports (exit 1) or shows (exit 0), never crashes, hangs or prints
    a control character."""
    import random
    rng = random.Random(20261122)
    name = f"fuzz{os.getpid()}"
    deadline = time.monotonic() + util.scaled(40)
    runs, exits = 0, {0: 0, 1: 0}
    for i in range(200):
        if time.monotonic() > deadline:
            break
        data = _fuzzed(real_segment, rng)
        for args in (["--json"], []):
            r = _run_stat_on(name, data, *args)
            assert r.returncode in (0, 1), f"case {i} {args}: exit {r.returncode}\n{r.stderr[-300:]!r}"
            assert not any(c < 0x20 and c != 0x0a for c in r.stdout), (i, r.stdout[:300])
            if r.returncode == 0 and args:
                json.loads(r.stdout)
            exits[r.returncode] += 1
        runs += 1
    assert runs >= 20, f"only {runs} fuzz cases ran before the time bound"
    assert exits[0] and exits[1], f"every case ended alike ({exits}): the corruptions test nothing"
    print(f"{runs} cases, exits {exits}")


SPECIAL = ("symlink_to_a_file", "dangling_symlink", "symlink_of_another_user", "fifo", "directory")


@pytest.mark.parametrize("case", SPECIAL)
def test_special_entry_at_the_segment_name(model, fresh_server, tmp_path, case):
    """What a local user can leave at /dev/shm/spindle-NAME before the server
    starts: no symlink is followed (the file it names is neither truncated
    nor mapped), a FIFO does not block the start, and the server serves
    either way: with the name reclaimed, or with private statistics."""
    name = f"sp{os.getpid()}{case[:4]}"
    p = shm_path(name)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    if case == "symlink_to_a_file":
        p.symlink_to(victim)
    elif case == "dangling_symlink":
        p.symlink_to(tmp_path / "nothing-yet")
    elif case == "symlink_of_another_user":
        if os.geteuid() != 0:
            pytest.skip("a symlink owned by another user needs root")
        p.symlink_to(victim)
        os.lchown(p, 54321, 54321)
    elif case == "fifo":
        os.mkfifo(p, 0o600)
    else:
        p.mkdir()
    try:
        t0 = time.monotonic()
        srv = fresh_server(stats_name=name, metrics="on")
        assert time.monotonic() - t0 < util.scaled(8)
        assert srv.get("/a.txt").status == 200
        assert srv.get("/metrics").status == 200  # private statistics at least
        assert victim.read_bytes() == b"precious"
        assert not (tmp_path / "nothing-yet").exists(), "the dangling symlink was followed"
        if case in ("symlink_to_a_file", "dangling_symlink", "fifo"):  # ours: reclaimed
            st = p.lstat()
            assert not p.is_symlink() and p.is_file() and st.st_uid == os.geteuid(), case
            assert (st.st_mode & 0o777) == 0o640
        else:  # not ours to remove: left as it was
            assert p.is_symlink() or p.is_dir()
        assert srv.stop() == 0
    finally:
        if p.is_dir() and not p.is_symlink():
            p.rmdir()
        else:
            p.unlink(missing_ok=True)


@pytest.mark.expect_restart
@pytest.mark.parametrize("size", (4096, 0))
def test_serving_resumes_after_the_segment_is_truncated(model, fresh_server, size):
    """Any process of the server's user can truncate its segment: the serving
    processes then die of SIGBUS at their next count, and used to die again
    at every restart, for good. The segment is grown back (its lost counters
    start from zero) and the server serves again."""
    srv = fresh_server(metrics="on")
    assert srv.get("/a.txt").status == 200
    os.truncate(shm_path(srv.port), size)

    def serves():
        try:
            return srv.get("/a.txt", timeout=2).status == 200
        except (OSError, AssertionError):
            return False

    assert util.wait_for(serves, util.scaled(10), interval=0.2), \
        f"not serving after the segment was truncated to {size} bytes\n{srv.diagnostics()}"
    for _ in range(5):  # and keeps serving, counting, reporting
        assert srv.get("/a.txt").status == 200
    assert srv.get("/metrics").status == 200
    assert shm_path(srv.port).stat().st_size > size
    # The process that grew it back logs it at its next look at the segment
    # (a /metrics read, or a thread starting); with several workers, the one
    # whose write faulted may not be the one that answered so far. A fork
    # child that grew it back in its SIGBUS handler is gone before any look,
    # and with the header intact nobody else has anything to report.
    if model == "fork" and size > 0:
        return

    def logged():
        srv.get("/metrics")
        return "truncated" in srv.error_log.read_text()
    assert util.wait_for(logged, util.scaled(5), interval=0.05), srv.error_log.read_text()
    assert srv.proc.poll() is None
