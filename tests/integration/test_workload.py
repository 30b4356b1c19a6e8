"""Seed 002's workload endpoint (GET /work?delay=N&bucket=B): exact shared
counts under every model (fork and prefork included), CPU delay, validation,
and that it does not exist when off."""
from __future__ import annotations

import threading
import time

import pytest

import util

ON = {"workload": "on", "work_unit": "1ms", "buckets": "16"}
K = 8    # concurrent clients
M = 25   # requests each


def _hammer(server, bucket: int, keep_alive: bool) -> list[int]:
    """K threads x M requests to one bucket; returns every value answered."""
    values: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(K)

    def client(i: int):
        try:
            start.wait(10)
            got = []
            # Half the clients reuse one connection, half open one per request,
            # so both the keep-alive and the accept paths are exercised.
            reuse = keep_alive and i % 2 == 0
            conn = server.connect(timeout=20) if reuse else None
            for _ in range(M):
                if reuse:
                    conn.send(util.build_request("GET", f"/work?delay=0&bucket={bucket}"))
                    r = conn.read_response(timeout=20)
                else:
                    r = server.get(f"/work?delay=0&bucket={bucket}",
                                   headers={"Connection": "close"}, timeout=20)
                if r.status != 200:
                    raise AssertionError(f"status {r.status}: {r.body!r}")
                assert r.header("Content-Type").startswith("text/plain"), r
                got.append(int(r.body))
            if conn:
                conn.close()
            with lock:
                values.extend(got)
        except Exception as e:  # reported below, with the thread's number
            with lock:
                errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(K)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, "\n".join(errors)
    return values


@pytest.mark.parametrize("lock", ["bucket", "global"])
def test_no_lost_updates(servers, model, lock):
    server = servers(**ON, bucket_lock=lock)
    bucket = 3 if lock == "bucket" else 4
    values = _hammer(server, bucket, keep_alive=True)
    assert len(values) == K * M
    # Every increment is seen exactly once: the answers are 1..K*M.
    assert sorted(values) == list(range(1, K * M + 1)), \
        f"lost or duplicated updates: max {max(values)}, {len(set(values))} distinct"
    # The count persists and other buckets are untouched.
    assert int(server.get(f"/work?delay=0&bucket={bucket}").body) == K * M + 1
    assert int(server.get("/work?delay=0&bucket=9").body) == 1


def test_no_lost_updates_new_connections(servers, model):
    """Every request on its own connection: under fork, each is a new process."""
    server = servers(**ON)
    values = _hammer(server, 5, keep_alive=False)
    assert sorted(values) == list(range(1, K * M + 1))


def test_delay_is_busy_work(servers, model):
    """delay=N spins for N work units in the server (not a sleep), judged from
    /proc, not from the client's wall clock: while the request runs, a thread
    of the server is running or runnable (R, even while it waits for a core on
    a loaded machine) in nearly every sample, and the instance spends CPU."""
    server = servers(**ON)
    assert server.get("/work?delay=0&bucket=1").status == 200  # warm up the path
    time.sleep(0.2)
    idle_busy = 0
    for _ in range(10):  # the baseline: an idle server shows no R thread (mostly)
        idle_busy += util.instance_running_threads(server) > 0
        time.sleep(0.02)
    cpu_before = util.instance_cpu_seconds(server)
    result = {}

    def request():
        try:
            result["r"] = server.get("/work?delay=1000&bucket=1", timeout=util.scaled(20))
        except Exception as e:  # reported below
            result["e"] = e
    t = threading.Thread(target=request)
    t0 = time.monotonic()
    t.start()
    samples, busy = 0, 0
    time.sleep(0.1)
    while t.is_alive() and time.monotonic() - t0 < 0.9 and samples < 100:
        samples += 1
        busy += util.instance_running_threads(server) > 0
        time.sleep(0.02)
    t.join(util.scaled(20))
    assert "e" not in result, result.get("e")
    assert result["r"].status == 200
    assert time.monotonic() - t0 >= 1.0, "delay=1000 x 1ms answered in under a second"
    assert idle_busy <= 3, f"the idle server had a running thread in {idle_busy} of 10 samples"
    assert samples >= 10 and busy >= 0.8 * samples, \
        f"a server thread was running in only {busy} of {samples} samples: not busy work"

    def spent():  # fork: the child's time reaches its parent once reaped
        return util.instance_cpu_seconds(server) - cpu_before >= 0.03
    assert util.wait_for(spent, 3), "the delay cost the server no CPU time"


@pytest.mark.parametrize("query", [
    "",                         # no query at all
    "delay=1",                  # missing bucket
    "bucket=1",                 # missing delay
    "delay=&bucket=1",          # empty value
    "delay=abc&bucket=1",
    "delay=-1&bucket=1",
    "delay=1&bucket=1x",
    "delay=1.5&bucket=1",
    "delay=1&bucket=16",        # out of range (buckets = 16)
    "delay=1&bucket=99999999999",
    "delay=1&delay=2&bucket=1",  # repeated key
    "delay=100000&bucket=1",    # 100 s of work: beyond the bound
])
def test_invalid_parameters(servers, model, query):
    server = servers(**ON)
    r = server.get("/work?" + query if query else "/work")
    assert r.status == 400, r
    assert r.header("Content-Type").startswith("text/plain")
    assert b"workload" in r.body and len(r.body) < 200
    # a 400 from the endpoint does not poison the connection or the server
    assert server.get("/work?delay=0&bucket=2").status == 200


def test_parameter_order_and_extra_keys(servers, model):
    server = servers(**ON)
    a = int(server.get("/work?bucket=6&delay=0").body)
    b = int(server.get("/work?delay=0&nonce=xyz&bucket=6").body)
    assert b == a + 1


def test_other_paths_still_files(servers, model, docroot):
    server = servers(**ON)
    r = server.get("/a.txt")
    assert r.status == 200 and r.body == docroot.files["a.txt"]
    assert server.get("/work/").status == 404
    assert server.get("/workx?delay=0&bucket=1").status == 404


def test_off_is_just_a_path(server):
    """Off by default: /work is looked up as a file, and there is none."""
    r = server.get("/work?delay=0&bucket=1")
    assert r.status == 404
