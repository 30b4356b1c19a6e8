"""The overload experiment (past the knee) without load: the generator's
goodput fields, the offered rates from a measured capacity, the report's
table, words and plots from hand-made records, the "which model wins" row,
the claim that a policy costs nothing when not overloaded, and the
generator itself against a scripted server (200s on time, 200s late, 503s)."""
from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import claims, experiments, openloop, report, stats, why  # noqa: E402

# one openloop line as tools/openloop prints it, past the knee: 3,000 due in 2 s
SAMPLE = {"arrivals": "poisson", "rate": 1500, "seconds": 2, "scheduled": 3000, "sent": 2990, "completed": 2900,
          "ok": 1000, "errors": 2000, "timeouts": 90, "non200": 1900, "connect_errors": 10,
          "achieved_rate": 500.0, "sent_rate": 1495.0, "wall_s": 3.1, "connections": 1000, "mean_ms": 400.0,
          "p50_ms": 2.0, "p90_ms": 900.0, "p99_ms": 1800.0, "p999_ms": 1950.0, "max_ms": 1999.0,
          "send_lag_mean_ms": 0.01, "send_lag_max_ms": 0.2, "gen_cpu_s": 0.1, "gen_user_s": 0.05,
          "gen_sys_s": 0.05, "deadline_ms": 1000, "good": 800, "good_rate": 400.0, "status_503": 1800,
          "ok_p50_ms": 300.0, "ok_p99_ms": 1500.0, "good_in_window": 700}


def test_goodput_fields_count_200s_within_the_deadline_and_refusals_per_second():
    m = openloop.parse("openloop starting\n" + json.dumps(SAMPLE) + "\n")
    f = openloop.goodput_fields(m)
    assert f["goodput_rate"] == 350.0                     # 700 of the 800 good 200s before the schedule ended
    assert f["good_tail_rate"] == 50.0                    # the other 100, in the tail after it
    assert f["late_rate"] == 100.0                        # 1000 200s, 200 of them late
    assert f["s503_rate"] == 900.0
    assert f["other_status_rate"] == 50.0                 # 1900 non-200, 1800 of them 503
    assert f["lost_rate"] == 50.0                         # 2000 errors - 1900 statuses: timeouts, connects
    assert f["ok_p50_ms"] == 300.0 and f["ok_p99_ms"] == 1500.0
    no200 = openloop.goodput_fields({**m, "ok": 0, "good": 0, "good_in_window": 0, "ok_p50_ms": -1,
                                     "ok_p99_ms": -1})
    assert no200["ok_p50_ms"] is None and no200["ok_p99_ms"] is None and no200["goodput_rate"] == 0


