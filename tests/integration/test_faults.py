"""Fault campaigns under load: kill -9 of the serving process and of
one prefork worker while wrk runs (fewer than 0.1% of requests may fail), and
reloads that change settings while wrk runs, for every model (none may fail).

Each test runs one bounded wrk (a few seconds, 127.0.0.1 only) and signals only
the processes it started. The failure figures are printed (pytest -s, or the
log) and repeated in the assertion messages."""
from __future__ import annotations

import os
import signal
import time

import pytest

import util
from conftest import A_TXT
from tlsutil import client_context, client_hello, openssl, tls_conn, tls_settings
from supervision import (GEN_RE, ConfigServer, ShortConnLoad, log_text, one_serving, run_wrk,
                         wait_log, wrk_result)

# Load campaigns: in the plain suite; the sanitizer suites leave them out (time).
pytestmark = pytest.mark.campaign

KILL_MAX_FAILED_RATE = 0.001  # kill -9: fewer than 0.1% failed requests
WRK_CONNS = 8
WRK_SECONDS = 6


@pytest.fixture
def started(tmp_path):
    """start(server) -> the started server; each is stopped at teardown and
    must exit 0 (a killed serving process is the master's business)."""
    servers: list[util.Server] = []

    def start(srv: util.Server) -> util.Server:
        servers.append(srv)
        return srv.start()

    yield start
    errors = []
    for srv in servers:
        if srv.alive():
            try:
                rc = srv.stop(timeout=util.scaled(20))
            except util.ServerError as e:
                errors.append(str(e))
                continue
            if rc != 0:
                errors.append(f"exit status {rc} after SIGTERM\n{srv.diagnostics()}")
        srv.kill()
    assert not errors, "\n".join(errors)


def _figures(what: str, res: dict) -> str:
    rate = res["failed"] / max(res["total"], 1)
    line = (f"{what}: {res['failed']} failed of {res['total']} requests ({100 * rate:.3f}%); "
            f"socket errors {res['socket_errors'] or 'none'}, non-2xx {res['non2xx']}")
    print(f"\n{line}")
    return line


def _assert_few_failed(what: str, res: dict, srv: util.Server) -> None:
    line = _figures(what, res)
    assert res["rc"] == 0, res["out"]
    # below ~1000 requests a single failure is already 0.1%: the figure would
    # say nothing, so the load itself must have been served
    assert res["total"] >= 2000, f"{line}: too little load got through\n{res['out']}\n{srv.diagnostics()}"
    assert res["failed"] / res["total"] < KILL_MAX_FAILED_RATE, f"{line}\n{res['out']}"


def _served(srv: util.Server) -> bool:
    try:
        return srv.get("/a.txt", timeout=1).body == A_TXT
    except Exception:
        return False


# --------------------------------------------------------------------------
# kill -9
# --------------------------------------------------------------------------

# The master restarts a killed serving process, whatever its model, by the
# same code (src/master.c), and keeps the listeners; what a model changes is
# what dies with it and what the replacement starts. fork's children and
# prefork's workers are processes of their own; epoll, the default, stands for
# the models whose serving process is the whole of it (thread, pool, uring and
# iterative: each is killed and replaced, a client waiting in the backlog
# answered, in test_master.py's test_kill9_serving_process_is_replaced, and
# reloaded under load there).
@pytest.mark.models("fork", "prefork", "epoll")
@pytest.mark.expect_restart
@pytest.mark.concurrent
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_kill9_serving_process_under_wrk(model, scheme, started, docroot, certs, tmp_path):
    """Only the requests in flight on the killed process's connections may
    fail: the listeners stay with the master, so connections arriving while
    the replacement starts wait in the backlog (over TLS too: the new process
    has the certificate loaded before it serves)."""

    settings = {"workers": 2, **(tls_settings(certs) if scheme == "https" else {})}
    srv = started(util.Server(model, docroot.path, tmp_path / "srv", settings))
    master = srv.proc.pid
    victim = one_serving(master)
    time.sleep(1.1)  # past the master's quick-death restart backoff (1 s)
    wrk = run_wrk(srv.port, WRK_SECONDS, conns=WRK_CONNS, scheme=scheme)
    time.sleep(2)
    os.kill(victim, signal.SIGKILL)
    new = util.wait_for(lambda: [p for p in util.serving_pids(master) if p != victim], util.scaled(3))
    res = wrk_result(wrk, timeout=util.scaled(WRK_SECONDS + 30))
    assert new, f"no new serving process after kill -9 of {victim}\n{srv.diagnostics()}"
    _assert_few_failed(f"kill -9 of the {model} serving process under wrk -c{WRK_CONNS} over {scheme}", res, srv)
    if scheme == "http":
        assert util.wait_for(lambda: _served(srv), util.scaled(3)), srv.diagnostics()


