"""Where spindle listens. Several `listen` addresses at once, IPv6
(v6-only and dual-stack), UNIX domain sockets (mode, stale files replaced,
live ones left alone, removed at exit), under every model; the access log
names the peer per family; a reload adds and removes addresses under load
and refuses one that cannot be bound; socket activation (LISTEN_FDS) from
descriptors a test binds itself. Connections go to 127.0.0.1, ::1 and UNIX
sockets under the test's own directory only."""
from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

import util
from conftest import A_TXT
from supervision import GEN_RE, KeepAliveLoad, ConfigServer, wait_log, log_text

needs_ipv6 = pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 in this Python")


def unix_get(path: Path, target: str = "/a.txt", timeout: float = 5) -> util.Response:
    """GET over a UNIX socket, with the strict parser of util.Conn."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    c = util.Conn(s, timeout)
    try:
        c.send(util.build_request("GET", target, headers={"Connection": "close"}))
        return c.read_response(timeout=timeout)
    finally:
        c.close()


def v6_get(port: int, host: str = "::1", target: str = "/a.txt") -> util.Response:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((host, port))
    c = util.Conn(s, 5)
    try:
        c.send(util.build_request("GET", target, headers={"Connection": "close"}))
        return c.read_response(timeout=5)
    finally:
        c.close()


def v4_get(port: int, target: str = "/a.txt") -> util.Response:
    with util.Conn.open(port, timeout=5) as c:
        c.send(util.build_request("GET", target, headers={"Connection": "close"}))
        return c.read_response(timeout=5)


def _unix_accepts(path: str) -> bool:
    """A connect succeeds (a stale socket file left by a crash refuses)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


class ListenServer(util.Server):
    """A server whose addresses are `listen` lines: 127.0.0.1 on the port the
    harness picks (so its readiness check works) plus `more`, where {port}
    stands for that port."""

    def __init__(self, model, root, workdir, more: list[str], settings=None):
        super().__init__(model, root, workdir, settings)
        self.more = more

    def argv(self) -> list[str]:
        a = super().argv()
        for line in [f"127.0.0.1:{self.port}"] + self.more:
            a += ["--set", "listen=" + line.format(port=self.port)]
        return a

    def start(self, *args, **kwargs) -> "ListenServer":
        """Ready once every address is: the harness's check connects to the
        first one, and the master may still be binding the others (a slow
        sanitizer build under load showed a UNIX socket not there yet)."""
        super().start(*args, **kwargs)
        for line in self.more:
            if line.startswith("unix:") and self.proc.poll() is None:
                path = line[len("unix:"):].split()[0]
                util.wait_for(lambda: _unix_accepts(path) or self.proc.poll() is not None, util.scaled(5))
        return self


@needs_ipv6
def test_ipv4_ipv6_and_unix_at_once(model, docroot, tmp_path):
    """Every model serves the three families at once; epoll/uring with two
    loops, so each loop must take its share of every address; the access log
    names the peer of each; the socket file gets its mode and goes at exit."""
    sock = tmp_path / "s.sock"
    srv = ListenServer(model, docroot.path, tmp_path / "srv", [f"[::1]:{{port}}", f"unix:{sock} mode=0660"],
                       settings={"workers": 2})
    srv.start()
    try:
        assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o660, \
            oct(sock.stat().st_mode)
        for _ in range(4):  # several connections: with reuseport, both loops' sockets
            assert v4_get(srv.port).body == A_TXT
            assert v6_get(srv.port).body == A_TXT
            assert unix_get(sock).body == A_TXT
        log = util.wait_for(lambda: (lambda t: t if t.count("GET /a.txt") >= 12 else None)(
            srv.access_log.read_text() if srv.access_log.exists() else ""), 5)
        assert log, f"access log incomplete: {srv.access_log.read_text() if srv.access_log.exists() else ''!r}"
        peers = {line.split(" ", 1)[0] for line in log.splitlines() if "GET /a.txt" in line}
        assert peers == {"127.0.0.1", "::1", "unix:"}, peers
    finally:
        rc = srv.stop()
    assert rc == 0, srv.diagnostics()
    assert not sock.exists(), "the socket file outlived the server"


