"""What start-up refuses, --check refuses too, with the same exit status and
the same words on standard error (whatever error_log names): 2 for a
configuration error found with or without --check, 1 for a failure while
starting or running (a port already taken). systemd's ExecReload runs
--check before the SIGHUP, so a check that passes must not be a reload
refused."""
from __future__ import annotations

import grp
import os
import shutil
import socket
from pathlib import Path

import pytest

import util

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")


def _cases(docroot, certs, tmp_path) -> dict[str, tuple[list[str], str]]:
    """name -> (--set arguments, what stderr must say)."""
    locked = tmp_path / "locked"  # root's, 0700: www-data cannot enter
    locked.mkdir()
    (locked / "a.txt").write_text("a\n")
    locked.chmod(0o700)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    link = tmp_path / "access.log"
    link.symlink_to(tmp_path / "elsewhere.log")
    shared = tmp_path / "shared"  # writable by a group, not sticky: its members could swap the log
    shared.mkdir()
    shutil.chown(shared, 0, grp.getgrnam("staff").gr_gid)
    shared.chmod(0o775)
    above = tmp_path / "above"  # a group may rename a directory higher up, and put a link in its place
    (above / "logs").mkdir(parents=True)
    shutil.chown(above, 0, grp.getgrnam("staff").gr_gid)
    above.chmod(0o775)
    fifo = tmp_path / "fifo"  # opened blocking, it would hang the check and the master
    os.mkfifo(fifo)
    tls = ["tls=on", f"tls_certificate_key={certs.key}"]
    return {
        "unknown user": (["user=no-such-user-here"], "no user 'no-such-user-here'"),
        "unknown group": (["group=no-such-group-here"], "no group 'no-such-group-here'"),
        "root the user cannot enter": ([f"root={locked}", "user=www-data"], f"cannot enter {locked}"),
        "log path is a link": ([f"access_log={link}"], "symbolic link"),
        "log directory writable by a group": ([f"access_log={shared / 'access.log'}"],
                                              f"the directory {shared} on its path is writable by group "
                                              "'staff'"),
        "log under a directory a group may write": ([f"error_log={above / 'logs' / 'error.log'}"],
                                                    f"the directory {above} on its path is writable by group "
                                                    "'staff'"),
        "pid file directory writable by a group": ([f"pid_file={shared / 'spindle.pid'}"],
                                                   f"pid_file: {shared / 'spindle.pid'}: the directory {shared} on "
                                                   "its path is writable by group 'staff'"),
        "certificate not PEM": ([*tls, f"tls_certificate={garbage}"], str(garbage)),
        "certificate a FIFO": ([*tls, f"tls_certificate={fifo}"], f"tls_certificate '{fifo}': not a regular file"),
        "key a FIFO": (["tls=on", f"tls_certificate={certs.chain}", f"tls_certificate_key={fifo}"],
                       f"tls_certificate_key '{fifo}': not a regular file"),
        "certificate a device": ([*tls, "tls_certificate=/dev/zero"],
                                 "tls_certificate '/dev/zero': not a regular file"),
        "types_file a FIFO": ([f"types_file={fifo}"], f"{fifo}: not a regular file"),
    }


CASES = ["unknown user", "unknown group", "root the user cannot enter", "log path is a link",
         "log directory writable by a group", "log under a directory a group may write",
         "pid file directory writable by a group", "certificate not PEM", "certificate a FIFO", "key a FIFO",
         "certificate a device", "types_file a FIFO"]


@needs_root
@pytest.mark.parametrize("case", CASES)
def test_check_fails_where_start_fails_with_one_status(case, docroot, certs, tmp_path):
    sets, said = _cases(docroot, certs, tmp_path)[case]
    error_log = tmp_path / "error.log"  # a file: the reason must still reach stderr
    args = ["--root", str(docroot.path), "--port", str(util.free_port()), "--set", f"error_log={error_log}"]
    for s in sets:
        args += ["--set", s]
    check = util.run_spindle(*args, "--check", timeout=15)
    start = util.run_spindle(*args, timeout=15)
    assert check.returncode == 2 and said in check.stderr, (check.returncode, check.stderr)
    assert start.returncode == 2 and said in start.stderr, (start.returncode, start.stderr)


def test_runtime_failure_exits_1_and_says_why_on_stderr(docroot, tmp_path):
    """A port another socket holds is no configuration error: status 1, and
    the terminal says so although error_log is a file."""
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind((util.HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = util.run_spindle("--root", str(docroot.path), "--port", str(port), "--set",
                             f"error_log={tmp_path / 'error.log'}", timeout=15)
    assert r.returncode == 1 and f"cannot listen on {util.HOST}:{port}" in r.stderr, (r.returncode, r.stderr)


def test_check_header_names_its_source_once(docroot, tmp_path):
    r = util.run_spindle("--root", str(docroot.path), "--check", timeout=15)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# effective configuration (from defaults and command line)\n"), r.stdout[:120]
    conf = tmp_path / "s.conf"
    conf.write_text("[server]\nport = 8123\n")
    r = util.run_spindle("--root", str(docroot.path), "--config", str(conf), "--check", timeout=15)
    assert r.stdout.startswith(f"# effective configuration (from {conf})\n"), r.stdout[:120]