@pytest.mark.expect_restart
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_kill9_prefork_worker_under_wrk(scheme, started, docroot, certs, tmp_path):

    nworkers = 3
    settings = {"workers": nworkers, "threads": 4, **(tls_settings(certs) if scheme == "https" else {})}
    srv = started(util.Server("prefork", docroot.path, tmp_path / "srv", settings))
    serving = one_serving(srv.proc.pid)

    def workers():
        w = [p for p in util.proc_children(serving) if util.proc_live(p)]
        return w if len(w) == nworkers else None
    before = util.wait_for(workers, util.scaled(3))
    assert before, f"expected {nworkers} workers, found {util.proc_children(serving)}"
    time.sleep(1.1)  # past prefork's per-worker restart backoff (1 s)
    wrk = run_wrk(srv.port, WRK_SECONDS, conns=WRK_CONNS, scheme=scheme)
    time.sleep(2)
    victim = before[0]
    os.kill(victim, signal.SIGKILL)
    replaced = util.wait_for(lambda: (lambda w: w if w and victim not in w else None)(workers()), util.scaled(3))
    res = wrk_result(wrk, timeout=util.scaled(WRK_SECONDS + 30))
    assert replaced, f"worker {victim} not replaced: {util.proc_children(serving)}\n{srv.diagnostics()}"
    _assert_few_failed(f"kill -9 of one of {nworkers} prefork workers under wrk -c{WRK_CONNS} over {scheme}",
                       res, srv)
    assert util.serving_pids(srv.proc.pid) == [serving], "the serving process itself changed"


# --------------------------------------------------------------------------
# reloads
# --------------------------------------------------------------------------

def _config(model: str, workers: int, threads: int, keepalive_s: int) -> str:
    return (f"[server]\nmodel = {model}\nworkers = {workers}\nthreads = {threads}\n"
            f"[http]\nkeepalive_timeout = {keepalive_s}\n")


# The models whose sizes a reload can change (workers: epoll, uring, prefork;
# threads: pool, prefork). For thread and fork this reload changes only the
# keep-alive timeout, and their reloads under load are test_master.py's
# (a fresh connection per request through 16 reloads, and a reload storm).
@pytest.mark.models("epoll", "uring", "pool", "prefork")
@pytest.mark.concurrent
def test_reloads_with_new_settings_under_wrk_fail_nothing(model, started, docroot, tmp_path):
    """Two SIGHUPs, each changing workers, threads and the keep-alive
    timeout, while wrk runs and a client opens a fresh connection per
    request: no request fails and no connection goes unanswered."""
    conf = tmp_path / "spindle.conf"
    steps = [(2, 4, 30), (3, 6, 20), (2, 4, 30)]
    conf.write_text(_config(model, *steps[0]))
    srv = started(ConfigServer(conf, docroot.path, tmp_path / "srv"))
    assert wait_log(srv, GEN_RE.format(n=1, model=model), util.scaled(3)), srv.diagnostics()
    wrk = run_wrk(srv.port, WRK_SECONDS + 2, conns=WRK_CONNS)
    with ShortConnLoad(srv.port, nthreads=1, max_seconds=util.scaled(40)) as plain:
        time.sleep(1.5)
        for n, settings in enumerate(steps[1:], start=2):
            conf.write_text(_config(model, *settings))
            srv.signal(signal.SIGHUP)
            m = wait_log(srv, GEN_RE.format(n=n, model=model), util.scaled(5))
            assert m, f"no generation {n} after SIGHUP\n{srv.diagnostics()}"
            assert wait_log(srv, rf"generation {n - 1} \(pid \d+\) finished", util.scaled(15)), \
                f"generation {n - 1} did not drain\n{srv.diagnostics()}"
            time.sleep(1.5)
        res = wrk_result(wrk, timeout=util.scaled(WRK_SECONDS + 40))
        plain.stop()
    line = _figures(f"two reloads of {model} under wrk -c{WRK_CONNS}", res)
    unanswered = [e for _, e in plain.attempts if e is not None]
    print(f"fresh connections: {len(plain.attempts)}, unanswered {len(unanswered)}")
    assert res["rc"] == 0 and res["requests"] > 0, res["out"]
    assert res["failed"] == 0, f"{line}\n{res['out']}"
    assert not unanswered, f"{len(unanswered)} of {len(plain.attempts)} fresh connections failed: {unanswered[:5]}"
    assert one_serving(srv.proc.pid, timeout=util.scaled(5)) == int(m.group(1))
    # e.g. a loop left without a listener of its own warns "accept: ..."
    # (the suite runs as root without `user`: that start-up warning is no complaint)
    complaints = [ln for ln in log_text(srv).splitlines()
                  if ("[warn]" in ln or "[error]" in ln) and "running as root without `user`" not in ln]
    assert not complaints, "the reloads logged problems:\n" + "\n".join(complaints[:10])