@needs_ipv6
def test_dual_stack_and_v6_only(docroot, tmp_path):
    """[::] ipv6only=off takes IPv4 too (peers as ::ffff:a.b.c.d); ipv6only=on
    (the default) leaves IPv4 to 0.0.0.0: both bind on one port."""
    port = util.free_port()
    srv = ListenServer("epoll", docroot.path, tmp_path / "a", [f"[::]:{port} ipv6only=off"])
    srv.start()
    try:
        s = socket.create_connection((util.HOST, port), timeout=5)
        c = util.Conn(s, 5)
        c.send(util.build_request("GET", "/a.txt", headers={"Connection": "close"}))
        assert c.read_response(timeout=5).body == A_TXT
        c.close()
        assert util.wait_for(lambda: "::ffff:127.0.0.1 - -" in srv.access_log.read_text(), 5), \
            srv.access_log.read_text()
    finally:
        assert srv.stop() == 0, srv.diagnostics()
    # v6-only: 127.0.0.2:P (IPv4) and [::]:P together
    srv = ListenServer("epoll", docroot.path, tmp_path / "b", [f"127.0.0.2:{port}", f"[::]:{port}"])
    srv.start()
    try:
        assert v6_get(port).body == A_TXT
        s = socket.create_connection(("127.0.0.2", port), timeout=5)
        s.close()
    finally:
        assert srv.stop() == 0, srv.diagnostics()


def test_stale_unix_socket_is_replaced_a_live_one_is_not(docroot, tmp_path):
    sock = tmp_path / "s.sock"
    # stale: bound, then closed without unlinking (as after a crash)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()
    srv = ListenServer("epoll", docroot.path, tmp_path / "a", [f"unix:{sock}"])
    srv.start()
    try:
        assert unix_get(sock).body == A_TXT
        assert "removed the stale socket" in log_text(srv)
    finally:
        assert srv.stop() == 0, srv.diagnostics()
    # live: another process accepts there; spindle must not take it over
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(sock))
    live.listen(64)
    try:
        r = util.run_spindle("--root", str(docroot.path), "--set", f"listen=127.0.0.1:{util.free_port()}",
                             "--set", f"listen=unix:{sock}", timeout=15)
        assert r.returncode != 0 and "Address already in use" in r.stderr, (r.returncode, r.stderr)
        assert sock.exists()
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(str(sock))  # still the live one's
        c.close()
    finally:
        live.close()
    # a regular file there is never unlinked either
    sock.unlink()
    sock.write_text("not a socket")
    r = util.run_spindle("--root", str(docroot.path), "--set", f"listen=unix:{sock}", timeout=15)
    assert r.returncode != 0 and sock.read_text() == "not a socket", r.stderr


def test_unix_socket_mode_and_owner_never_follow_a_swapped_in_symlink(docroot, tmp_path):
    """The master (root) sets a socket file's mode and owner after bind(). In a
    directory someone else may write to (a run directory owned by the serving
    user), the file can be swapped for a symlink in between: a chmod/chown by
    path then hands the link's target (/etc/shadow, say) to `owner`. strace
    holds every chmod/chown call of the master for 0.4 s, so the swap always
    lands in that gap; the target must come out untouched."""
    sock = tmp_path / "run" / "s.sock"
    sock.parent.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("secret")
    victim.chmod(0o600)
    before = victim.stat()
    calls = "chmod,fchmodat,chown,fchownat,lchown"
    work = tmp_path / "srv"
    work.mkdir()
    argv = ["strace", "-qq", "-o", "/dev/null", "-e", f"trace={calls}",
            "-e", f"inject={calls}:delay_enter=400000",
            str(util.spindle_bin()), "--root", str(docroot.path), "--model", "epoll",
            "--set", f"listen=127.0.0.1:{util.free_port()}",
            "--set", f"listen=unix:{sock} mode=0666 owner=nobody",
            "--set", f"error_log={work / 'error.log'}", "--set", f"access_log={work / 'access.log'}", "--set", "stats=off"]
    # LeakSanitizer cannot run under ptrace (it dies with "does not work under
    # ptrace"): off here, where the race is under test; every other test checks leaks
    env = util.sanitizer_env(work)
    env["ASAN_OPTIONS"] += ":detect_leaks=0"
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    util.Server.adopt(proc, work, work / "error.log", model="epoll")
    try:
        assert util.wait_for(lambda: os.path.lexists(sock) or proc.poll() is not None, util.scaled(10))
        assert proc.poll() is None, proc.stderr.read().decode()
        link = sock.parent / "link"
        link.symlink_to(victim)
        os.replace(link, sock)  # the attacker's move, between bind and chmod
        util.wait_for(lambda: proc.poll() is not None or
                      "listening on" in (work / "error.log").read_text(errors="replace"), util.scaled(10))
        after = victim.stat()
        assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == \
            (stat.S_IMODE(before.st_mode), before.st_uid, before.st_gid), \
            f"the symlink's target was changed: mode {oct(after.st_mode)}, uid {after.st_uid}"
        assert victim.read_text() == "secret"
    finally:
        master = re.search(r"\(master (\d+)\)", (work / "error.log").read_text(errors="replace")
                           if (work / "error.log").exists() else "")
        if proc.poll() is None and master:
            os.kill(int(master.group(1)), signal.SIGTERM)
        try:
            proc.wait(timeout=util.scaled(15))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert os.path.islink(sock) and os.readlink(sock) == str(victim), "the planted link is the attacker's: left"


