"""Helpers for the spindle integration tests: binary lookup, server process
control, and a small raw-socket HTTP/1.1 client with a strict response parser.

Every connection made here goes to 127.0.0.1 only.
"""
from __future__ import annotations

import email.utils
import errno
import fcntl
import os
import random
import re
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
_port_choice = random.SystemRandom()
REPO_ROOT = Path(__file__).resolve().parents[2]



def repo_make(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """`make -s ARGS` in the repository, holding a lock on build/: the
    targets the tests make (install, man) write files under build/, and
    `make test` runs the plain and sanitizer suites side by side, each of
    which may make them at the same moment."""
    lock = REPO_ROOT / "build" / ".make-in-repository.lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        return subprocess.run(["make", "-s", "--no-print-directory", *args], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=timeout)


IMF_FIXDATE_RE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$"
)


# --------------------------------------------------------------------------
# The binary
# --------------------------------------------------------------------------

def spindle_bin() -> Path:
    """$SPINDLE_BIN (relative paths are relative to the repo root), else ./spindle."""
    env = os.environ.get("SPINDLE_BIN")
    p = Path(env) if env else Path("spindle")
    if not p.is_absolute():
        p = REPO_ROOT / p
    return p


def run_spindle(*args: str, timeout: float = 10, cwd: str | os.PathLike | None = None):
    """Runs the binary to completion (CLI tests); returns CompletedProcess."""
    return subprocess.run(
        [str(spindle_bin()), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def list_models() -> list[str]:
    """Names from `spindle --list-models` (first word of each non-empty line)."""
    b = spindle_bin()
    if not b.exists():
        raise RuntimeError(f"{b} does not exist (run `make spindle`)")
    r = run_spindle("--list-models")
    if r.returncode != 0:
        raise RuntimeError(f"--list-models exited {r.returncode}: {r.stderr.strip()}")
    names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    if not names:
        raise RuntimeError("--list-models printed no model")
    return names


def spindle_version() -> str:
    r = run_spindle("--version")
    m = re.search(r"spindle (\d+\.\d+\.\d+)", r.stdout)
    if not m:
        raise RuntimeError(f"unexpected --version output: {r.stdout!r} {r.stderr!r}")
    return m.group(1)


def time_scale() -> float:
    """Factor for sub-second time bounds: the sanitizer targets set
    SPINDLE_TIME_SCALE (ASan ~3, TSan ~5) instead of loosening bounds for all."""
    try:
        return max(1.0, float(os.environ.get("SPINDLE_TIME_SCALE", "1")))
    except ValueError:
        return 1.0


_sanitizers_cache: set[str] | None = None


def _sanitizers() -> set[str]:
    global _sanitizers_cache
    if _sanitizers_cache is None:
        try:
            data = spindle_bin().read_bytes()
        except OSError:
            data = b""
        _sanitizers_cache = {name for name in ("asan", "tsan") if f"__{name}_init".encode() in data}
    return _sanitizers_cache


def sanitized() -> bool:
    """The binary under test is an ASan or TSan build: memory figures (PSS)
    mean nothing there (redzones, quarantine, shadow memory)."""
    return bool(_sanitizers())


def asan_build() -> bool:
    """The binary under test is an AddressSanitizer build ($SPINDLE_BIN, say
    ./spindle-asan): the suite then judges memory and UB, not time."""
    return "asan" in _sanitizers()


def scaled(seconds: float) -> float:
    """A time bound, stretched by time_scale() under sanitizers."""
    return seconds * time_scale()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORTS_DIR = Path("/tmp/spindle-test-ports")
_ports_held: dict[int, int] = {}


def _reserve_port(port: int) -> bool:
    """The port is this process's until it exits: an exclusive lock on a
    file named after it, which the kernel drops with the process. Two
    suites' workers that drew the same port before either server had bound
    it ran two servers on it (SO_REUSEPORT lets the second bind), each
    answering the other's requests."""
    if port in _ports_held:
        return True
    _PORTS_DIR.mkdir(exist_ok=True)
    fd = os.open(_PORTS_DIR / str(port), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _ports_held[port] = fd
    return True


def free_port() -> int:
    """A port nobody uses now, for a server to listen on, taken below the
    kernel's ephemeral range: every client socket (the tests', wrk's, other
    sessions') gets its port from that range, so none can take the port
    between this check and the server's bind, however many suites run side
    by side (`make test` runs three; a [::] ipv6only=off listener lost its
    port so once)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = _port_choice.randrange(max(1024, low - 10000), low)
        if os.path.exists(f"/dev/shm/spindle-{port}"):
            # a server killed on purpose (kill -9 tests, planted faults) left
            # its statistics here, which the next server on the port would
            # reclaim with a warning its test counts as a problem
            continue
        if not _reserve_port(port):
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
        try:
            with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s6:
                s6.bind(("::", port))  # free on every address, as a [::] listener needs
        except OSError as e:
            if e.errno != errno.EAFNOSUPPORT:
                continue
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------
# Server process
# --------------------------------------------------------------------------

class ServerError(AssertionError):
    pass


# What the error log says when a process of the instance died or ended badly
# (master.c, fork.c, prefork.c); tests that kill one on purpose carry the
# `expect_restart` marker and tolerate these lines.
RESTART_RE = re.compile(r"killed by signal|restarting it|exited with status [1-9]|did not finish cleanly")
# What a sanitizer prints (ASan, LSan, UBSan, TSan); never tolerated.
SANITIZER_RE = re.compile(r"ERROR: (Address|Leak|Memory)Sanitizer|WARNING: ThreadSanitizer|"
                          r"runtime error:|SUMMARY: \w+Sanitizer")
SANITIZER_LOG_PREFIX = "sanitizer"
# LeakSanitizer's tracer, checking a process at exit, prints this alone when
# the process is SIGKILLed under it (a fork child ended by the drain timeout
# while it was already exiting): the check was cut short, nothing was found.
LSAN_TRACER_LOST_RE = re.compile(r"^==\d+==Unable to get registers from thread \d+\.?\s*$")


def report_findings(text: str) -> str:
    """A sanitizer log's text without the lines that report no finding."""
    return "\n".join(ln for ln in text.splitlines() if not LSAN_TRACER_LOST_RE.match(ln))
SANITIZER_ENV = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS")

# A frame the runtime could not name: a serving process may not start a
# symbolizer (landlock), so it prints "#3 0x7f... (/lib/.../libc.so.6+0x99c51)".
_UNNAMED_FRAME_RE = re.compile(r"^(\s*#\d+ 0x[0-9a-f]+ +)\((/[^+()]+)\+(0x[0-9a-f]+)\)", re.M)


def symbolized(report: str) -> str:
    """report with each unnamed frame named by addr2line (function, file:line)."""
    by_module: dict[str, set[str]] = {}
    for _, module, off in _UNNAMED_FRAME_RE.findall(report):
        by_module.setdefault(module, set()).add(off)
    names: dict[tuple[str, str], str] = {}
    for module, offs in by_module.items():
        offs = sorted(offs)
        try:
            r = subprocess.run(["addr2line", "-f", "-C", "-e", module, *offs],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        lines = r.stdout.splitlines()
        for i, off in enumerate(offs):
            if 2 * i + 1 < len(lines) and lines[2 * i] != "??":
                names[(module, off)] = f"{lines[2 * i]} {lines[2 * i + 1]}"
    return _UNNAMED_FRAME_RE.sub(
        lambda m: m.group(0) + (f" in {names[(m.group(2), m.group(3))]}"
                                if (m.group(2), m.group(3)) in names else ""), report)

# Every Server started, until its final check (see Server.problems()).
LIVE_SERVERS: list["Server"] = []

# Where a sanitizer report goes from a process started outside Server (a
# `--check` run, a master started by hand with an rlimit or under strace):
# conftest.py points every sanitizer's log_path here for the whole session
# and fails the test during which a report appears. Server gives each
# instance its own log_path instead (sanitizer_env).
STRAY_REPORTS_ENV = "SPINDLE_TEST_STRAY_REPORTS"
_stray_scanned: dict[str, int] = {}  # report file -> bytes already checked


def route_stray_reports(directory: Path) -> None:
    """From now on, a sanitizer report of any process this one starts lands
    in directory (inherited by every child through the environment)."""
    os.environ[STRAY_REPORTS_ENV] = str(directory)
    _set_log_path(os.environ, directory)


def stray_reports() -> list[str]:
    """Sanitizer reports written to the session's directory since the last call."""
    directory = os.environ.get(STRAY_REPORTS_ENV)
    if not directory:
        return []
    out = []
    for p in sorted(Path(directory).glob(f"{SANITIZER_LOG_PREFIX}-*")):
        done = _stray_scanned.get(str(p), 0)
        with open(p, "rb") as f:
            f.seek(done)
            data = f.read()
        _stray_scanned[str(p)] = done + len(data)
        if report_findings(data.decode(errors="replace")).strip():
            out.append(f"sanitizer report in {p} (a spindle started outside util.Server):\n"
                       f"{data.decode(errors='replace')[:6000]}")
    return out


def sanitizer_env(workdir: Path) -> dict:
    """The environment for a server: the sanitizer options the Makefile passes,
    plus a log_path per sanitizer in the server's directory, so a report from
    any process of the instance (master, serving process, worker, fork child)
    lands in a file the suite reads, even when stderr is gone."""
    env = dict(os.environ)
    _set_log_path(env, workdir)
    return env


def _set_log_path(env, directory: Path) -> None:
    """Every sanitizer's options in env, with log_path=directory/sanitizer-KIND."""
    for var in SANITIZER_ENV:
        kind = var.split("_")[0].lower()
        opts = [o for o in env.get(var, "").split(":") if o and not o.startswith("log_path=")]
        opts.append(f"log_path={directory / f'{SANITIZER_LOG_PREFIX}-{kind}'}")
        env[var] = ":".join(opts)


class Server:
    """One spindle process. `settings` become --set KEY=VALUE (merged over the
    defaults that send both logs into the server's private directory)."""

    def __init__(self, model: str, root: Path, workdir: Path, settings: dict | None = None,
                 extra_args: list[str] | None = None):
        self.model = model
        self.root = Path(root)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.access_log = self.workdir / "access.log"
        self.error_log = self.workdir / "error.log"
        self.settings = {"access_log": str(self.access_log), "error_log": str(self.error_log)}
        self.settings.update({k: str(v) for k, v in (settings or {}).items()})
        self.extra_args = list(extra_args or [])
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.stopped = False
        self._stdout = None
        self._stderr = None
        self._scanned: dict[str, int] = {}  # file name -> bytes already checked

    @classmethod
    def adopt(cls, proc: subprocess.Popen, workdir: Path, error_log: Path, model: str = "(started by the test)",
              root: Path | None = None) -> "Server":
        """A spindle the test started itself (its own argv, an rlimit, strace in
        front): put under the suite's net like one started here, so a restart,
        crash or sanitizer report in its error log, workdir/stderr.txt or
        workdir/sanitizer-* fails the test, and it is stopped if left running.
        The caller still stops it and checks its exit status."""
        srv = cls(model, root or workdir, workdir)
        srv.error_log = Path(error_log)
        srv.proc = proc
        LIVE_SERVERS.append(srv)
        return srv

    # -- lifecycle --------------------------------------------------------

    def argv(self) -> list[str]:
        a = [str(spindle_bin()), "--bind", HOST, "--port", str(self.port), "--root",
             str(self.root), "--model", self.model]
        for k, v in self.settings.items():
            a += ["--set", f"{k}={v}"]
        return a + self.extra_args

    def start(self, ready_timeout: float = 5.0, port: int | None = None) -> "Server":
        """port: that one (say, a dead instance's) instead of a free one."""
        last_err = None
        for _attempt in range(1 if port else 3):  # a free port can be taken between probe and bind
            self.port = port or free_port()
            self._stdout = open(self.workdir / "stdout.txt", "wb")
            self._stderr = open(self.workdir / "stderr.txt", "wb")
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=self._stdout, stderr=self._stderr,
                                         cwd=self.workdir, env=sanitizer_env(self.workdir))
            if self not in LIVE_SERVERS:
                LIVE_SERVERS.append(self)
            deadline = time.monotonic() + scaled(ready_timeout)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                # On a port given back by a dead instance, a connect may still
                # land on that one's listener (its serving process shuts it
                # down on its own, maybe late): ready means our master holds one.
                if port and not self._logged_listening():
                    time.sleep(0.02)
                    continue
                try:
                    with socket.create_connection((HOST, self.port), timeout=0.5):
                        pass
                except OSError:
                    time.sleep(0.02)
                    continue
                # the master listens before it starts its serving process: a
                # test that looks for that process at once must find it
                wait_for(lambda: serving_pids(self.proc.pid), max(0.0, deadline - time.monotonic()), 0.01)
                return self
            if self.proc.poll() is None:
                self.kill()
                raise ServerError(f"spindle ({self.model}) not accepting on port {self.port} "
                                  f"after {ready_timeout}s\n{self.diagnostics()}")
            last_err = self.diagnostics()
            if "in use" not in last_err.lower():
                break
        raise ServerError(f"spindle ({self.model}) exited with {self.proc.returncode} at "
                          f"start-up: {' '.join(self.argv())}\n{last_err}")

    def _logged_listening(self) -> bool:
        try:
            return f"(master {self.proc.pid}) listening on" in self.error_log.read_text(errors="replace")
        except FileNotFoundError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait; returns the exit status (kills and raises on timeout)."""
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ServerError(f"spindle ({self.model}) did not exit within {timeout}s of "
                              f"SIGTERM\n{self.diagnostics()}")
        finally:
            self._close_files()
        return rc

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self._close_files()

    def _close_files(self):
        for f in (self._stdout, self._stderr):
            if f is not None and not f.closed:
                f.close()

    def diagnostics(self) -> str:
        out = []
        for name in ("stderr.txt", "error.log"):
            p = self.workdir / name
            if p.exists():
                txt = p.read_text(errors="replace")
                out.append(f"--- {name} (tail) ---\n{txt[-3000:]}")
        if self.proc is not None and self.proc.poll() is not None:
            out.append(f"--- exit status: {self.proc.returncode}")
        return "\n".join(out)

    def _rest_of_report(self, path: Path) -> str:
        """What a sanitizer still writes to a report being written (its
        retries of a symbolizer the serving process may not run take
        seconds): read until the file stops growing."""
        rest, quiet_since = "", time.monotonic()
        deadline = quiet_since + scaled(5)
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 0.5:
            time.sleep(0.1)
            more = self._new_text(path)
            if more:
                rest, quiet_since = rest + more, time.monotonic()
        return rest

    def _new_text(self, path: Path) -> str:
        """What was appended to path since the last call (for this server)."""
        done = self._scanned.get(path.name, 0)
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size < done:  # replaced (a log rotation test)
                    done = 0
                f.seek(done)
                data = f.read()
        except FileNotFoundError:
            return ""
        self._scanned[path.name] = done + len(data)
        return data.decode(errors="replace")

    def problems(self, expect_restart: bool = False) -> list[str]:
        """Failures written since the last call: any sanitizer report (its own
        log files, stderr, the error log), and unless expect_restart, any line
        saying a process of this instance died, was restarted or ended badly."""
        out = []
        reports = sorted(self.workdir.glob(f"{SANITIZER_LOG_PREFIX}-*"))
        for p in reports:
            txt = self._new_text(p)
            if report_findings(txt).strip():
                txt += self._rest_of_report(p)
                out.append(f"sanitizer report in {p}:\n{symbolized(txt)[:8000]}")
        for p in (self.workdir / "stderr.txt", self.error_log):
            txt = self._new_text(p)
            bad = [ln for ln in txt.splitlines()
                   if SANITIZER_RE.search(ln) or (not expect_restart and RESTART_RE.search(ln))]
            if bad:
                out.append(f"{p.name} of spindle ({self.model}):\n" + "\n".join(bad[:20]))
        if out:
            out.insert(0, f"spindle ({self.model}) in {self.workdir}:")
        return out

    def assert_alive(self, what: str = "") -> None:
        if not self.alive():
            raise ServerError(f"spindle ({self.model}) died {what}(exit status "
                              f"{self.proc.returncode})\n{self.diagnostics()}")

    # -- clients ----------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def connect(self, timeout: float = 5.0, rcvbuf: int | None = None) -> "Conn":
        return Conn.open(self.port, timeout=timeout, rcvbuf=rcvbuf)

    def request(self, method: str = "GET", target: str = "/", headers=None, body: bytes = b"",
                version: str = "HTTP/1.1", host: str | None = "localhost",
                timeout: float = 5.0) -> "Response":
        """One request on a fresh connection; returns the parsed response."""
        with self.connect(timeout) as c:
            c.send(build_request(method, target, headers, body, version, host))
            return c.read_response(method)

    def get(self, target: str, headers=None, **kw) -> "Response":
        return self.request("GET", target, headers, **kw)


# --------------------------------------------------------------------------
# Raw HTTP client
# --------------------------------------------------------------------------

def build_request(method="GET", target="/", headers=None, body=b"", version="HTTP/1.1",
                  host: str | None = "localhost") -> bytes:
    lines = [f"{method} {target} {version}"]
    hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    if host is not None and not any(k.lower() == "host" for k, _ in hdrs):
        hdrs.insert(0, ("Host", host))
    lines += [f"{k}: {v}" for k, v in hdrs]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body


@dataclass
class Response:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    raw_head: bytes = b""
    fields: dict = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        """The value of a single-valued header (None when absent); fails on duplicates."""
        vals = self.header_all(name)
        assert len(vals) <= 1, f"header {name} repeated: {vals}"
        return vals[0] if vals else None

    def header_all(self, name: str) -> list[str]:
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def has(self, name: str) -> bool:
        return bool(self.header_all(name))

    def __repr__(self):
        return (f"<Response {self.version} {self.status} {self.reason!r} headers={self.headers}"
                f" body[{len(self.body)}]={self.body[:120]!r}>")


class ConnectionClosed(AssertionError):
    pass


STATUS_RE = re.compile(rb"^HTTP/(\d)\.(\d) (\d{3}) ([^\r\n]*)$")
FIELD_RE = re.compile(rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$")


class Conn:
    """A client connection with a read buffer, so pipelined responses parse
    one by one."""

    def __init__(self, sock: socket.socket, timeout: float):
        self.sock = sock
        self.timeout = timeout
        self.buf = b""
        self.eof = False

    @classmethod
    def open(cls, port: int, timeout: float = 5.0, rcvbuf: int | None = None) -> "Conn":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(timeout)
        try:
            s.connect((HOST, port))
        except BaseException:
            s.close()
            raise
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(s, timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def reset(self):
        """Closes with SO_LINGER 0, so the peer gets a RST."""
        import struct
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_slowly(self, data: bytes, chunk: int, pause: float) -> None:
        for i in range(0, len(data), chunk):
            self.sock.sendall(data[i:i + chunk])
            time.sleep(pause)

    def _fill(self, deadline: float, n: int = 65536) -> bool:
        """Reads more bytes into buf; False on EOF/reset. Raises TimeoutError."""
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out waiting for response bytes")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(n)
        except socket.timeout:
            raise TimeoutError("timed out waiting for response bytes") from None
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_head(self, deadline: float) -> bytes:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 1 << 20:
                raise AssertionError("response head larger than 1 MiB")
            if not self._fill(deadline):
                raise ConnectionClosed(
                    f"connection closed before a complete response head; got {self.buf[:300]!r}")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head

    def read_exact(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            if not self._fill(deadline, max(65536, min(n - len(self.buf), 1 << 20))):
                raise ConnectionClosed(f"connection closed after {len(self.buf)} of {n} body bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, method: str = "GET", timeout: float | None = None) -> Response:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        head = self.read_head(deadline)
        lines = head.split(b"\r\n")
        m = STATUS_RE.match(lines[0])
        assert m, f"malformed status line {lines[0]!r}"
        headers = []
        for ln in lines[1:]:
            assert b"\n" not in ln and b"\r" not in ln, f"bare CR/LF in response head: {head!r}"
            fm = FIELD_RE.match(ln)
            assert fm, f"malformed response header line {ln!r}"
            headers.append((fm.group(1).decode("latin-1"), fm.group(2).decode("latin-1")))
        resp = Response(version=f"HTTP/{m.group(1).decode()}.{m.group(2).decode()}",
                        status=int(m.group(3)), reason=m.group(4).decode("latin-1"),
                        headers=headers, raw_head=head)
        if method.upper() == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200:
            return resp
        cl = resp.header_all("Content-Length")
        if cl:
            assert len(set(cl)) == 1 and cl[0].isdigit(), f"bad Content-Length {cl}"
            resp.body = self.read_exact(int(cl[0]), deadline)
        elif (resp.header("Transfer-Encoding") or "").lower() == "chunked":
            resp.body = self._read_chunked(deadline)
        else:
            while self._fill(deadline):
                pass
            resp.body, self.buf = self.buf, b""
        return resp

    def _read_chunked(self, deadline: float) -> bytes:
        body = b""
        while True:
            while b"\r\n" not in self.buf:
                if not self._fill(deadline):
                    raise ConnectionClosed("EOF inside chunked response")
            line, self.buf = self.buf.split(b"\r\n", 1)
            size = int(line.split(b";")[0], 16)
            if size == 0:
                while True:  # trailer fields, up to the empty line
                    while b"\r\n" not in self.buf:
                        if not self._fill(deadline):
                            raise ConnectionClosed("EOF inside chunked trailer")
                    line, self.buf = self.buf.split(b"\r\n", 1)
                    if not line:
                        return body
            body += self.read_exact(size, deadline)
            self.read_exact(2, deadline)

    def read_all(self, timeout: float = 5.0) -> bytes:
        """Everything until EOF."""
        deadline = time.monotonic() + timeout
        while self._fill(deadline):
            pass
        out, self.buf = self.buf, b""
        return out

    def wait_closed(self, timeout: float) -> bool:
        """True if the server closes (EOF or RST) within timeout with no further
        bytes; False if still open. Unexpected bytes fail the test."""
        if self.buf:
            raise AssertionError(f"unexpected extra bytes from server: {self.buf[:200]!r}")
        deadline = time.monotonic() + timeout
        try:
            got = self._fill(deadline)
        except TimeoutError:
            return False
        if got:
            raise AssertionError(f"unexpected extra bytes from server: {self.buf[:200]!r}")
        return True

    def readable_within(self, timeout: float) -> bool:
        if self.buf:
            return True
        r, _, _ = select.select([self.sock], [], [], timeout)
        return bool(r)


# --------------------------------------------------------------------------
# Misc
# --------------------------------------------------------------------------

def parse_http_date(s: str) -> float:
    return email.utils.parsedate_to_datetime(s).timestamp()


def http_date(ts: float) -> str:
    return email.utils.formatdate(ts, usegmt=True)


def parse_multipart_byteranges(content_type: str, body: bytes) -> list[tuple[dict, bytes]]:
    """Returns [(headers_lowercase, data)] for a multipart/byteranges body."""
    m = re.match(r'^multipart/byteranges;\s*boundary=("?)([^";]+)\1\s*$', content_type)
    assert m, f"bad multipart Content-Type {content_type!r}"
    delim = b"--" + m.group(2).encode()
    assert body.count(delim + b"--") == 1, "missing or repeated closing boundary"
    end = body.index(delim + b"--")
    assert body[end + len(delim) + 2:] in (b"", b"\r\n"), "junk after closing boundary"
    parts_raw = body[:end].split(delim)
    assert parts_raw[0] in (b"", b"\r\n"), f"junk before first boundary: {parts_raw[0][:100]!r}"
    parts = []
    for raw in parts_raw[1:]:
        assert raw.startswith(b"\r\n"), f"boundary not followed by CRLF: {raw[:50]!r}"
        assert raw.endswith(b"\r\n"), "part not followed by CRLF before the next boundary"
        head, data = raw[2:-2].split(b"\r\n\r\n", 1)
        hdrs = {}
        for ln in head.split(b"\r\n"):
            k, v = ln.decode("latin-1").split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
        parts.append((hdrs, data))
    return parts


def without_bind_and_port(argv: list[str]) -> list[str]:
    """A server's argv less --bind and --port, for a server whose address comes
    from its configuration file (so a reload can move it)."""
    a = list(argv)
    for flag in ("--bind", "--port"):
        i = a.index(flag)
        del a[i:i + 2]
    return a


def wait_for(pred, timeout: float, interval: float = 0.05):
    """Polls pred() until truthy or timeout; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


TCP_ESTABLISHED = "01"


def tcp_states(local_port: int, remote_port: int) -> list[str]:
    """The kernel's states (as /proc/net/tcp spells them: "01" ESTABLISHED,
    "04" FIN_WAIT1, "06" TIME_WAIT...) of the TCP sockets from local_port to
    remote_port, whichever process holds them; none once closed with a RST.
    The server's end of a connection a client holds is (server port, the
    client's port): its state shows the server's close even while the
    client reads nothing."""
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if int(f[1].rsplit(":", 1)[1], 16) == local_port and int(f[2].rsplit(":", 1)[1], 16) == remote_port:
                states.append(f[3])
    return states


# --------------------------------------------------------------------------
# /proc: the instance's process tree (the master, serving processes, workers)
# --------------------------------------------------------------------------

def proc_children(pid: int) -> list[int]:
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for t in tasks:
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def proc_descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    for _ in range(100000):  # bounded walk
        if not todo:
            break
        for c in proc_children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def proc_state(pid: int) -> str | None:
    st = proc_stat(pid)
    return st[0] if st else None


def proc_live(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


def serving_pids(master: int) -> list[int]:
    """The master's live children: its serving process(es)."""
    return [p for p in proc_children(master) if proc_live(p)]


def proc_identity(pid: int) -> tuple[int, str] | None:
    """(pid, start time): tells a process from a later one reusing its pid."""
    st = proc_stat(pid)
    return (pid, st[19]) if st else None


def long_lived_processes(srv: "Server") -> set:
    """Identities of the instance's serving processes and, for prefork, their
    workers (not fork's per-connection children, which come and go): a crash
    and restart changes this set."""
    out = set()
    for p in serving_pids(srv.proc.pid):
        out.add(proc_identity(p))
        if srv.model == "prefork":
            out |= {proc_identity(w) for w in proc_children(p) if proc_live(w)}
    out.discard(None)
    return out


def instance_processes(srv: "Server") -> list[int]:
    """The master and every live descendant (serving processes, workers, fork children)."""
    return [srv.proc.pid] + [p for p in proc_descendants(srv.proc.pid) if proc_live(p)]


def instance_cpu_seconds(srv: "Server") -> float:
    """CPU time (user + system) of the live processes of the instance, with
    their reaped children's (a fork child's time lands in its parent's
    cutime/cstime once reaped)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in instance_processes(srv):
        st = proc_stat(pid)
        if st:  # utime, stime, cutime, cstime: fields 14-17 of /proc/PID/stat
            total += sum(int(x) for x in st[11:15])
    return total / tick


def open_by_instance(srv: "Server", path: Path) -> list[int]:
    """The processes of the instance that hold path open."""
    target = str(path)
    out = []
    for pid in instance_processes(srv):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    out.append(pid)
                    break
            except OSError:
                pass
    return out


# --------------------------------------------------------------------------
# Statistics (spindle-stat)
# --------------------------------------------------------------------------

STAT_BIN = REPO_ROOT / "spindle-stat"


def stat_json(port: int) -> dict:
    import json
    r = subprocess.run([str(STAT_BIN), "--once", "--json", "--port", str(port)], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0, f"spindle-stat failed ({r.returncode}): {r.stderr}"
    return json.loads(r.stdout)


def wait_stats(port: int, pred, timeout: float = 3.0) -> dict:
    """The server counts a response right after its last byte is written, so
    a client may see the bytes a moment before the counters move."""
    last = {}

    def probe():
        nonlocal last
        last = stat_json(port)
        return pred(last)

    wait_for(probe, timeout)
    return last


def instance_running_threads(srv: "Server") -> int:
    """How many threads of the instance are running or runnable (state R) now:
    a thread that spins is R even while it waits for a core, one that sleeps is not."""
    n = 0
    for pid in instance_processes(srv):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                state = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            n += state == "R"
    return n