class ListenLinesServer(ConfigServer):
    """Addresses from the config file's `listen` lines alone: first(port)
    gives the first configuration once the harness has chosen the plain
    port (its readiness check connects there)."""

    def __init__(self, conf, root, workdir, first):
        super().__init__(conf, root, workdir)
        self.conf, self.first = conf, first

    def argv(self) -> list[str]:
        a = super().argv()
        for flag in ("--bind", "--port"):
            i = a.index(flag)
            del a[i:i + 2]
        self.conf.write_text(self.first(self.port))
        return a


def _assert_nothing_failed(what: str, results: list[dict], plain: ShortConnLoad, secure: ShortConnLoad) -> None:
    """wrk over http and https (results in that order) failed nothing, and
    every fresh connection on either was answered."""
    for scheme, res in zip(("http", "https"), results):
        line = _figures(f"{what} under wrk -c{WRK_CONNS} over {scheme}", res)
        assert res["rc"] == 0 and res["requests"] > 0, res["out"]
        assert res["failed"] == 0, f"{line}\n{res['out']}"
    for scheme, load in (("http", plain), ("https", secure)):
        unanswered = [(round(t, 2), e) for t, e in load.attempts if e is not None]
        print(f"fresh {scheme} connections: {len(load.attempts)}, unanswered {len(unanswered)}")
        assert len(load.attempts) > 20, f"too few fresh {scheme} connections ({len(load.attempts)})"
        assert not unanswered, f"{len(unanswered)} of {len(load.attempts)} fresh {scheme} connections failed: " \
                               f"{unanswered[:5]}"


# Reloads where every listener comes from `listen` lines, one of them TLS:
# the listener set must follow the worker count and the model
# whatever wire a listener carries. One plan both shrinks the set (to uring's
# 2 loops) and grows it again (to epoll's 4): the master sizes the set from
# the count alone (src/listeners.c), whichever model asks, so a plan within
# one model (epoll 4 -> 2 -> 4) adds no path; test_master.py's reloads that
# change workers run that plan, and more, over plain HTTP.
TLS_RELOAD_STEPS = {
    "models": [("epoll", 4), ("pool", 4), ("uring", 2), ("epoll", 4)],
}


