"""pid_file: the master's process id, written once it listens, for
`kill -HUP "$(cat FILE)"` (the serving processes ignore SIGHUP, so pidof,
which may name one of them, is no way to reload) and systemd's PIDFile=.
A second instance on the same file refuses to start; the file is gone after
the master exits."""
from __future__ import annotations

import fcntl
import os
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


def test_pid_file_naming_another_file_leaves_it_alone(docroot, tmp_path):
    """pid_file pointed by mistake at a file that holds something else (a
    configuration, a key) would be truncated to the pid, then deleted at
    exit: refused at start and under --check, and never quoted."""
    secret = tmp_path / "secret.key"
    secret.write_text("TOPSECRET-not-a-pid\n")
    secret.chmod(0o600)
    base = ["--root", str(docroot.path), "--port", str(util.free_port()), "--set", f"pid_file={secret}"]
    for extra in ([], ["--check"]):
        r = util.run_spindle(*base, *extra, timeout=15)
        assert r.returncode == 2 and f"pid_file: '{secret}' exists and does not hold a process id" in r.stderr, \
            (extra, r.returncode, r.stderr)
        assert "TOPSECRET" not in r.stderr, r.stderr
    assert secret.read_text() == "TOPSECRET-not-a-pid\n"


def test_locked_pid_file_content_is_not_quoted(docroot, tmp_path):
    """A file some other program holds locked: the refusal names a master
    only when the file holds a pid."""
    other = tmp_path / "other.pid"
    other.write_text("TOPSECRET\n")
    with open(other) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        r = util.run_spindle("--root", str(docroot.path), "--port", str(util.free_port()),
                             "--set", f"pid_file={other}", timeout=15)
    assert r.returncode != 0 and f"pid_file: '{other}'" in r.stderr, (r.returncode, r.stderr)
    assert "TOPSECRET" not in r.stderr, r.stderr
    assert other.read_text() == "TOPSECRET\n"


def test_pid_file_with_another_name_or_owner_is_refused(docroot, tmp_path):
    """A hard link (the same file under another name, which the pid would
    overwrite) and a file another user owns (and could rewrite): refused."""
    target = tmp_path / "elsewhere"
    target.write_text("")
    linked = tmp_path / "linked.pid"
    os.link(target, linked)
    cases = {linked: "has another name (a hard link)"}
    if os.geteuid() == 0:
        owned = tmp_path / "owned.pid"
        owned.write_text("")
        os.chown(owned, 65534, 65534)
        cases[owned] = "belongs to another user (uid 65534)"
    for path, said in cases.items():
        for extra in ([], ["--check"]):
            r = util.run_spindle("--root", str(docroot.path), "--port", str(util.free_port()),
                                 "--set", f"pid_file={path}", *extra, timeout=15)
            assert r.returncode == 2 and f"pid_file: '{path}' {said}" in r.stderr, (path, extra, r.returncode,
                                                                                      r.stderr)
    assert target.read_text() == ""