class ListenConfig(ConfigServer):
    """Addresses from a config file, so that a reload can change them."""

    def __init__(self, conf: Path, root: Path, workdir: Path, model: str, lines):
        super().__init__(conf, root, workdir)
        self.conf, self.model_name, self.lines = conf, model, lines

    def argv(self) -> list[str]:
        a = super().argv()
        for flag in ("--bind", "--port"):
            i = a.index(flag)
            del a[i:i + 2]
        self.write(self.lines)
        return a

    def write(self, lines, workers: int = 2) -> None:
        body = "".join(f"listen = {line.format(port=self.port)}\n" for line in lines)
        self.conf.write_text(f"[server]\nmodel = {self.model_name}\nworkers = {workers}\n{body}")


@needs_ipv6
@pytest.mark.parametrize("model", ["epoll", "uring", "pool", "prefork", "fork", "thread"])
def test_reload_adds_and_removes_addresses_under_load(model, docroot, tmp_path):
    """Under keep-alive load on the address that stays: a reload adds a UNIX
    socket, removes [::1]:Q and adds a loop; 0 failed requests, and fresh
    connections answered at once (none stranded on a socket nobody accepts); the removed one refuses
    once the old generation is gone. A reload whose new address cannot be
    bound is refused and the old set keeps serving."""
    if model not in util.list_models():  # every model is always compiled in: a failure, never a skip
        pytest.fail(f"model {model} missing from `spindle --list-models`", pytrace=False)
    q = util.free_port()
    sock = tmp_path / "new.sock"
    srv = ListenConfig(tmp_path / "spindle.conf", docroot.path, tmp_path / "srv", model,
                       ["127.0.0.1:{port}", f"[::1]:{q}"])
    srv.start()
    try:
        assert wait_log(srv, GEN_RE.format(n=1, model=model), 3), srv.diagnostics()
        assert v6_get(q).body == A_TXT
        with KeepAliveLoad(srv.port, nconn=4) as load:
            time.sleep(0.3)
            # and one loop more: the address that stays grows its reuseport group
            srv.write(["127.0.0.1:{port}", f"unix:{sock}"], workers=3)
            srv.signal(signal.SIGHUP)
            assert wait_log(srv, GEN_RE.format(n=2, model=model), 5), srv.diagnostics()
            assert wait_log(srv, r"generation 1 \(pid \d+\) finished", 15), srv.diagnostics()
            assert wait_log(srv, rf"no longer listening on \[::1\]:{q}", 5), srv.diagnostics()
            time.sleep(0.3)
            load.stop()
        assert load.requests > 0 and not load.failures, \
            f"{len(load.failures)} failed of {load.requests}:\n" + "\n".join(load.failures[:10])
        assert unix_get(sock).body == A_TXT
        for i in range(30):
            t0 = time.monotonic()
            assert v4_get(srv.port).body == A_TXT and time.monotonic() - t0 < util.scaled(1), f"connection {i}"
        with pytest.raises(ConnectionRefusedError):
            v6_get(q)
        # an address that cannot be bound: refused, the old set serves on
        busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        busy.bind((util.HOST, 0))
        busy.listen(1)
        try:
            srv.write(["127.0.0.1:{port}", f"unix:{sock}", f"127.0.0.1:{busy.getsockname()[1]}"], workers=3)
            srv.signal(signal.SIGHUP)
            assert wait_log(srv, r"reload: cannot set up the new configuration", 5), srv.diagnostics()
            assert "Address already in use" in log_text(srv)
            time.sleep(0.5)
            assert "generation 3" not in log_text(srv)
            assert v4_get(srv.port).body == A_TXT and unix_get(sock).body == A_TXT
        finally:
            busy.close()
    finally:
        rc = srv.stop()
    assert rc == 0, srv.diagnostics()
    assert not sock.exists()