@pytest.mark.parametrize("steps", list(TLS_RELOAD_STEPS))
def test_reloads_with_tls_listen_lines_under_wrk_fail_nothing(steps, started, docroot, certs, tmp_path):
    """wrk over plain HTTP and over HTTPS, and fresh connections on both,
    through reloads epoll/4 -> pool -> uring/2 -> epoll/4, with both
    addresses given as `listen` lines: 0 failed requests, every connection
    answered."""

    plan = TLS_RELOAD_STEPS[steps]
    missing = {m for m, _ in plan} - set(util.list_models())
    if missing:
        pytest.skip(f"{', '.join(sorted(missing))} not built")
    conf = tmp_path / "spindle.conf"
    tls_port = util.free_port()

    def text(model: str, workers: int, port: int) -> str:
        return (f"[server]\nmodel = {model}\nworkers = {workers}\n"
                f"listen = 127.0.0.1:{port}\nlisten = 127.0.0.1:{tls_port} tls\n"
                f"[http]\nkeepalive_timeout = 30\n"
                f"[tls]\ntls_certificate = {certs.chain}\ntls_certificate_key = {certs.key}\n")

    srv = started(ListenLinesServer(conf, docroot.path, tmp_path / "srv", lambda port: text(*plan[0], port)))
    assert wait_log(srv, GEN_RE.format(n=1, model=plan[0][0]), util.scaled(3)), srv.diagnostics()
    ctx = client_context(certs)

    def tls_open(port: int, timeout: float) -> util.Conn:
        return tls_conn(port, ctx, timeout=timeout)

    hold = util.scaled(2.5) + 1  # longer than a connection may wait: a stranded one shows
    seconds = (hold + 1) * len(plan) + 2
    wrks = [run_wrk(srv.port, seconds, conns=WRK_CONNS), run_wrk(tls_port, seconds, conns=WRK_CONNS, scheme="https")]
    with ShortConnLoad(srv.port, nthreads=1, max_seconds=util.scaled(60), timeout=util.scaled(2.5)) as plain, \
         ShortConnLoad(tls_port, nthreads=1, max_seconds=util.scaled(60), timeout=util.scaled(2.5),
                       opener=tls_open) as secure:
        time.sleep(1.0)
        for n, (model, workers) in enumerate(plan[1:], start=2):
            conf.write_text(text(model, workers, srv.port))
            srv.signal(signal.SIGHUP)
            assert wait_log(srv, GEN_RE.format(n=n, model=model), util.scaled(5)), \
                f"no generation {n} after SIGHUP\n{srv.diagnostics()}"
            assert wait_log(srv, rf"generation {n - 1} \(pid \d+\) finished", util.scaled(15)), \
                f"generation {n - 1} did not drain\n{srv.diagnostics()}"
            time.sleep(hold)
        results = [wrk_result(w, timeout=util.scaled(seconds + 40)) for w in wrks]
        plain.stop()
        secure.stop()
    _assert_nothing_failed("reloads " + " -> ".join(f"{m}/{w}" for m, w in plan), results, plain, secure)
    complaints = [ln for ln in log_text(srv).splitlines()
                  if ("[warn]" in ln or "[error]" in ln) and "running as root without `user`" not in ln]
    assert not complaints, "the reloads logged problems:\n" + "\n".join(complaints[:10])


# Each step changes nearly every setting a reload may change: the model and
# its sizes, limits and timeouts, the cache, the log level, the certificate
# (another one from the same CA), hsts, and a TLS UNIX socket that comes and
# goes. Plain HTTP and HTTPS addresses stay.
EVERYTHING_STEPS = [
    {"server": "model = epoll\nworkers = 2\n", "http": "keepalive_timeout = 30\nmax_head = 16384\n",
     "cache": "cache_size = 1M\n", "tls": "hsts = max-age=60\n", "cert": 1, "unix": False},
    {"server": "model = pool\nthreads = 3\n",
     "http": "keepalive_timeout = 5\nheader_timeout = 3s\nmax_head = 8192\nsend_timeout = 5s\n"
             "server_tokens = off\nsendfile_min = 1\n",
     "cache": "cache_size = 0\n", "tls": "", "cert": 2, "unix": True, "log": "log_level = debug\n"},
    {"server": "model = uring\nworkers = 3\n", "http": "keepalive_timeout = 60\nmax_headers = 20\n",
     "cache": "cache_size = 64M\ncache_revalidate = 0\n", "tls": "hsts = max-age=600\n", "cert": 1,
     "unix": False},
    {"server": "model = prefork\nworkers = 2\nthreads = 2\n", "http": "keepalive_timeout = 10\n",
     "cache": "cache_size = 4M\n", "tls": "", "cert": 2, "unix": True},
    {"server": "model = thread\nmax_connections = 200\n", "http": "", "cache": "", "tls": "", "cert": 1,
     "unix": False},
    {"server": "model = fork\nmax_connections = 300\n", "http": "", "cache": "", "tls": "", "cert": 2,
     "unix": True},
    {"server": "model = epoll\nworkers = 4\n", "http": "", "cache": "", "tls": "", "cert": 1, "unix": False},
]


