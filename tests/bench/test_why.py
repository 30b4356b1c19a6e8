"""The report's "Which model wins, when, and why" (bench/why.py) from
hand-made aggregated rows: each explanation follows from the figures in the
rows (queue wait, service time, counters, the generator's and the server's
CPU), and where nothing recorded differs the text says "not measured"."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import why  # noqa: E402

TIGHT = (0.99, 0.995, 1.0, 1.005, 1.01)
NOISY = (0.70, 0.85, 1.0, 1.15, 1.35)


def row(exp, server, key, mid, spread=TIGHT, **kw):
    vals = [mid * f for f in spread]
    r = {"exp": exp, "cell": f"{server} {exp} {kw.get('peer_cell', '')}", "server": server, "model": server,
         "cpus": "0", key: mid, f"{key}_vals": vals, f"{key}_min": min(vals), f"{key}_max": max(vals),
         "reps_ok": len(vals), "errors_total": 0, "failed_runs": [], "problems": []}
    r.update(kw)
    return r


def cpu(r, us, spread=TIGHT):
    vals = [us * f for f in spread]
    r.update(server_us_per_req=us, server_us_per_req_vals=vals)
    return r


def cpu_bound_cell(server, avg_ms, queue_us, service_us, cpu_us=2000.0, runq_us=0.0, lat=None):
    r = cpu(row("seed001", server, "avg_ms", avg_ms, cores=1, server_cores=0.95, gen_share=0.27,
                queue_mean_us=queue_us, service_mean_us=service_us, runq_us_per_req=runq_us), cpu_us)
    if lat is not None:
        r["lat_ms"] = sorted(lat)
    return r


# -- one cell -------------------------------------------------------------------------------------

def test_a_cell_whose_queue_wait_dominates_is_explained_as_queueing():
    r = cpu_bound_cell("epoll", 100, queue_us=95_000, service_us=2_100)
    t = why.time_split(r)
    assert t["kind"] == "queueing" and t["share"] > 0.9
    text = why.split_text(r)
    assert "**queueing**" in text and "95 ms" in text and "2.1 ms" in text


def test_service_inflated_past_the_requests_cpu_is_processor_sharing():
    r = cpu_bound_cell("thread", 80, queue_us=50, service_us=80_000, runq_us=1_400)
    t = why.time_split(r)
    assert t["kind"] == "processor sharing" and round(t["stretch"]) == 40
    text = why.split_text(r)
    assert "**processor sharing**" in text and "40x" in text and "run-queue wait 1.4 ms" in text


def test_short_queue_and_service_near_the_cpu_is_service_time():
    r = cpu(row("openloop", "epoll", "p99_ms", 0.5, rate=4000, queue_mean_us=3, service_mean_us=20), 18)
    assert why.time_split(r)["kind"] == "service"


def test_stamps_longer_than_the_clients_latency_are_not_used():
    """A server whose queue-wait stamp starts too early (a loop stamped with
    the start of a turn it never left) reports more time inside than the
    client waited in all: the split is refused, not read as queueing."""
    r = cpu_bound_cell("epoll", 145, queue_us=805_000, service_us=3_070)
    assert why.time_split(r) is None
    text = why.split_text(r)
    assert "**not usable**" in text and "805 ms" not in text and "808 ms" in text and "145 ms" in text
    ok = cpu_bound_cell("epoll", 145, queue_us=120_000, service_us=3_070)
    assert why.time_split(ok)["kind"] == "queueing"


def test_a_cell_without_histograms_says_not_measured():
    r = cpu(row("peers", "nginx", "rps", 1e5), 10)
    assert why.time_split(r) is None
    assert "not measured" in why.split_text(r)


def test_limiters():
    assert why.limiter(row("peers", "epoll", "rps", 1, client_bound=True, gen_share=0.97))[0] == why.CLIENT
    assert why.limiter(row("seed001", "epoll", "rps", 1, server_cores=0.95, gen_share=0.3))[0] == why.SERVER_CPU
    assert why.limiter(row("openloop", "pool", "rps", 3998, rate=4000, server_cores=0.2))[0] == why.OFFERED
    kind, text = why.limiter(row("peers", "nginx", "rps", 18_000, server_cores=0.14, gen_share=0.05))
    assert kind == why.WAITING and "not measured" in text
    # two cores, one used: the work ran one at a time (a lock), which the counters do not name
    kind, text = why.limiter(row("seed002", "pool", "rps", 957, cpus="0-1", server_cores=1.0, gen_share=0.04))
    assert kind == why.WAITING and "1.00 of its 2 cores" in text and "not measured" in text


def test_a_wait_is_named_as_far_as_the_counters_go():
    """A server neither busy nor client-bound: its threads blocking (voluntary
    switches), a run queue, or the time the requests spent inside spindle
    against the client's; "not measured" only where none was recorded."""
    blocked = row("tls", "iterative", "rps", 1_000, server_cores=0.45, gen_share=0.8, ctx_vol_per_req=3.2)
    kind, text = why.limiter(blocked)
    assert kind == why.WAITING and "blocked 3.2 times per request" in text and "not measured" not in text
    queued = row("seed001", "thread", "avg_ms", 59, cpus="0-1", server_cores=1.40, gen_share=0.29,
                 runq_us_per_req=297.0)
    assert "run-queue wait 297 µs per request" in why.limiter(queued)[1]
    outside = row("peers", "epoll", "rps", 8_000, server_cores=0.3, gen_share=0.4, queue_mean_us=20.0,
                  service_mean_us=5.0, mean_ms=6.0, server_us_per_req=30.0)
    assert "inside spindle 25 µs of the client's 6.0 ms per request (0%)" in why.limiter(outside)[1]
    # one core's worth on two: the serialising wait, where the switches show it
    lock = row("seed002", "pool", "rps", 957, cpus="0-1", server_cores=1.0, gen_share=0.04, ctx_vol_per_req=2.7)
    assert "blocked 2.7 times per request" in why.limiter(lock)[1]
    assert "not measured" in why.limiter(row("peers", "nginx", "rps", 18_000, server_cores=0.14, gen_share=0.05))[1]


