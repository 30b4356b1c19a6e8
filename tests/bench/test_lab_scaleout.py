"""bench/scaleout.py: its HAProxy configuration is one HAProxy accepts, and
the experiment is registered outside the default run."""
from __future__ import annotations

import subprocess

import pytest

from bench import experiments, scaleout


@pytest.mark.parametrize("backends", [[18081], [18081, 18082]])
@pytest.mark.parametrize("health_path", [None, "/healthz"])
def test_haproxy_configuration_is_valid(tmp_path, backends, health_path):
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(scaleout.haproxy_config(18080, backends, health_path))
    assert ("option httpchk GET /healthz" in cfg.read_text()) == (health_path is not None)
    r = subprocess.run([scaleout.HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr
    assert cfg.read_text().count("    server s") == len(backends)


def test_scaleout_is_registered_outside_the_default_run():
    assert experiments.EXPERIMENTS["scaleout"] is scaleout.scaleout
    assert "scaleout" not in experiments.DEFAULT
