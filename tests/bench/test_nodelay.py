"""tools/nodelay's LD_PRELOAD shim, which the lab's delayed-ACK experiment
(python -m bench --only nodelay) loads into spindle and nginx: with
NODELAY_SHIM=off a setsockopt(TCP_NODELAY, 1) sets 0, with NODELAY_SHIM=on
every accepted socket gets TCP_NODELAY, and without the variable nothing
changes. Checked on a Python process, whose socket calls go through libc as
the servers' do."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import experiments, lab  # noqa: E402

PROBE = r"""
import socket
ls = socket.socket()
ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)      # as spindle does on its listeners
ls.bind(("127.0.0.1", 0)); ls.listen(1)
c = socket.create_connection(ls.getsockname())
a, _ = ls.accept()                                             # accept4 in CPython
print(ls.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0,
      a.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0)
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    lb = lab.Lab(tmp_path_factory.mktemp("out"), smoke=True, repeats=1, spindle_bin=REPO / "spindle",
                 cell_s=1.0, warmup_s=0, cores=[1])
    try:
        yield lb.nodelay_shim()
    finally:
        lb.cleanup()


def probe(shim: Path | None, mode: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "NODELAY_SHIM")}
    if shim:
        env["LD_PRELOAD"] = str(shim)
    if mode:
        env["NODELAY_SHIM"] = mode
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          check=True, timeout=20).stdout.strip()


def test_off_turns_the_servers_own_setting_off_and_the_accepted_socket_inherits_it(shim):
    assert probe(None, None) == "True True"          # Linux copies the listener's TCP_NODELAY on accept
    assert probe(shim, "off") == "False False"


def test_on_sets_it_on_every_accepted_socket(shim):
    env_probe = PROBE.replace("ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)", "pass")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "NODELAY_SHIM")}
    out = lambda extra: subprocess.run([sys.executable, "-c", env_probe], env={**env, **extra}, capture_output=True,
                                       text=True, check=True, timeout=20).stdout.strip()
    assert out({}) == "False False"
    assert out({"LD_PRELOAD": str(shim), "NODELAY_SHIM": "on"}) == "False True"


def test_without_the_variable_the_shim_changes_nothing(shim):
    assert probe(shim, None) == "True True"
    assert probe(shim, "bogus") == "True True"


def test_the_experiment_is_outside_the_default_run_and_compares_both_ways():
    assert "nodelay" in experiments.EXPERIMENTS and "nodelay" not in experiments.DEFAULT
    from bench.__main__ import make_plan
    (p,) = make_plan(["nodelay"], ["epoll"])
    assert set(p["names"]) == {f"{srv} wrk -c50 {d} pipelined" for d in experiments.NODELAY_DEPTHS
                               for srv in ("epoll", "epoll TCP_NODELAY off", "nginx", "nginx tcp_nopush off",
                                         "nginx tcp_nopush off, TCP_NODELAY on")}