def test_reloads_changing_every_setting_under_wrk_fail_nothing(started, docroot, certs, tmp_path):
    """Six reloads through six models, each changing nearly every setting,
    the certificate and the set of TLS addresses, while wrk runs over HTTP
    and HTTPS, fresh connections come on both and a stalled handshake waits
    at each reload: none fails, and nothing is logged as an error (a pool
    draining with a handshake in progress spun, an epoll_ctl error per turn)."""

    models = {step["server"].split()[2] for step in EVERYTHING_STEPS}
    missing = models - set(util.list_models())
    if missing:
        pytest.skip(f"{', '.join(sorted(missing))} not built")
    d = tmp_path / "cert2"
    d.mkdir()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-new", *ec, "-keyout", "s2.key", "-out", "s2.csr", "-subj", "/CN=localhost", cwd=d)
    openssl("x509", "-req", "-in", "s2.csr", "-CA", str(certs.ca), "-CAkey", str(certs.dir / "ca.key"),
             "-CAcreateserial", "-out", "s2.pem", "-days", "2", "-extfile", str(certs.dir / "san.ext"), cwd=d)
    (d / "chain.pem").write_bytes((d / "s2.pem").read_bytes() + certs.ca.read_bytes())
    cert = {1: (certs.chain, certs.key), 2: (d / "chain.pem", d / "s2.key")}
    conf = tmp_path / "spindle.conf"
    tls_port = util.free_port()
    sock = tmp_path / "tls.sock"

    def text(step: dict, port: int) -> str:
        chain, key = cert[step["cert"]]
        unix = f"listen = unix:{sock} tls\n" if step["unix"] else ""
        return (f"[server]\n{step['server']}listen = 127.0.0.1:{port}\nlisten = 127.0.0.1:{tls_port} tls\n{unix}"
                f"[http]\n{step['http']}[cache]\n{step['cache']}[log]\n{step.get('log', '')}"
                f"[tls]\ntls_certificate = {chain}\ntls_certificate_key = {key}\n{step['tls']}")

    srv = started(ListenLinesServer(conf, docroot.path, tmp_path / "srv",
                                    lambda port: text(EVERYTHING_STEPS[0], port)))
    assert wait_log(srv, GEN_RE.format(n=1, model="epoll"), util.scaled(3)), srv.diagnostics()
    ctx = client_context(certs)
    hold = 2.0
    seconds = (hold + 0.5) * len(EVERYTHING_STEPS) + 3
    wrks = [run_wrk(srv.port, seconds, conns=WRK_CONNS), run_wrk(tls_port, seconds, conns=WRK_CONNS, scheme="https")]
    with ShortConnLoad(srv.port, nthreads=1, max_seconds=util.scaled(60), timeout=util.scaled(3)) as plain, \
         ShortConnLoad(tls_port, nthreads=1, max_seconds=util.scaled(60), timeout=util.scaled(3),
                       opener=lambda port, timeout: tls_conn(port, ctx, timeout=timeout)) as secure:
        time.sleep(1.0)
        hello, stalled = client_hello(certs), []
        for n, step in enumerate(EVERYTHING_STEPS[1:], start=2):
            # a handshake the client leaves half-way is in progress when the
            # old generation drains (cut at the end of its grace)
            stalled.append(util.Conn.open(tls_port, timeout=util.scaled(5)))
            stalled[-1].send(hello[:40])
            time.sleep(0.2)
            conf.write_text(text(step, srv.port))
            srv.signal(signal.SIGHUP)
            model = step["server"].split()[2]
            assert wait_log(srv, GEN_RE.format(n=n, model=model), util.scaled(8)), \
                f"no generation {n} after SIGHUP\n{srv.diagnostics()}"
            time.sleep(hold)
        results = [wrk_result(w, timeout=util.scaled(seconds + 40)) for w in wrks]
        plain.stop()
        secure.stop()
        for c in stalled:
            c.close()
    _assert_nothing_failed("six reloads changing every setting", results, plain, secure)
    errors = [ln for ln in log_text(srv).splitlines() if "[error]" in ln or "[crit]" in ln]
    assert not errors, f"{len(errors)} error lines during the reloads:\n" + "\n".join(errors[:10])
