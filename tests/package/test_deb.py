"""The Debian package: `make deb` builds it (lintian clean), `dpkg -i`
installs it on this machine, the installed spindle passes --check with
/etc/spindle/spindle.conf and serves a request from a serving process that
runs as the package's `spindle` user, and `dpkg --purge` leaves nothing
behind: no file, no log directory, no user, no unit links.

It installs system-wide, so it needs root, refuses to touch a machine where
a spindle package or user already exists, purges in a finaliser whatever
happens, and stops the one server it starts (by its pid). Where systemd
runs, a policy-rc.d keeps dpkg from starting the service meanwhile."""
from __future__ import annotations

import grp
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import util  # noqa: E402

REPO = util.REPO_ROOT
CONF = "/etc/spindle/spindle.conf"
LOGDIR = Path("/var/log/spindle")
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
# Everything the package puts on the machine, and what its scripts make.
PATHS = [
    "/usr/sbin/spindle", "/usr/bin/spindle-stat", "/etc/spindle/spindle.conf", "/etc/logrotate.d/spindle",
    "/usr/share/man/man8/spindle.8.gz", "/usr/share/man/man5/spindle.conf.5.gz",
    "/lib/systemd/system/spindle.service", "/lib/systemd/system/spindle.socket",
    "/lib/systemd/system/spindle.service.d/debian-logs.conf", "/usr/share/spindle/www/index.html",
    "/usr/share/doc/spindle/copyright",
]
GONE_TOO = ["/etc/spindle", "/var/log/spindle", "/usr/share/spindle", "/usr/share/doc/spindle",
            "/lib/systemd/system/spindle.service.d"]


def run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def package_state() -> str:
    r = run("dpkg-query", "-W", "-f=${db:Status-Abbrev}", "spindle")
    return r.stdout.strip() if r.returncode == 0 else ""


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def unit_links() -> list[str]:
    """Enablement symlinks and deb-systemd-helper state naming spindle."""
    found = []
    for top in ("/etc/systemd/system", "/var/lib/systemd/deb-systemd-helper-enabled",
                "/var/lib/systemd/deb-systemd-helper-masked"):
        for dirpath, dirnames, filenames in os.walk(top):
            found += [os.path.join(dirpath, n) for n in dirnames + filenames if "spindle" in n]
    return found


@pytest.fixture(scope="module")
def deb() -> dict:
    if os.geteuid() != 0:
        pytest.fail("the package test installs system-wide: run it as root (make test does)")
    if package_state() not in ("", "un"):
        pytest.fail(f"a spindle package is already on this machine ({package_state()}): "
                    "this test would replace and purge it")
    if user_exists("spindle") or group_exists("spindle"):
        pytest.fail("a spindle user or group already exists: this test would delete it on purge")
    r = subprocess.run(["make", "-s", "--no-print-directory", "deb"], cwd=REPO, capture_output=True,
                       text=True, timeout=280)
    assert r.returncode == 0, f"make deb failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    path = REPO / r.stdout.strip().splitlines()[-1].removeprefix("make deb: ")
    assert path.is_file() and path.suffix == ".deb", r.stdout[-2000:]
    return {"path": path, "output": r.stdout + r.stderr}


