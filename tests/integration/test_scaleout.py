"""Scale-out behind HAProxy: two spindle instances behind
HAProxy on loopback, under wrk load; one is drained with SIGTERM and started
again, the other is reloaded into another model, and the load sees no failed
request.

Why this is not luck: HAProxy checks health_path every 100 ms and takes an
instance out after one failed check (a draining one answers 503, a stopped
one refuses); a request that meets a closed or refused connection before
that is retried (`retry-on all-retryable-errors`: GET is idempotent) on the
other instance (`option redispatch 1`). And a reload never refuses a
connection, so HAProxy needs nothing to ride it out."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

import util
from supervision import ConfigServer, run_wrk, wait_log, wrk_result

sys.path.insert(0, str(util.REPO_ROOT))
from bench.scaleout import HAPROXY, HAProxy  # noqa: E402  (the lab's, with docs/deploy.md's settings)

HEALTH = "/healthz"
LOAD_SECONDS = 9


def start_instance(tmp_path, docroot, name: str, model: str) -> ConfigServer:
    conf = tmp_path / f"{name}.conf"
    conf.write_text(f"[server]\nmodel = {model}\nworkers = 1\nthreads = 8\n")
    return ConfigServer(conf, docroot.path, tmp_path / name,
                        settings={"health_path": HEALTH, "stats": "off"}).start()


def served(srv: util.Server) -> int:
    return sum(1 for ln in srv.access_log.read_text(errors="replace").splitlines() if '"GET /a.txt ' in ln)


@pytest.mark.campaign
def test_drain_restart_and_model_reload_behind_haproxy_fail_nothing(tmp_path, docroot):
    a = start_instance(tmp_path, docroot, "a", "epoll")
    b = start_instance(tmp_path, docroot, "b", "pool")
    lb = HAProxy(tmp_path, [a.port, b.port], "/a.txt", health_path=HEALTH, ready_s=util.scaled(5))
    a2 = None
    try:
        time.sleep(0.5)  # both pass their first checks (rise 2 x 100 ms)
        load = run_wrk(lb.port, LOAD_SECONDS, conns=16)
        time.sleep(1.5)

        # A drains: HAProxy sees 503 or a refusal and sends everything to B
        before_a = served(a)
        assert before_a > 0, "instance A got no load before its drain"
        assert a.stop(timeout=util.scaled(15)) == 0, a.diagnostics()
        time.sleep(0.5)
        # ... and starts again on its port; HAProxy takes it back once healthy
        a2 = ConfigServer(tmp_path / "a.conf", docroot.path, tmp_path / "a-restarted",
                          settings={"health_path": HEALTH, "stats": "off"}).start(port=a.port)
        time.sleep(1.5)

        # B is reloaded into another model while A carries load again
        (tmp_path / "b.conf").write_text("[server]\nmodel = epoll\nworkers = 1\nthreads = 8\n")
        b.signal(signal.SIGHUP)
        assert wait_log(b, r"generation 2: serving process \d+ runs the epoll model", util.scaled(5)), \
            b.diagnostics()
        assert wait_log(b, r"generation 1 \(pid \d+\) finished: exited with status 0", util.scaled(15)), \
            b.diagnostics()

        res = wrk_result(load, timeout=LOAD_SECONDS + util.scaled(30))
    finally:
        lb.stop()
    assert res["rc"] == 0 and res["requests"] > 500, res["out"]
    print(f"scale-out: {res['requests']} requests through HAProxy, {served(a)} + {served(a2)} on A "
          f"(before and after its restart), {served(b)} on B")
    assert res["failed"] == 0, (f"{res['non2xx']} non-2xx responses and socket errors "
                                f"{res['socket_errors']} through HAProxy:\n{res['out']}")
    # every instance carried part of the load: A before its drain, A again
    # after its restart, B throughout
    assert served(a2) > 0, "the restarted instance A got no load back"
    assert served(b) > 0
    for srv in (a2, b):
        assert srv.stop(timeout=util.scaled(15)) == 0, srv.diagnostics()


def test_deploy_md_haproxy_configuration_is_valid(tmp_path):
    """docs/deploy.md's HAProxy configuration is the one operators copy:
    HAProxy itself must accept it."""
    text = (util.REPO_ROOT / "docs/deploy.md").read_text()
    start = text.index("    global\n")
    end = text.index("\n\n", text.index("server web2"))
    cfg = "\n".join(ln[4:] for ln in text[start:end].splitlines()) + "\n"
    assert "option httpchk GET /healthz" in cfg
    (tmp_path / "haproxy.cfg").write_text(cfg.replace("bind :80", f"bind {util.HOST}:{util.free_port()}"))
    r = subprocess.run([HAPROXY, "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr


def deploy_md_haproxy_config(tmp_path) -> str:
    """docs/deploy.md's HAProxy configuration, bound to a free loopback port,
    its runtime socket under tmp_path."""
    text = (util.REPO_ROOT / "docs/deploy.md").read_text()
    start = text.index("    global\n")
    end = text.index("\n\n", text.index("server web2"))
    cfg = "\n".join(ln[4:] for ln in text[start:end].splitlines()) + "\n"
    return (cfg.replace("bind :80", f"bind {util.HOST}:{util.free_port()}")
            .replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock")))


def test_deploy_md_descriptor_figure(tmp_path):
    """docs/deploy.md: `maxconn 20000` needs about 40,000 descriptors, and
    HAProxy refuses to start below what it computes (the figure it quotes)."""
    text = " ".join((util.REPO_ROOT / "docs/deploy.md").read_text().split())
    need = int(re.search(r"configuration HAProxy 2\.6 computes ([\d,]+)", text).group(1).replace(",", ""))
    assert "maxconn 20000" in text and 38000 <= need <= 42000, need
    (tmp_path / "haproxy.cfg").write_text(deploy_md_haproxy_config(tmp_path))
    r = subprocess.run(["prlimit", "--nofile=20000:20000", HAPROXY, "-db", "-f", str(tmp_path / "haproxy.cfg")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0, r.stdout + r.stderr
    assert f"Cannot raise FD limit to {need}, limit is 20000" in r.stderr, r.stderr