def test_offered_rates_are_multiples_of_the_measured_capacity():
    # 2,000 us per request: 500/s on one core
    assert experiments.overload_rates(2000.0, (0.5, 1.0, 2.0, 3.0)) == [250, 500, 1000, 1500]
    # not measured: the work's own figure
    assert experiments.overload_rates(None, (1.0,)) == [1000 // experiments.OVERLOAD_WORK_MS]
    assert experiments.overload_rates(1e7, (0.5,)) == [10]   # never below 10/s


def test_argv_passes_the_deadline_to_the_generator():
    a = openloop.argv("http://127.0.0.1:8080/work?delay=2&bucket=0", 100, 1, deadline_ms=1000)
    assert a[a.index("-D") + 1] == "1000" and a[a.index("-u") + 1] == "/work?delay=2&bucket=0"
    assert "-D" not in openloop.argv("http://127.0.0.1:8080/x", 100, 1)


def _rec(model, policy, x, rep, goodput, p99=50.0, s503=0.0, **kw):
    rate = int(500 * x)
    return {"exp": "overload", "cell": f"{model} {policy} {x:g}x {rate}/s", "server": f"{model}-{policy}",
            "kind": "spindle", "model": model, "cpus": "0", "workers": 1, "rep": rep, "tool": "openloop",
            "rate": rate, "load_x": x, "policy": policy, "open_loop": True, "rps": goodput, "errors": 0,
            "goodput_rate": goodput * (1 + 0.002 * rep), "ok_p50_ms": p99 / 5, "ok_p99_ms": p99,
            "s503_rate": s503, "late_rate": 0.0, "lost_rate": 0.0, "queue_p99_us": 20_000.0,
            "server_cores": 0.98, "server_us_per_req": 2000.0, "gen_share": 0.1, "client_bound": False,
            "other_cores": 0.0, "problems": [], "_params": ["rate", "load_x", "policy", "open_loop"], **kw}


def _records():
    out = []
    for rep in (1, 2, 3):
        for m in ("epoll", "pool"):
            for x in (0.5, 1.0, 3.0):
                out.append(_rec(m, "queue", x, rep, goodput=min(x, 1.0) * 480 if x < 3 else 30.0,
                                p99=5.0 if x < 3 else 990.0))
                out.append(_rec(m, "shed", x, rep, goodput=min(x, 1.0) * 480 if x < 3 else 460.0 - 60 * (m == "pool"),
                                p99=5.0 if x < 3 else 60.0, s503=0 if x < 3 else 1000.0))
                out.append(_rec(m, "reject", x, rep, goodput=min(x, 1.0) * 480 if x < 3 else 300.0,
                                p99=5.0 if x < 3 else 200.0, s503=0 if x < 3 else 1100.0))
    return out


def test_the_report_tables_plots_and_words_the_goodput_curves(tmp_path):
    rep = report.Report(SimpleNamespace(records=_records(), notes={}, server_memory=[]), tmp_path, {})
    rep.overload()
    text = "\n".join(rep.md)
    assert "## Past the knee" in text
    line = next(ln for ln in rep.md[-20:] + text.splitlines() if ln.startswith("| epoll | shed | 3x |"))
    assert "| 1,500 |" in line and "| 60.0 |" in line and "| 1,000 |" in line and "| 20.0 |" in line, line
    assert "epoll at 3x: queue 30/s (6% of capacity), shed 462/s (92% of capacity)" in text
    assert "most goodput: shed" in text
    for png in ("overload_goodput.png", "overload_p99.png"):
        assert (tmp_path / png).stat().st_size > 10_000 and png in text


def test_the_why_section_gains_a_row_for_overload():
    rows = report.aggregate(_records())
    j = next(j for j in why.judge_all(rows) if j["id"] == "overload")
    assert {c["row"]["load_x"] for c in j["cells"]} == {3.0}      # the highest load only
    assert j["winner"]["who"] == "epoll shed" and j["runner"]["who"] == "pool shed"
    text, _ = why.section(rows)
    assert "past the knee" in text


def test_no_overload_row_without_the_experiment():
    j = next(j for j in why.judge_all([]) if j["id"] == "overload")
    assert not j["cells"] and j["note"] == "not measured in this run"


def _cost(policy, us, spread):
    vals = [us * f for f in spread]
    return {"exp": "overload", "cell": f"epoll {policy} wrk -c200 keep-alive 13 B", "server": f"epoll-ka-{policy}",
            "model": "epoll", "policy": policy, "part": "cost", "rps": 60_000.0, "rps_vals": [60_000.0] * 5,
            "server_us_per_req": us, "server_us_per_req_vals": vals, "reps_ok": 5, "client_bound": False}


def _claim(rows):
    fam = stats.Family()
    claims.check_all(rows, fam)
    fam.resolve()
    return next(c for c in claims.check_all(rows, fam) if c["id"] == "claim/spindle/overload-costs-nothing")


def test_a_policy_that_costs_the_same_holds_no_difference():
    tight = (0.995, 0.998, 1.0, 1.002, 1.005)
    c = _claim([_cost("queue", 10.0, tight), _cost("shed", 10.05, tight), _cost("reject", 9.97, tight)])
    assert c["verdict"] == claims.HOLDS, c
    assert "shed 10.05" in c["measured"] and "queue 10.00" in c["measured"]


def test_a_policy_that_costs_20_percent_more_does_not_hold_and_noise_leaves_it_unsettled():
    tight = (0.995, 0.998, 1.0, 1.002, 1.005)
    c = _claim([_cost("queue", 10.0, tight), _cost("shed", 12.0, tight), _cost("reject", 10.0, tight)])
    assert c["verdict"] == claims.FAILS, c
    noisy = (0.7, 0.85, 1.0, 1.15, 1.35)
    c = _claim([_cost("queue", 10.0, noisy), _cost("shed", 10.0, noisy), _cost("reject", 10.0, noisy)])
    assert c["verdict"] == claims.UNSETTLED and "±5%" in c["why"], c


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Every third request 503, every third 200 after 600 ms, the rest 200 at once."""
    protocol_version = "HTTP/1.1"
    n = 0

    def do_GET(self):
        k = type(self).n = type(self).n + 1
        status = 503 if k % 3 == 0 else 200
        if k % 3 == 1:
            time.sleep(0.6)
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


def test_the_generator_counts_goodput_late_200s_and_503s():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        cmd = openloop.argv(f"http://127.0.0.1:{srv.server_address[1]}/x", 30, 1, "constant", max_conns=50,
                            deadline_ms=300, binary=openloop.build())
        m = openloop.parse(subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout)
    finally:
        srv.shutdown()
        srv.server_close()
    n = m["completed"]                        # 30 or 31 due in the second
    assert n == m["scheduled"] and n >= 30, m
    assert m["status_503"] == n // 3 and m["ok"] == n - n // 3 and m["good"] == (n + 1) // 3, m
    assert m["ok_p99_ms"] >= 600 and m["p50_ms"] < 300, m       # the 503s and fast 200s are most answers


class _Slow(http.server.BaseHTTPRequestHandler):
    """Every answer 0.5 s after its request."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        time.sleep(0.5)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


def test_goodput_counts_only_answers_before_the_schedule_ended():
    """A 1 s schedule answered 0.5 s late: every 200 is within a 1 s deadline,
    but those due in the last half second come in the tail, with server time
    no steady state has; goodput per second of schedule counts the first half
    only, so it can never exceed what the server did in that second."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        cmd = openloop.argv(f"http://127.0.0.1:{srv.server_address[1]}/x", 40, 1, "constant", max_conns=50,
                            deadline_ms=1000, binary=openloop.build())
        m = openloop.parse(subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout)
    finally:
        srv.shutdown()
        srv.server_close()
    assert m["good"] == m["scheduled"] >= 40, m
    assert 14 <= m["good_in_window"] <= 26, m              # about 20: those due in the first half second
    f = openloop.goodput_fields(m)
    assert f["goodput_rate"] == m["good_in_window"] and f["good_tail_rate"] == m["good"] - m["good_in_window"]