class PortConfig(ConfigServer):
    """bind and port from a config file (no listen lines), so that a reload
    can move them."""

    def __init__(self, conf: Path, root: Path, workdir: Path):
        super().__init__(conf, root, workdir)
        self.conf = conf

    def argv(self) -> list[str]:
        self.write(self.port)
        return util.without_bind_and_port(super().argv())

    def write(self, port: int) -> None:
        self.conf.write_text(f"[server]\nmodel = epoll\nworkers = 1\nbind = {util.HOST}\nport = {port}\n")


def test_reload_moves_the_port(docroot, tmp_path):
    """spindle(8) and spindle.conf(5) say a reload moves `port` (no restart):
    after SIGHUP with a new port in the file, the new port serves, and the
    old one refuses once the old generation has drained."""
    srv = PortConfig(tmp_path / "spindle.conf", docroot.path, tmp_path / "srv")
    srv.start()
    try:
        old, new = srv.port, util.free_port()
        assert wait_log(srv, GEN_RE.format(n=1, model="epoll"), 3), srv.diagnostics()
        srv.write(new)
        srv.signal(signal.SIGHUP)
        assert wait_log(srv, GEN_RE.format(n=2, model="epoll"), 5), srv.diagnostics()
        assert v4_get(new).body == A_TXT
        assert wait_log(srv, rf"no longer listening on {re.escape(util.HOST)}:{old}\b", 15), srv.diagnostics()
        with pytest.raises(ConnectionRefusedError):
            v4_get(old)
    finally:
        rc = srv.stop()
    assert rc == 0, srv.diagnostics()

def test_two_instances_by_listen_lines_alone(docroot, tmp_path):
    """stats_name = auto names the segment after the first listen address's
    port, not the unused `port` (8080 for both, so the second would refuse
    to start: a live instance of that name holds it)."""
    a = ListenConfig(tmp_path / "a.conf", docroot.path, tmp_path / "a", "epoll", ["127.0.0.1:{port}"])
    b = ListenConfig(tmp_path / "b.conf", docroot.path, tmp_path / "b", "epoll", ["127.0.0.1:{port}"])
    a.start()
    try:
        b.start()
        try:
            assert v4_get(a.port).body == A_TXT and v4_get(b.port).body == A_TXT
            assert Path(f"/dev/shm/spindle-{a.port}").exists() and Path(f"/dev/shm/spindle-{b.port}").exists()
        finally:
            assert b.stop() == 0, b.diagnostics()
    finally:
        assert a.stop() == 0, a.diagnostics()


# --------------------------------------------------------------------------
# Socket activation (sd_listen_fds(3)): descriptors from 3, LISTEN_FDS of
# them, LISTEN_PID naming the process they are for
# --------------------------------------------------------------------------

