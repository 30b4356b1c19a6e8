"""Least privilege. Serving processes (and the workers they fork)
run as `user`, supplementary groups cleared, unable to regain root, while
the master keeps root; root without `user` warns. Landlock confines what a
serving process reads to the root, even when the path walk lets a request
out (symlinks = all with a link pointing outside): the kernel refuses the
open. Only the master (root) opens the logs, never through a link, and never
in a directory where the user could plant one; the serving processes write
to the descriptors it gives them, also after a rotation (SIGUSR1); a
reload's new serving process drops again."""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

import util
from conftest import A_TXT, OUTSIDE_SECRET
from supervision import GEN_RE, wait_log, log_text

USER = "www-data"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")


def _user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"no user {USER} on this machine (Debian's base-passwd has it)")


def ids(pid: int) -> dict[str, list[str]]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in ("Uid", "Gid", "Groups", "NoNewPrivs", "CapEff", "CapPrm"):
            out[key] = val.split()
    return out


def descendants(pid: int) -> list[int]:
    out = []
    for c in util.proc_children(pid):
        out += [c] + descendants(c)
    return out


@pytest.fixture
def workdir():
    """A server directory where a sanitizer build's serving process, as the
    dropped user, can write its report: sticky and writable by all, as /tmp,
    so the user still cannot replace the logs root made there (a directory
    where it could is refused)."""
    d = Path(tempfile.mkdtemp(prefix="spindle-privs-"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def dropped_server(model, docroot, work: Path, **settings) -> util.Server:
    return util.Server(model, docroot.path, work, {"user": USER, **settings}).start()


@needs_root
def test_serving_processes_run_as_user(model, docroot, workdir):
    pw = _user()
    srv = dropped_server(model, docroot, workdir, workers=2)
    try:
        master = srv.proc.pid
        assert srv.get("/a.txt").body == A_TXT
        procs = util.wait_for(lambda: descendants(master), 3)
        assert procs, "no serving process"
        if model == "prefork":  # its workers too
            assert util.wait_for(lambda: len(descendants(master)) >= 3, 3), descendants(master)
        assert ids(master)["Uid"] == ["0"] * 4, "the master keeps root (it binds on reload)"
        for pid in descendants(master):
            try:
                st = ids(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # a fork child that served its connection and left
            assert st["Uid"] == [str(pw.pw_uid)] * 4, (pid, st)  # real, effective, saved, fs
            assert st["Gid"] == [str(pw.pw_gid)] * 4, (pid, st)
            assert st["Groups"] == [], (pid, st)
        assert "running as root without `user`" not in log_text(srv)
    finally:
        assert srv.stop() == 0, srv.diagnostics()


@needs_root
def test_serving_processes_cannot_regain_root_through_exec(model, docroot, workdir):
    """Dropping the user clears the capabilities, but the bounding set stays
    full: a serving process taken over could exec a set-uid program (su,
    mount, a buggy one) and be root again. no_new_privs forbids that, also
    with Landlock off (which set it as a side effect) and outside a unit
    with NoNewPrivileges=."""
    srv = dropped_server(model, docroot, workdir, workers=2, landlock="off")
    try:
        assert srv.get("/a.txt").body == A_TXT
        procs = util.wait_for(lambda: descendants(srv.proc.pid), 3)
        assert procs, "no serving process"
        for pid in procs:
            try:
                st = ids(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # a fork child that served its connection and left
            assert st["NoNewPrivs"] == ["1"], (pid, st)
            assert st["CapEff"] == st["CapPrm"] == ["0000000000000000"], (pid, st)
    finally:
        assert srv.stop() == 0, srv.diagnostics()


@needs_root
@pytest.mark.parametrize("model", ["epoll", "prefork"])
def test_logs_reopen_and_reload_as_user(model, docroot, workdir):
    """After a rotation (rename, SIGUSR1) the master opens the new files and
    the serving processes (prefork: each worker) take its descriptors, under
    Landlock and as the user, though the files stay root's; a reload's new
    serving process drops as well."""
    pw = _user()
    srv = dropped_server(model, docroot, workdir, workers=2)
    try:
        assert srv.get("/a.txt").body == A_TXT
        assert util.wait_for(lambda: srv.access_log.exists() and "GET /a.txt" in srv.access_log.read_text(), 5)
        srv.access_log.rename(srv.access_log.with_suffix(".1"))
        srv.error_log.rename(srv.error_log.with_suffix(".1"))
        srv.signal(signal.SIGUSR1)
        assert wait_log(srv, r"\[info\] \[\d+\] logs reopened \(", 5), srv.diagnostics()
        time.sleep(0.3)
        for i in range(6):  # over both workers of prefork
            assert srv.get(f"/a.txt?after{i}").body == A_TXT
        assert util.wait_for(lambda: srv.access_log.exists()
                             and all(f"after{i}" in srv.access_log.read_text() for i in range(6)), 5), \
            "a serving process did not take the new access log"
        assert "after" not in srv.access_log.with_suffix(".1").read_text()
        assert srv.access_log.stat().st_uid == 0, "the log was handed to the user"
        srv.signal(signal.SIGHUP)
        m = wait_log(srv, GEN_RE.format(n=2, model=model), 5)
        assert m, srv.diagnostics()
        gen2 = int(m.group(1))
        # (logged by the master at the fork, a moment before the child drops)
        assert util.wait_for(lambda: ids(gen2)["Uid"] == [str(pw.pw_uid)] * 4, 3), ids(gen2)
        assert srv.get("/a.txt").body == A_TXT
    finally:
        assert srv.stop() == 0, srv.diagnostics()


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"  # beneath a directory of root's, as /etc is
    victim.write_text("secret\n")
    victim.chmod(0o600)
    return victim


@needs_root
def test_log_link_refused_at_start(docroot, tmp_path):
    """A log path that is a symlink (or a hard link) is refused, with or
    without --check: root would write to the link's target."""
    victim = _victim(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "access.log").symlink_to(victim)
    os.link(victim, logs / "error.log")
    base = ["--root", str(docroot.path), "--port", str(util.free_port())]
    for extra in ([], ["--check"]):
        r = util.run_spindle(*base, *extra, "--set", f"access_log={logs / 'access.log'}", timeout=15)
        assert r.returncode == 2 and "symbolic link" in r.stderr, (extra, r.returncode, r.stderr)
        r = util.run_spindle(*base, *extra, "--set", f"error_log={logs / 'error.log'}", timeout=15)
        assert r.returncode == 2 and "hard link" in r.stderr, (extra, r.returncode, r.stderr)
    assert victim.read_text() == "secret\n"


@needs_root
@pytest.mark.parametrize("when", ["reopen", "reload"])
def test_log_link_planted_by_the_user_is_never_followed(docroot, workdir, tmp_path, when):
    """The user, in a log directory it can write to, plants a link where the
    next log file is to be, before SIGUSR1 or SIGHUP: the master (root) must
    neither write its own lines through it nor hand it to a new serving
    process (nginx's CVE-2016-1247). It keeps the old files and says why."""
    victim = _victim(tmp_path)
    srv = dropped_server("epoll", docroot, workdir)
    try:
        assert srv.get("/a.txt").body == A_TXT
        assert util.wait_for(lambda: srv.access_log.exists() and "GET /a.txt" in srv.access_log.read_text(), 5)
        old_error = srv.error_log.with_suffix(".1")
        for log in (srv.access_log, srv.error_log):
            log.rename(log.with_suffix(".1"))
            log.symlink_to(victim)  # the user's move, as logrotate runs
        if when == "reopen":
            srv.signal(signal.SIGUSR1)
            time.sleep(0.3)
        srv.signal(signal.SIGHUP)  # the master logs, and a new serving process takes its logs
        time.sleep(1.0)  # past the new generation's start-up grace
        assert srv.get("/a.txt?later").body == A_TXT
        time.sleep(0.2)
        assert victim.read_text() == "secret\n", "root wrote through the link"
        if when == "reopen":
            msg = r"error_log: cannot reopen '.*': it is a symbolic link, which is never followed"
            assert re.search(msg, old_error.read_text()), old_error.read_text()
        # a reload to the same paths keeps the files open: nothing is opened by path
        assert re.search(GEN_RE.format(n=2, model="epoll"), old_error.read_text()), old_error.read_text()
        assert "later" in srv.access_log.with_suffix(".1").read_text()
        assert victim.stat().st_uid == 0 and victim.stat().st_gid == 0, "the link's target was given away"
    finally:
        srv.error_log.unlink()
        srv.error_log = old_error
        assert srv.stop() == 0, srv.diagnostics()


@needs_root
def test_reload_to_a_log_path_that_is_a_link_is_refused(docroot, workdir, tmp_path):
    """A reload whose configuration moves the access log to a path that is a
    link is refused; the old files and serving process stay."""
    victim = _victim(tmp_path)
    conf = tmp_path / "spindle.conf"
    conf.write_text(f"[log]\naccess_log = {workdir / 'access.log'}\n")
    srv = util.Server("epoll", docroot.path, workdir, {"user": USER}, extra_args=["--config", str(conf)])
    del srv.settings["access_log"]
    srv.start()
    try:
        assert srv.get("/a.txt").body == A_TXT
        (workdir / "moved.log").symlink_to(victim)
        conf.write_text(f"[log]\naccess_log = {workdir / 'moved.log'}\n")
        srv.signal(signal.SIGHUP)
        assert wait_log(srv, r"access_log: cannot open '.*moved.log': it is a symbolic link", 5), log_text(srv)
        assert wait_log(srv, r"reload: cannot open the new configuration's logs \(see above\); still serving", 5)
        assert srv.get("/a.txt?after").body == A_TXT
        assert util.wait_for(lambda: "after" in (workdir / "access.log").read_text(), 5)
        assert victim.read_text() == "secret\n", "root wrote through the link"
    finally:
        assert srv.stop() == 0, srv.diagnostics()


@needs_root
def test_log_directory_the_user_may_write_is_refused(docroot, tmp_path):
    """A log directory the user owns lets it replace a log by a link at any
    time: refused at start and under --check (status 2), and at a reload,
    which keeps serving with the old configuration."""
    pw = _user()
    logs = Path(tempfile.mkdtemp(prefix="spindle-logs-"))  # one the user can reach
    logs.chmod(0o755)
    shutil.chown(logs, pw.pw_uid, pw.pw_gid)
    base = ["--root", str(docroot.path), "--port", str(util.free_port()), "--set", f"user={USER}",
            "--set", f"access_log={logs / 'access.log'}"]
    for extra in ([], ["--check"]):
        r = util.run_spindle(*base, *extra, timeout=15)
        assert r.returncode == 2 and "writable by the serving user 'www-data'" in r.stderr, \
            (extra, r.returncode, r.stderr)
    assert not (logs / "access.log").exists()
    work = tmp_path / "work"
    work.mkdir()
    srv = util.Server("epoll", docroot.path, work, {"user": USER, "access_log": logs / "access.log"})
    shutil.chown(logs, 0, 0)
    srv.start()
    try:
        shutil.chown(logs, pw.pw_uid, pw.pw_gid)
        srv.signal(signal.SIGHUP)
        assert wait_log(srv, r"writable by the serving user", 5), log_text(srv)
        assert wait_log(srv, r"reload: cannot set up the new configuration; still serving", 5), log_text(srv)
        assert srv.get("/a.txt").body == A_TXT
    finally:
        assert srv.stop() == 0, srv.diagnostics()
        shutil.rmtree(logs, ignore_errors=True)


@needs_root
def test_the_units_capabilities_let_the_master_run_its_dropped_processes(docroot, workdir):
    """Under spindle.service's CapabilityBoundingSet (setpriv stands in for
    systemd), with `user` set: the master must still signal serving processes
    that are no longer root's (CAP_KILL: a reload retires the old generation,
    SIGTERM stops them), hand them the logs (CAP_CHOWN) and reopen those
    files, then the user's, on a reload (CAP_DAC_OVERRIDE). Without those,
    every kill failed with EPERM (old generations served on forever), and
    the master lost its logs at the first reload."""
    unit = (util.REPO_ROOT / "contrib/spindle.service").read_text()
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split()
    bounding = "-all," + ",".join("+" + c.lower().removeprefix("cap_") for c in caps)
    srv = util.Server("epoll", docroot.path, workdir, {"user": USER})
    argv = srv.argv
    srv.argv = lambda: ["setpriv", f"--bounding-set={bounding}", *argv()]
    srv.start()
    try:
        assert srv.get("/a.txt").body == A_TXT
        srv.signal(signal.SIGHUP)
        assert wait_log(srv, r"generation 1 \(pid \d+\) finished: exited with status 0", 10), log_text(srv)
        srv.signal(signal.SIGUSR1)
        assert srv.get("/a.txt").body == A_TXT
        assert "Operation not permitted" not in log_text(srv), log_text(srv)
        # the master reopened the logs, now the user's, at the reload
        assert "generation 2:" in log_text(srv) and "cannot open" not in (workdir / "stderr.txt").read_text()
    finally:
        rc = srv.stop()
    assert rc == 0 and "did not drain in time" not in log_text(srv), srv.diagnostics()


def test_root_without_user_warns(servers):
    srv = servers()
    if os.geteuid() == 0:
        assert util.wait_for(lambda: "running as root without `user`" in log_text(srv), 3), log_text(srv)
    else:
        assert "running as root without `user`" not in log_text(srv)


def test_unknown_user_is_refused_at_start(docroot):
    r = util.run_spindle("--root", str(docroot.path), "--port", str(util.free_port()),
                         "--set", "user=no-such-user-here", timeout=15)
    assert r.returncode != 0 and "no-such-user-here" in r.stderr, (r.returncode, r.stderr)


def test_landlock_confines_reads_to_the_root(servers):
    """symlinks = all lets the walk follow link_out.txt out of the root; with
    Landlock (the default) the kernel still refuses the open, and the same
    request with landlock = off shows that nothing else stood in the way."""
    srv = servers(symlinks="all")
    assert util.wait_for(lambda: "landlock (ABI" in log_text(srv), 3), \
        f"Landlock was not applied (this kernel has it):\n{log_text(srv)}"
    r = srv.get("/link_out.txt")
    assert r.status == 403 and OUTSIDE_SECRET not in r.body, (r.status, r.body[:80])
    assert srv.get("/a.txt").body == A_TXT
    open_srv = servers(symlinks="all", landlock="off")
    assert open_srv.get("/link_out.txt").body == OUTSIDE_SECRET


@needs_root
def test_each_403_says_why_at_debug_level(workdir, tmp_path):
    """A file the user may not read, a link out of the root that Landlock
    blocks (symlinks = all), a directory with no index file, a device: each
    answers 403 and, at log_level = debug, the error log says which path and
    why (it said nothing, even at debug)."""
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o755)
    (root / "ok.txt").write_text("ok\n")
    (root / "private.txt").write_text("root's\n")
    (root / "private.txt").chmod(0o600)
    (root / "empty").mkdir()
    (root / "link_out.txt").symlink_to("/etc/hostname")  # readable by all: only Landlock stops it
    (root / "null").symlink_to("/dev/null")
    srv = util.Server("epoll", root, workdir, {"user": USER, "log_level": "debug", "symlinks": "all"}).start()
    try:
        assert srv.get("/ok.txt").body == b"ok\n"
        # said once at start: symlinks = all does not reach past Landlock
        assert wait_log(srv, r"\[warn\] .*landlock: symlinks = all, but a link leading out of .* is still "
                             r"refused \(403\)", 3), log_text(srv)
        for target, why in (("/private.txt", r"permission denied"),
                            ("/link_out.txt", r"permission denied"),
                            ("/empty/", r"a directory without index\.html, and autoindex is off"),
                            ("/null", r"not a regular file")):
            assert srv.get(target).status == 403, target
            assert wait_log(srv, rf"\[debug\] \[\d+\] 403 for '{re.escape(target.rstrip('/'))}.*': {why}", 3), \
                (target, log_text(srv))
    finally:
        assert srv.stop() == 0, srv.diagnostics()


@needs_root
def test_log_below_a_directory_the_user_may_write_is_refused(docroot, tmp_path):
    """The user owns a directory higher up (ga/logs, root's logs in the
    user's ga): it could move logs away and put a link to a root-only
    directory in its place, and the master would create its logs there at
    the next reopen. Refused at start, under --check and at a reload, naming
    the directory; so is a path that reaches it through a symbolic link."""
    pw = _user()
    top = Path(tempfile.mkdtemp(prefix="spindle-ga-"))  # one the user can reach
    try:
        top.chmod(0o755)
        ga = top / "ga"
        (ga / "logs").mkdir(parents=True)
        shutil.chown(ga, pw.pw_uid, pw.pw_gid)
        via = top / "via"  # root's, 0755: only its target is the user's
        via.mkdir()
        (via / "logs").symlink_to(ga / "logs")
        base = ["--root", str(docroot.path), "--port", str(util.free_port()), "--set", f"user={USER}"]
        for log in (ga / "logs" / "access.log", via / "logs" / "access.log"):
            for extra in ([], ["--check"]):
                r = util.run_spindle(*base, "--set", f"access_log={log}", *extra, timeout=15)
                assert r.returncode == 2, (log, extra, r.returncode, r.stderr)
                assert f"access_log: {log}: the directory {ga} on its path is writable by the serving user " \
                       f"'{USER}'" in r.stderr, (log, extra, r.stderr)
        # a link within a link's target: b/c -> d, all root's but b
        (top / "d" / "logs").mkdir(parents=True)
        b = top / "b"
        b.mkdir()
        (b / "c").symlink_to(top / "d")
        shutil.chown(b, pw.pw_uid, pw.pw_gid)
        (top / "via2").mkdir()
        (top / "via2" / "logs").symlink_to(b / "c" / "logs")
        r = util.run_spindle(*base, "--set", f"access_log={top / 'via2' / 'logs' / 'access.log'}", "--check",
                             timeout=15)
        assert r.returncode == 2 and f"the directory {b} on its path is writable by the serving user" in r.stderr, \
            (r.returncode, r.stderr)
        ga.chmod(0o555)  # not writable, but its owner may make it so
        r = util.run_spindle(*base, "--set", f"access_log={ga / 'logs' / 'access.log'}", "--check", timeout=15)
        assert r.returncode == 2 and f"the directory {ga} on its path is owned by the serving user '{USER}'" \
            in r.stderr, (r.returncode, r.stderr)
        ga.chmod(0o755)
        assert not (ga / "logs" / "access.log").exists()
        work = tmp_path / "work"
        work.mkdir()
        shutil.chown(ga, 0, 0)
        srv = util.Server("epoll", docroot.path, work, {"user": USER, "access_log": ga / "logs" / "access.log"})
        srv.start()
        try:
            shutil.chown(ga, pw.pw_uid, pw.pw_gid)
            srv.signal(signal.SIGHUP)
            assert wait_log(srv, rf"the directory {re.escape(str(ga))} on its path is writable by the serving user",
                            5), log_text(srv)
            assert wait_log(srv, r"reload: cannot set up the new configuration; still serving", 5), log_text(srv)
            assert srv.get("/a.txt").body == A_TXT
        finally:
            assert srv.stop() == 0, srv.diagnostics()
    finally:
        shutil.rmtree(top, ignore_errors=True)


@needs_root
def test_log_file_another_user_put_in_a_sticky_directory_is_refused(docroot, workdir):
    """In a sticky directory writable by all (/tmp), another user may create
    the log's name first, mode 0666: root's lines would go to a file that
    user reads and may empty or rewrite at will."""
    pw = _user()
    planted = workdir / "access.log"
    planted.write_text("")
    planted.chmod(0o666)
    shutil.chown(planted, pw.pw_uid, pw.pw_gid)
    base = ["--root", str(docroot.path), "--port", str(util.free_port()), "--set", f"access_log={planted}"]
    for extra in ([], ["--check"]):
        r = util.run_spindle(*base, *extra, timeout=15)
        assert r.returncode == 2 and f"access_log: cannot open '{planted}': the file belongs to another user" \
            in r.stderr, (extra, r.returncode, r.stderr)
    assert planted.read_text() == ""


@needs_root
def test_pid_file_in_a_directory_the_user_may_write_is_refused(docroot):
    """The user could put another process's id in the file, which `kill -USR1
    $(cat FILE)` (and logrotate) would then signal, or remove it and let a
    second instance start."""
    pw = _user()
    run = Path(tempfile.mkdtemp(prefix="spindle-run-"))
    try:
        run.chmod(0o755)
        shutil.chown(run, pw.pw_uid, pw.pw_gid)
        pid_file = run / "spindle.pid"
        base = ["--root", str(docroot.path), "--port", str(util.free_port()), "--set", f"user={USER}",
                "--set", f"pid_file={pid_file}"]
        for extra in ([], ["--check"]):
            r = util.run_spindle(*base, *extra, timeout=15)
            assert r.returncode == 2 and f"pid_file: {pid_file}: the directory {run} on its path is writable by " \
                f"the serving user '{USER}'" in r.stderr, (extra, r.returncode, r.stderr)
        assert not pid_file.exists()
    finally:
        shutil.rmtree(run, ignore_errors=True)
