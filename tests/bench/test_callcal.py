"""System calls per request in the default run, counted in an untimed run
after a cell's repeats (bench/lab.py calibrate_calls): perf's tracepoint slows
every system call, so it is never attached to a timed repeat, yet the cells
the "why" section compares carry syscalls_per_req; and the slow-clients
cell's pieces (the censored p99, the slow client itself)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import kcounters, lab  # noqa: E402

needs_perf = pytest.mark.skipif(not kcounters.works(), reason="perf cannot count raw_syscalls:sys_enter here")


def test_the_counts_go_on_the_cells_timed_records_only():
    recs = [{"exp": "e", "cell": "a", "rep": 1}, {"exp": "e", "cell": "a", "rep": 2},
            {"exp": "e", "cell": "a", "rep": 3, "failed_run": "x"},
            {"exp": "e", "cell": "b", "rep": 1},
            {"exp": "f", "cell": "a", "rep": 1},
            {"exp": "e", "cell": "a", "rep": 4, "syscalls_per_req": 9.0, "ctx_per_req": 1.0}]
    n = lab.apply_call_counts(recs, "e", "a", {"syscalls_per_req": 2.5, "ctx_per_req": 0.4})
    assert n == 2
    assert [r.get("syscalls_per_req") for r in recs] == [2.5, 2.5, None, None, None, 9.0]
    assert recs[0]["calls_from"].startswith("calibration run") and "calls_from" not in recs[5]


def test_a_calibration_run_caps_every_tools_duration(tmp_path):
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=REPO / "spindle", cell_s=2.0,
                 warmup_s=0, cores=[1])
    try:
        assert lb.capped(2.0) == 2.0
        lb.short_s = lab.CALL_CAL_S
        assert lb.capped(2.0) == lab.CALL_CAL_S and lb.capped(0.5) == 0.5
        assert lb.capped(0) == 0           # a count-based tool (ab -n) stays count-based
    finally:
        lb.cleanup()


# -- a real spindle through the cell executor ---------------------------------------------------------------

@pytest.fixture
def a_lab(tmp_path):
    spindle = REPO / "spindle"
    if not spindle.exists():
        pytest.fail("build spindle first (make all)")
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=spindle, cell_s=0.1, warmup_s=0, cores=[1])
    lb.docroot = tmp_path / "www"
    lb.docroot.mkdir()
    (lb.docroot / "hello.txt").write_text("Hello, World!")
    try:
        yield lb
    finally:
        lb.cleanup()


def keepalive_requests(n: int, seen: list):
    """A cell: n keep-alive GETs of /hello.txt on one connection; `seen` gets
    whether perf was counting the server while it ran."""
    def run(lab_, s):
        seen.append(lab_.short_s)
        req = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n"
        with socket.create_connection((lab.HOST, s.port), timeout=10) as c:
            for _ in range(n):
                c.sendall(req)
                data = b""
                while not data.endswith(b"Hello, World!"):
                    chunk = c.recv(4096)
                    assert chunk, "the server closed the connection"
                    data += chunk
        return {"tool": "python", "ok": n, "requests": n}
    return run


@needs_perf
def test_a_count_calls_cell_gets_its_system_calls_from_an_untimed_run(a_lab, monkeypatch):
    started = []
    real = kcounters.PerfCounter.start
    monkeypatch.setattr(kcounters.PerfCounter, "start",
                        classmethod(lambda cls, *a, **k: started.append(time.monotonic()) or real(*a, **k)))
    seen: list = []
    key = lab.server_key("spindle", "epoll")
    # retake=False: a repeat disturbed by the other load on a shared machine would run again
    cells = [lab.Cell("t", "counted", key, {"conc": 1}, keepalive_requests(500, seen), count_calls=True,
                      retake=False),
             lab.Cell("t", "not counted", key, {"conc": 1}, keepalive_requests(50, seen), retake=False)]
    lab.run_cells(a_lab, "t", cells, 2, [], lambda r: "")
    # two timed repeats of each cell without perf, then one calibration run of the marked cell
    assert seen[:4] == [None] * 4 and seen[4:] == [lab.CALL_CAL_S]
    assert len(started) == 1
    counted = [r for r in a_lab.records if r["cell"] == "counted"]
    assert len(counted) == 2
    for r in counted:
        # epoll, one keep-alive request at a time: a receive and a send per request, and an epoll_wait
        # for most (the perf counts cover the server's every thread, the statistics' too)
        assert 1.5 <= r["syscalls_per_req"] <= 6, r["syscalls_per_req"]
        assert r["calls_from"].startswith("calibration run")
        assert r["ctx_per_req"] is not None
    assert all(r.get("syscalls_per_req") is None for r in a_lab.records if r["cell"] == "not counted")
    (cal,) = a_lab.call_calibration
    assert cal["cell"] == "counted" and cal["served"] == 500 and cal["syscalls_per_req"] == counted[0]["syscalls_per_req"]


def test_with_syscalls_every_repeat_is_counted_and_no_calibration_runs(a_lab):
    seen: list = []
    a_lab.syscalls = True
    key = lab.server_key("spindle", "epoll")
    lab.run_cells(a_lab, "t", [lab.Cell("t", "c", key, {"conc": 1}, keepalive_requests(20, seen),
                                        count_calls=True, retake=False)], 1, [], lambda r: "")
    assert seen == [None] and a_lab.call_calibration == []


# -- the slow clients -----------------------------------------------------------------------------------------

def test_the_slow_client_holds_its_connections_until_told_to_stop():
    """bench/client.py slow against a listener that accepts and never answers:
    it reports once the connections are open (after its 1.5 s deadline here: no
    reader ever gets bytes), trickles, and stops when its stdin closes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "bench.client", "slow", "127.0.0.1", str(port), "3", "2", "20",
                          "/a", "/big"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        first = json.loads(p.stdout.readline())
        assert first["writers"] == 3 and first["readers"] == 2 and first["errors"] == 0
        assert first["readers_served"] == 0 and 1.4 <= first["ready_s"] <= 4
        conns = []
        srv.settimeout(2)
        for _ in range(5):
            conns.append(srv.accept()[0])
        time.sleep(0.6)
        heads = [c.recv(4096) for c in conns]
        readers = [h for h in heads if h.startswith(b"GET /big ")]
        writers = [h for h in heads if not h.startswith(b"GET /big ")]
        assert len(readers) == 2 and len(writers) == 3
        # a byte a round, and never the whole head
        assert all(1 <= len(h) < 20 and b"\r\n\r\n" not in h for h in writers), writers
        t0 = time.monotonic()
        p.stdin.close()
        end = json.loads(p.stdout.readline())
        assert time.monotonic() - t0 < 2
        assert end["held_at_end"] == 5 and end["dropped"] == 0
        assert p.wait(5) == 0
    finally:
        if p.poll() is None:
            p.kill()
        srv.close()