def start_activated(socks: list[socket.socket], root: Path, workdir: Path, *args: str,
                    listen_pid: str = "$$", listen_fds: str | None = None) -> subprocess.Popen:
    workdir.mkdir(parents=True, exist_ok=True)
    fds = [s.fileno() for s in socks]

    def to_3_4():  # in the child, before exec: the sockets become 3, 4, ...
        high = [os.dup(fd) + 0 for fd in fds]
        for i, fd in enumerate(high):
            os.dup2(fd, 3 + i)  # dup2 leaves the new descriptor inheritable

    env = util.sanitizer_env(workdir)
    env["LISTEN_FDS"] = str(len(socks)) if listen_fds is None else listen_fds
    env["LISTEN_FDNAMES"] = ":".join("s" for _ in socks)
    # LISTEN_PID must be the pid spindle runs as: the shell's, which exec keeps
    argv = ["sh", "-c", f'LISTEN_PID={listen_pid} exec "$0" "$@"', str(util.spindle_bin()), "--root", str(root),
            "--set", f"error_log={workdir / 'error.log'}", "--set", f"access_log={workdir / 'access.log'}", *args]
    proc = subprocess.Popen(argv, env=env, preexec_fn=to_3_4, close_fds=False, stdin=subprocess.DEVNULL,
                            stdout=open(workdir / "stdout.txt", "wb"), stderr=open(workdir / "stderr.txt", "wb"),
                            cwd=workdir)
    util.Server.adopt(proc, workdir, workdir / "error.log", root=root)
    return proc


def stop_activated(proc: subprocess.Popen, work: Path) -> None:
    """SIGTERM: a clean exit 0; anything left running after a failure is killed."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0, (work / "error.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def wait_started(work: Path) -> None:
    assert util.wait_for(lambda: (work / "error.log").exists() and "generation 1" in
                         (work / "error.log").read_text(), 5), (work / "stderr.txt").read_text()


@pytest.mark.parametrize("model", ["epoll", "uring", "pool", "prefork", "fork", "thread", "iterative"])
def test_socket_activation_uses_inherited_sockets_across_reloads(model, docroot, tmp_path):
    """No bind of its own (bind/port, here a port nobody else listens on, are
    ignored): the inherited TCP and UNIX sockets are served, kept across a
    reload, and left listening at exit (the service manager owns them)."""
    if model not in util.list_models():  # every model is always compiled in: a failure, never a skip
        pytest.fail(f"model {model} missing from `spindle --list-models`", pytrace=False)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind((util.HOST, 0))
    tcp.listen(16)
    port = tcp.getsockname()[1]
    path = tmp_path / "act.sock"
    uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    uds.bind(str(path))
    uds.listen(16)
    unused = util.free_port()
    work = tmp_path / "srv"
    proc = start_activated([tcp, uds], docroot.path, work, "--model", model, "--port", str(unused))
    try:
        wait_started(work)
        assert v4_get(port).body == A_TXT
        assert unix_get(path).body == A_TXT
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((util.HOST, unused), timeout=2)
        proc.send_signal(signal.SIGHUP)
        assert util.wait_for(lambda: "generation 2" in (work / "error.log").read_text(), 5)
        assert util.wait_for(lambda: "generation 1 (pid" in (work / "error.log").read_text(), 15)
        for _ in range(3):
            assert v4_get(port).body == A_TXT
            assert unix_get(path).body == A_TXT
    finally:
        stop_activated(proc, work)
    # still listening (ours, as the service manager's): a connection queues
    s = socket.create_connection((util.HOST, port), timeout=2)
    s.close()
    assert path.exists()
    tcp.close()
    uds.close()


def test_socket_activation_with_listen_lines(docroot, tmp_path):
    """A `listen` line naming an inherited address uses that socket (a bind
    of its own would fail: the address is taken); another line is bound."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind((util.HOST, 0))
    tcp.listen(16)
    port, other = tcp.getsockname()[1], util.free_port()
    work = tmp_path / "srv"
    proc = start_activated([tcp], docroot.path, work, "--set", f"listen=127.0.0.1:{port}",
                           "--set", f"listen=127.0.0.1:{other}")
    try:
        wait_started(work)
        assert v4_get(port).body == A_TXT and v4_get(other).body == A_TXT
    finally:
        stop_activated(proc, work)
        tcp.close()