def test_a_stalled_closed_loop_shows_its_round_trip_by_littles_law():
    """nginx pipelining 16 requests on each of 50 connections at 18,500/s, 13%
    of its core: each batch took 50 x 16 / 18,500 = 43 ms, of which its CPU
    0.1 ms: the wait was elsewhere."""
    nginx = row("peers", "nginx", "rps", 18_500, peer_cell="pipelined", conc=50, pipeline_depth=16,
                server_cores=0.13, gen_share=0.05, server_us_per_req=7.07)
    text = why.limiter(nginx)[1]
    assert "each batch of 16 took 43 ms from send to answer (Little's law: 50 connections ÷ 1,156/s)" in text
    assert "the server's CPU 113 µs of it" in text
    # an open loop is not a closed one: no such figure
    assert "Little" not in why.limiter(row("openloop", "pool", "rps", 100, rate=4000, conc=50,
                                           server_cores=0.1, server_us_per_req=30.0))[1]


def test_switches_of_models_whose_threads_exit_are_a_lower_bound_unless_perf_counted():
    t = row("seed000", "thread", "rps", 1, ctx_vol_per_req=0.7, ctx_invol_per_req=0.1)
    n, mark = why.switches(t)
    assert abs(n - 0.8) < 1e-9 and mark == "≥ "
    t["ctx_per_req"] = 1.13
    assert why.switches(t) == (1.13, "")
    assert why.switches(row("seed000", "pool", "rps", 1, ctx_vol_per_req=2.0, ctx_invol_per_req=0.5))[1] == ""


# -- a cost difference ------------------------------------------------------------------------------

def keepalive_at(server, us, vol, invol=0.0, **kw):
    return cpu(row("openloop", server, "p99_ms", 0.5, rate=4000, rps=4000, server_cores=us * 4000 / 1e6,
                   ctx_vol_per_req=vol, ctx_invol_per_req=invol, user_us_per_req=us * 0.2,
                   sys_us_per_req=us * 0.8, **kw), us)


def test_a_hand_off_shows_as_context_switches_per_request():
    epoll = keepalive_at("epoll", 22.0, 0.45)
    pool = keepalive_at("pool", 48.0, 2.07, 0.5)
    ev = why.cost_evidence(epoll, pool)
    assert ev[0].startswith("CPU per request 48.0 against 22.0 µs (+26.0)")
    assert any(e.startswith("context switches per request 2.57 against 0.45 (+2.12") and "hand-off" in e
               for e in ev)
    # no perf in the run: system calls are listed as not measured, not guessed
    assert not any("system calls" in e for e in ev)
    assert any("system calls" in m for m in why.not_measured(epoll, pool))


