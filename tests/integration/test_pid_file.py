"""pid_file: the master's process id, written once it listens, for
`kill -HUP "$(cat FILE)"` (the serving processes ignore SIGHUP, so pidof,
which may name one of them, is no way to reload) and systemd's PIDFile=.
A second instance on the same file refuses to start; the file is gone after
the master exits."""
from __future__ import annotations

import subprocess

import util
from conftest import A_TXT
from supervision import GEN_RE, wait_log, log_text


def test_pid_file_names_the_master_for_reload_and_stop(docroot, tmp_path):
    pid_file = tmp_path / "spindle.pid"
    srv = util.Server("epoll", docroot.path, tmp_path / "srv", {"pid_file": pid_file}).start()
    try:
        assert util.wait_for(lambda: pid_file.exists() and pid_file.read_text() == f"{srv.proc.pid}\n", 3), \
            pid_file.read_text() if pid_file.exists() else "no pid file"
        # the command spindle(8) documents
        subprocess.run(["sh", "-c", f'kill -HUP "$(cat {pid_file})"'], check=True)
        assert wait_log(srv, GEN_RE.format(n=2, model="epoll"), 5), log_text(srv)
        other = util.run_spindle("--root", str(docroot.path), "--port", str(util.free_port()),
                                 "--set", f"pid_file={pid_file}", timeout=15)
        assert other.returncode == 1, (other.returncode, other.stderr)
        assert f"pid_file: '{pid_file}' is held by another running spindle (master {srv.proc.pid})" \
            in other.stderr, other.stderr
        assert pid_file.read_text() == f"{srv.proc.pid}\n", "the refused instance touched the file"
        assert srv.get("/a.txt").body == A_TXT
        subprocess.run(["sh", "-c", f'kill -TERM "$(cat {pid_file})"'], check=True)
        assert srv.proc.wait(timeout=util.scaled(15)) == 0, srv.diagnostics()
    finally:
        srv.stop()
    assert not pid_file.exists(), "the pid file outlived the master"


def test_stale_pid_file_is_taken_over(docroot, tmp_path):
    """A file left by a master that was killed (nobody holds its lock)."""
    pid_file = tmp_path / "spindle.pid"
    pid_file.write_text("999999\n")
    srv = util.Server("epoll", docroot.path, tmp_path / "srv", {"pid_file": pid_file}).start()
    try:
        assert util.wait_for(lambda: pid_file.read_text() == f"{srv.proc.pid}\n", 3), pid_file.read_text()
    finally:
        assert srv.stop() == 0, srv.diagnostics()
    assert not pid_file.exists()