def test_socket_activation_for_another_process_is_ignored_and_a_bad_count_refused(docroot, tmp_path):
    """LISTEN_PID naming another process: the sockets are not ours (sd_listen_fds
    ignores them), spindle binds its own port. A LISTEN_FDS that is no count
    of descriptors, or names one that is no listening socket, is refused
    at start with the reason, never served half."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind((util.HOST, 0))
    tcp.listen(16)
    own = util.free_port()
    work = tmp_path / "other"
    proc = start_activated([tcp], docroot.path, work, "--bind", util.HOST, "--port", str(own),
                           listen_pid=str(os.getppid()))
    try:
        wait_started(work)
        assert v4_get(own).body == A_TXT
        assert "socket activation" not in (work / "error.log").read_text()
    finally:
        stop_activated(proc, work)
    for fds, why in (("-5", "LISTEN_FDS '-5'"), ("1x", "LISTEN_FDS '1x'"), ("2", "descriptor 4 is not a listening")):
        work = tmp_path / f"bad{fds}"
        proc = start_activated([tcp], docroot.path, work, "--port", str(own), listen_fds=fds)
        try:
            rc = proc.wait(timeout=util.scaled(10))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        out = (work / "stderr.txt").read_text() + ((work / "error.log").read_text()
                                                   if (work / "error.log").exists() else "")
        assert rc != 0 and why in out, (fds, rc, out)
    tcp.close()


def test_too_many_sockets_in_all_is_refused_with_the_reason(docroot):
    """11 addresses x 100 epoll loops = 1100 reuseport sockets, past what a
    serving process takes (1024): refused at start, saying so (the message
    named no address and read a buffer nothing had written)."""
    for _ in range(5):  # free_port() looks at 127.0.0.1 only: another test may hold 127.0.0.N:port
        port = util.free_port()
        lines = [a for i in range(1, 12) for a in ("--set", f"listen=127.0.0.{i}:{port}")]
        r = util.run_spindle("--root", str(docroot.path), "--model", "epoll", "--set", "workers=100", *lines,
                             timeout=30)
        if "Address already in use" not in r.stderr:
            break
    assert r.returncode != 0 and "11 addresses with 100 sockets each (at most 1024" in r.stderr, r.stderr


def test_check_prints_listen_lines(docroot, tmp_path):
    # --check loads the certificate a tls address needs, as a start would
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"],
                   check=True, capture_output=True, timeout=60)
    r = util.run_spindle("--root", str(docroot.path), "--set", "listen=[::1]:8081 tls",
                         "--set", "listen=unix:/run/x.sock mode=0660", "--set", f"tls_certificate={cert}",
                         "--set", f"tls_certificate_key={key}", "--check")
    assert r.returncode == 0, r.stderr
    assert "listen = [::1]:8081 tls\nlisten = unix:/run/x.sock mode=0660\n" in r.stdout, r.stdout
    assert "would serve" in r.stdout and "on [::1]:8081 tls, unix:/run/x.sock" in r.stdout, r.stdout
    bad = util.run_spindle("--root", str(docroot.path), "--set", "listen=[::1]:8081 mode=0660", "--check")
    assert bad.returncode == 2 and "mode applies to a unix: socket only" in bad.stderr, bad.stderr


def test_status_over_unix_socket_needs_unix_in_stats_allow(docroot, tmp_path):
    """A UNIX socket's client has no address: the endpoints let it in only
    when stats_allow names "unix:" (as nginx's allow unix:)."""
    sock = tmp_path / "s.sock"
    srv = ListenServer("epoll", docroot.path, tmp_path / "a", [f"unix:{sock}"], settings={"metrics": "on"})
    srv.start()
    try:
        assert unix_get(sock, "/status").status != 200, "the default stats_allow is loopback only"
        assert v4_get(srv.port, "/status").status == 200
    finally:
        assert srv.stop() == 0, srv.diagnostics()
    srv = ListenServer("epoll", docroot.path, tmp_path / "b", [f"unix:{sock}"],
                       settings={"metrics": "on", "stats_allow": "127.0.0.0/8 unix:"})
    srv.start()
    try:
        assert unix_get(sock, "/status").status == 200
        assert unix_get(sock, "/metrics").status == 200
    finally:
        assert srv.stop() == 0, srv.diagnostics()