def test_system_calls_and_faults_count_only_where_recorded_and_different():
    a = keepalive_at("epoll", 20.0, 0.4, syscalls_per_req=2.0, minflt_per_req=0.0)
    b = keepalive_at("fork", 400.0, 0.4, syscalls_per_req=9.0, minflt_per_req=64.0)
    ev = " ".join(why.cost_evidence(a, b))
    assert "system calls per request 9.0 against 2.0 (+7.0)" in ev
    assert "minor page faults per request 64.0 against 0.0 (+64.0" in ev
    assert "context switches" not in ev            # 0.4 against 0.4: no difference, nothing said
    # thousands of calls per request (the workload's clock) differing by 2%: nothing said
    c = keepalive_at("epoll", 2000.0, 0.4, syscalls_per_req=2811.3)
    d = keepalive_at("pool", 2100.0, 0.4, syscalls_per_req=2759.6)
    assert "system calls" not in " ".join(why.cost_evidence(d, c))


def test_kernel_threads_beside_the_server_are_named_when_they_differ():
    a = keepalive_at("epoll", 25.0, 0.1, kthread_cores=0.038)
    b = keepalive_at("thread", 46.0, 0.15, kthread_cores=0.086)
    assert any(e.startswith("kernel threads busy 0.09 cores beside it against 0.04 (+0.05")
               for e in why.cost_evidence(a, b))


def test_a_gap_no_counter_explains_is_not_measured():
    a = keepalive_at("epoll", 20.0, 0.5)
    b = keepalive_at("nginx", 30.0, 0.5)
    j = why.judge_regime("t", "test", [a, b], "server_us_per_req", False, why._who)
    assert j["winner"]["who"] == "epoll"
    assert why.mechanism_summary(j).startswith("not measured")
    text = "\n".join(why.details(j))
    assert "No other recorded counter differs enough to name a mechanism: not measured" in text


# -- a regime ------------------------------------------------------------------------------------------

def test_cpu_bound_regime_names_best_median_worst_tail_and_both_kinds_of_queue():
    """Processor sharing (thread: every request picked up at once, all sharing the
    core) against a FIFO loop (epoll: one at a time, the rest waiting)."""
    # thread: most requests finish together late-ish but short ones early; a long tail
    thread_lat = [60 + i * 0.05 for i in range(900)] + [150 + i for i in range(100)]
    epoll_lat = [2 + i * 0.19 for i in range(1000)]
    thread = cpu_bound_cell("thread", 103, queue_us=40, service_us=80_000, runq_us=1_400, lat=thread_lat)
    epoll = cpu_bound_cell("epoll", 98, queue_us=95_000, service_us=2_050, lat=epoll_lat)
    j = why.judge_regime("cpu-1core", "CPU-bound", [thread, epoll], "avg_ms", False, why._who)
    text = "\n".join(why.details(j))
    assert "thread has both the best median and the worst tail" in text
    summary = why.mechanism_summary(j)
    assert "processor sharing" in summary and "queueing" in summary


def test_a_winner_is_named_only_where_the_interval_excludes_one():
    a = cpu(row("seed000", "epoll", "server_us_per_req", 45, NOISY, part="matched"), 45, NOISY)
    b = cpu(row("seed000", "nginx", "server_us_per_req", 47, NOISY, part="matched"), 47, NOISY)
    j = why.judge_regime("m", "matched", [a, b], "server_us_per_req", False, why._who)
    assert j["winner"] is None
    assert why.regime_row(j)[2] == "no clear winner" and "includes 1" in why.regime_row(j)[3]
    b = cpu(row("seed000", "nginx", "server_us_per_req", 63, part="matched"), 63)
    a = cpu(row("seed000", "epoll", "server_us_per_req", 45, part="matched"), 45)
    j = why.judge_regime("m", "matched", [a, b], "server_us_per_req", False, why._who)
    assert j["winner"]["who"] == "epoll" and j["runner"]["margin"][2]
    assert why.regime_row(j)[3].startswith("1.40x")