@pytest.fixture(scope="module")
def installed(deb):
    policy = False
    if os.path.isdir("/run/systemd/system") and not POLICY_RC_D.exists():
        # deb-systemd-invoke asks policy-rc.d; 101 = action not allowed
        POLICY_RC_D.write_text("#!/bin/sh\n# made by spindle's tests/package/test_deb.py\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
        policy = True
    try:
        r = run("dpkg", "-i", str(deb["path"]))
        assert r.returncode == 0, f"dpkg -i failed:\n{r.stdout}\n{r.stderr}"
        yield deb
    finally:
        if package_state() not in ("", "un"):
            run("dpkg", "--purge", "spindle")
        if policy:
            POLICY_RC_D.unlink()


def test_make_deb_is_lintian_clean(deb):
    """make deb fails on any lintian error or warning; none is printed either."""
    tags = [ln for ln in deb["output"].splitlines() if ln[:3] in ("E: ", "W: ")]
    assert tags == [], tags


def test_package_installs_files_user_and_a_log_directory_only_root_writes(installed):
    assert package_state() == "ii"
    missing = [p for p in PATHS if not os.path.exists(p)]
    assert missing == [], missing
    conffiles = run("dpkg-query", "-W", "-f=${Conffiles}", "spindle").stdout
    assert "/etc/spindle/spindle.conf" in conffiles and "/etc/logrotate.d/spindle" in conffiles, conffiles
    conf = Path(CONF).read_text()
    for line in ("user = spindle", "root = /usr/share/spindle/www", "access_log = /var/log/spindle/access.log",
                 "error_log = /var/log/spindle/error.log"):
        assert f"\n{line}\n" in conf, line

    u = pwd.getpwnam("spindle")
    assert u.pw_uid < 1000 and u.pw_shell.endswith("nologin"), u  # a system user, no login
    assert grp.getgrgid(u.pw_gid).gr_name == "spindle"

    st = LOGDIR.stat()
    assert (st.st_uid, grp.getgrgid(st.st_gid).gr_name, stat.S_IMODE(st.st_mode)) == (0, "adm", 0o750)
    r = run("runuser", "-u", "spindle", "--", "test", "-w", str(LOGDIR))
    assert r.returncode == 1, "the serving user can write to the log directory"

    r = run("logrotate", "--debug", "/etc/logrotate.d/spindle")
    assert r.returncode == 0 and "error" not in r.stderr.lower(), r.stderr


def serving_pids(master: int) -> list[int]:
    pids = []
    for task in os.listdir(f"/proc/{master}/task"):
        with open(f"/proc/{master}/task/{task}/children") as f:
            pids += [int(p) for p in f.read().split()]
    return pids


def uids(pid: int) -> list[int]:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return [int(x) for x in line.split()[1:]]
    return []


def test_installed_spindle_checks_and_serves_as_the_spindle_user(installed, tmp_path):
    r = run("/usr/sbin/spindle", "--config", CONF, "--check", timeout=30)
    assert r.returncode == 0, r.stderr
    # not through systemd (not PID 1 here, and a test must not leave a
    # service behind): the installed binary and configuration, on a free port
    port = util.free_port()
    out = open(tmp_path / "stderr", "w+")
    proc = subprocess.Popen(["/usr/sbin/spindle", "--config", CONF, "--port", str(port), "--set", "workers=1"],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd="/")
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection((util.HOST, port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, f"spindle exited {proc.returncode}: {Path(tmp_path / 'stderr').read_text()}"
                assert time.monotonic() < deadline, "spindle did not listen within 15 s"
                time.sleep(0.05)
        with socket.create_connection((util.HOST, port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        status = int(data.split(b" ", 2)[1])
        body = data.split(b"\r\n\r\n", 1)[1]
        assert status == 200 and b"spindle" in body, data[:300]

        spindle_uid = pwd.getpwnam("spindle").pw_uid
        kids = serving_pids(proc.pid)
        assert kids, "the master has no serving process"
        for pid in kids:
            assert uids(pid) == [spindle_uid] * 4, f"serving process {pid}: Uid {uids(pid)}"
        assert uids(proc.pid)[0] == 0, "the master keeps root (to bind, open logs and reload)"
        access = (LOGDIR / "access.log").read_text()
        # only the root master opens the logs; the serving user never owns them
        assert (LOGDIR / "access.log").stat().st_uid == 0
        assert '"GET / HTTP/1.1" 200' in access, access
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        out.close()
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()


def test_purge_leaves_nothing_behind(installed):
    r = run("dpkg", "--purge", "spindle")
    assert r.returncode == 0, f"dpkg --purge failed:\n{r.stdout}\n{r.stderr}"
    assert package_state() in ("", "un")
    left = [p for p in PATHS + GONE_TOO if os.path.lexists(p)]
    assert left == [], left
    assert not user_exists("spindle") and not group_exists("spindle")
    assert unit_links() == []