def test_client_bound_rates_are_judged_on_cpu_per_request():
    """A client-bound rate is the generator's: the regime compares CPU per
    request instead, here where both servers saturated their core."""
    fast = cpu(row("peers", "epoll", "rps", 114_000, peer_cell="keepalive", client_bound=True, gen_share=0.97,
                   server_cores=0.92), 7.5)
    slow = cpu(row("peers", "nginx", "rps", 110_000, peer_cell="keepalive", client_bound=True, gen_share=0.95,
                   server_cores=0.95), 10.9)
    j = why.judge_regime("keepalive", "keep-alive", [slow, fast], "rps", True, why._who)
    assert j["basis"] == "server_us_per_req" and "client-bound" in j["note"]
    assert j["winner"]["who"] == "epoll"
    assert j["cells"][0]["limiter"][0] == why.CLIENT


def test_a_client_bound_cell_at_another_load_is_not_compared():
    a = cpu(row("peers", "epoll", "rps", 20_000, peer_cell="close", client_bound=True, gen_share=0.98,
                server_cores=0.4), 19)
    b = cpu(row("peers", "fork", "rps", 2_400, peer_cell="close", gen_share=0.2, server_cores=0.97), 400)
    j = why.judge_regime("close", "close", [a, b], "rps", True, why._who)
    assert j["cells"][1]["comparable"] and j["winner"] is None


def slow_cell(server, p99, threads, procs=1, answered=1.0, censored=0, **kw):
    return row("slow", server, "p99_ms", p99, slow_clients=100, rate=1000, rps=1000 * answered,
               held_threads=threads, held_processes=procs, answered_share=answered, p99_censored=censored,
               timeouts=0 if not censored else 1000, server_cores=0.05, gen_share=0.3, **kw)


def test_slow_clients_name_what_the_server_held_for_them():
    epoll = slow_cell("epoll", 0.4, 2, queue_mean_us=12.0, service_mean_us=3.0)
    thread = slow_cell("thread", 0.9, 103)
    fork = slow_cell("fork", 1.5, 103, procs=102)
    iterative = slow_cell("iterative", 2000.0, 1, answered=0.0, censored=1)
    text, js = why.section([iterative, thread, epoll, fork])
    slow = next(j for j in js if j["id"] == "slow")
    assert [c["who"] for c in slow["cells"]] == ["epoll", "thread", "fork", "iterative"]
    assert slow["winner"]["who"] == "epoll"
    summary = why.mechanism_summary(slow)
    assert "epoll: 100 slow clients held 2 threads in 1 process" in summary
    assert "iterative: 100 slow clients held 1 thread in 1 process; the fresh client's requests answered 0% " \
           "(1000 timed out: p99 is at least the 2 s timeout)" in summary
    details = "\n".join(why.details(slow))
    assert "100 slow clients held 103 threads in 1 process" in details
    assert "100 slow clients held 103 threads in 102 processes" in details


def test_the_section_explains_the_two_kinds_of_queue():
    text, _ = why.section([])
    assert "**work queue**" in text and "**loop's turn**" in text and "test_request_time.py" in text


def test_a_regime_the_run_did_not_measure_says_so():
    js = {j["id"]: j for j in why.judge_all([])}
    assert js["slow"]["note"] == "not measured in this run"
    assert why.regime_row(js["slow"])[4] == "not measured in this run"


def test_the_section_reads_the_rows_it_is_given():
    """The same rows with the counters swapped give the opposite explanation:
    nothing in the text is fixed in advance."""
    def rows(pool_vol, epoll_vol):
        return [keepalive_at("epoll", 22.0, epoll_vol), keepalive_at("pool", 48.0, pool_vol),
                keepalive_at("nginx", 43.0, 0.74)]
    text, js = why.section(rows(2.07, 0.45))
    assert "## Which model wins, when, and why" in text
    keep = next(j for j in js if j["id"] == "keepalive-matched")
    assert keep["winner"]["who"] == "epoll"
    assert "pool against epoll: context switches per request 2.07 against 0.45 (+1.62)" in why.mechanism_summary(keep)
    _, js = why.section(rows(0.45, 0.45))
    keep = next(j for j in js if j["id"] == "keepalive-matched")
    assert "context switches" not in why.mechanism_summary(keep)
