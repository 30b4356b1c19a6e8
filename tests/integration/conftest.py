"""Fixtures for the spindle integration suite.

* Every test that uses the `model` fixture runs once per model printed by
  `spindle --list-models` (tests are grouped by model), except tests marked
  `semantics`: they run under SEMANTICS_MODEL only (see "Semantics: one model"),
  tests marked `models(...)`, which name their models, and, against a
  ASan build, tests marked `timing` (SEMANTICS_MODEL only).
* `servers(**settings)` returns a server for (model, docroot, settings), started
  once per module and reused; after each test it must still be alive.
* `fresh_server(**settings)` starts a dedicated server for one test (logs,
  signals, shutdown); it is stopped at teardown and must exit 0.
* `docroot` is built once per session (see build_docroot for its content).
* After every test, every server started so far is checked (`_no_silent_failure`):
  a sanitizer report, or an error-log line saying a process of the instance
  died, was restarted or ended badly, fails the test, except that tests marked
  `expect_restart` may restart processes (never produce sanitizer reports).
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import string
import sys
import tempfile
from pathlib import Path

import pytest

import tlsutil
import util

CONCURRENCY_SKIP_REASON = ("the iterative model serves one connection at a time by design; "
                           "this test needs two connections served concurrently")

# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

_models_cache: tuple[list[str], str | None] | None = None
NO_BINARY = "no-binary"


def _models() -> tuple[list[str], str | None]:
    global _models_cache
    if _models_cache is None:
        try:
            _models_cache = (util.list_models(), None)
        except Exception as e:  # reported by every parametrized test
            _models_cache = ([NO_BINARY], str(e))
    return _models_cache


def pytest_configure(config):
    # Before anything starts spindle (test modules list the models at import):
    # a report from a process started outside util.Server lands here, and
    # _no_silent_failure fails the test during which it appears.
    config._stray_reports_dir = Path(tempfile.mkdtemp(prefix="spindle-stray-reports-"))
    config._stray_reports_dir.chmod(0o1777)  # serving processes may have dropped to another user
    util.route_stray_reports(config._stray_reports_dir)
    config.addinivalue_line(
        "markers", "concurrent: needs two connections served at once (skipped for iterative)")
    config.addinivalue_line(
        "markers", "campaign: a load campaign (kill -9 or reloads under wrk); run by the plain suite, "
        "left out of the slower sanitizer suites to keep make test under 30 minutes")
    config.addinivalue_line(
        "markers", "not_under_tsan: left out of the TSan suite only (it still runs in the plain and ASan "
        "suites): ThreadSanitizer defers signal handlers to its own safe points, and a SIGTERM that "
        "reaches a serving process during its start-up was seen never handled under it (stop flag 0, "
        "nothing pending in the kernel), which the plain build does not do")
    config.addinivalue_line(
        "markers", "expect_restart: the test kills or crashes a serving process on purpose, "
        "so its teardown tolerates a restart")
    config.addinivalue_line(
        "markers", "semantics: the answer is decided wholly in the connection core, which every model "
        f"drives alike: runs under {SEMANTICS_MODEL} only (test_models_agree.py proves the models answer "
        f"alike; {ALL_MODELS_ENV}=1 runs it under every model)")
    config.addinivalue_line(
        "markers", "per_model: in a `semantics` module, a test that a model can change (I/O, bodies, "
        "large files, keep-alive, timeouts, closing): runs under every model")
    config.addinivalue_line(
        "markers", "timing: its subject is a duration or a CPU share over a wall-clock window, and every "
        "model's code it drives also runs in quicker per-model tests: against an ASan build (which judges "
        f"memory and UB, and stretches every duration) it runs under {SEMANTICS_MODEL} only; the plain and "
        f"TSan suites run it under every model they run ({ALL_MODELS_ENV}=1: every model everywhere)")
    config.addinivalue_line(
        "markers", "quiet: its subject is not a duration, but it holds a wall-clock bound a crowded machine "
        "breaks (a drain's fixed timeout, a fresh client served within a second), or its answer depends on how "
        "the server's reads are cut: `make test` runs it with the `timing` tests, beside no CPU-bound stage of "
        "their priority (those beside them run in the idle scheduling class); "
        "under every model its suite runs (unlike `timing` under ASan)")
    config.addinivalue_line(
        "markers", "models(*names): runs under these models only, where the code the test is about differs "
        f"between models and the rest share it with one of them (the reason is beside the marker; "
        f"{ALL_MODELS_ENV}=1: every model)")
    config.addinivalue_line(
        "markers", "solo: needs the CPU to itself to meet its bounds (busy work, spinning threads that "
        "must end in time); `make test` runs these after the parallel (pytest-xdist) run, alone")


# ---------------------------------------------------------------------------
# Semantics: one model
# ---------------------------------------------------------------------------
# Every model drives the same sans-I/O connection core (src/http1/, src/site/): what a
# response says (status, fields, body) for a request that arrives whole is
# decided there, never by the model. Tests of such answers carry the
# `semantics` marker (a module's `pytestmark`, or a test's decorator) and run
# under SEMANTICS_MODEL only; a test of a semantics module that a model can
# change (bytes split across reads, bodies, large files, keep-alive,
# timeouts, closing) says `per_model` and runs under every model.
# test_models_agree.py replays a corpus of these requests against every model
# and compares the answers with SEMANTICS_MODEL's byte for byte: that is what
# makes one model enough. SPINDLE_TEST_ALL_MODELS=1 runs every test under
# every model again (after a change to a model or to the driver contract).
#
# ASan suite: a test marked `timing` measures time (a deadline, a latency, a
# CPU share over a window); against an ASan build it runs under
# SEMANTICS_MODEL only. What it drives on the other models (the same reads,
# writes, timers and closes) runs under ASan in the per-model tests its
# marker comment names, and the plain suite still times every model. TSan
# keeps it under pool too: a race wants the crowd of connections these tests
# bring to pool's threads, which a quicker test does not.
SEMANTICS_MODEL = "epoll"  # the default model
ALL_MODELS_ENV = "SPINDLE_TEST_ALL_MODELS"


def one_model(node) -> bool:
    """True when node (a test, or its definition) runs under SEMANTICS_MODEL only."""
    if os.environ.get(ALL_MODELS_ENV, "") not in ("", "0"):
        return False
    if node.get_closest_marker("timing") is not None and util.asan_build():
        return True
    if node.get_closest_marker("per_model") is not None:
        return False
    return node.get_closest_marker("semantics") is not None


def pytest_generate_tests(metafunc):
    if "model_name" in metafunc.fixturenames:
        names, _ = _models()
        if one_model(metafunc.definition) and SEMANTICS_MODEL in names:
            names = [SEMANTICS_MODEL]
        chosen = metafunc.definition.get_closest_marker("models")
        if chosen is not None and os.environ.get(ALL_MODELS_ENV, "") in ("", "0") and NO_BINARY not in names:
            names = [n for n in names if n in chosen.args]
        metafunc.parametrize("model_name", names, scope="module")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`), one
    worker runs all of a module's tests for one model, in order: the shared
    servers of `_pool` are started once per (module, model) as without xdist,
    and 7x more units than modules keep the two workers evenly loaded. A
    module that marks its own xdist_group (say, tests that run `make` in the
    repository, which must not run beside each other) keeps it.
    tryfirst: xdist reads the marker in its own hook of this name."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        group = item.module.__name__
        model_name = getattr(item, "callspec", None) and item.callspec.params.get("model_name")
        if model_name:
            group += f"-{model_name}"
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def model(request, model_name):
    """The model under test; skips `concurrent` tests for iterative only."""
    names, err = _models()
    if err is not None:
        pytest.fail(f"cannot list spindle models: {err}", pytrace=False)
    if model_name == "iterative" and request.node.get_closest_marker("concurrent"):
        pytest.skip(CONCURRENCY_SKIP_REASON)
    return model_name


@pytest.fixture(scope="session")
def version():
    return util.spindle_version()


# ---------------------------------------------------------------------------
# The safety net: no crash, restart or sanitizer report passes unseen
# ---------------------------------------------------------------------------

def _check_servers(expect_restart: bool) -> list[str]:
    """Problems of every server since its last check; servers that have exited
    get their final check here and leave the list."""
    problems = []
    for srv in list(util.LIVE_SERVERS):
        problems += srv.problems(expect_restart)
        if not srv.alive():
            util.LIVE_SERVERS.remove(srv)
    return problems


def _stop_leftovers() -> list[str]:
    """Stops every server still up (SIGTERM first, so serving processes
    drain), then gives each its final check: what a process wrote while
    stopping (a leak report at exit, a child that crashed) counts too."""
    alive = [srv for srv in util.LIVE_SERVERS if srv.alive()]
    for srv in alive:
        srv.signal(signal.SIGTERM)
    problems = []
    for srv in alive:
        try:
            rc = srv.proc.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()
            problems.append(f"spindle ({srv.model}) in {srv.workdir}: left running by its test, and "
                            f"still up 10 s after SIGTERM\n{srv.diagnostics()}")
            continue
        finally:
            srv._close_files()
        if rc != 0:
            problems.append(f"spindle ({srv.model}) in {srv.workdir}: left running by its test, exit "
                            f"status {rc} after SIGTERM\n{srv.diagnostics()}")
    return problems + _check_servers(expect_restart=False) + util.stray_reports()


def _fail_or_report(session, what: str, problems: list[str]) -> None:
    """Fails the current teardown with problems; but when the session is
    already stopping on a failure (-x), pytest runs this teardown from its own
    sessionfinish, where an exception is an INTERNALERROR that hides the
    failing test's summary: print them instead (the run fails anyway)."""
    if not problems:
        return
    message = what + ":\n" + "\n".join(problems)
    if session.shouldfail or session.shouldstop:
        sys.stderr.write(f"\n{message}\n")
        return
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _leftover_servers(request):
    """Torn down with the session's (or, under xdist, the worker's) last test:
    a server its test left running is stopped and checked here, so a report it
    writes while stopping fails that teardown (a worker's own exit status is
    not seen by xdist's controller, so pytest_sessionfinish would be too late)."""
    yield
    _fail_or_report(request.session, "servers left running by their tests failed while stopping",
                    _stop_leftovers())


def pytest_sessionfinish(session, exitstatus):
    """A test that failed before stopping its own server left it running (and
    a failing sanitizer run stops early, before the fixture above): stop every
    one still up, so a run leaves no spindle behind."""
    problems = _stop_leftovers()
    if problems:
        sys.stderr.write("\nservers left running failed while stopping:\n" + "\n".join(problems) + "\n")
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    stray = getattr(session.config, "_stray_reports_dir", None)
    if stray is not None and not any(stray.iterdir()):
        stray.rmdir()


@pytest.fixture(autouse=True)
def _no_silent_failure(request):
    """Autouse, so set up before (and torn down after) the test's own server
    fixtures: it sees what the servers wrote while stopping too. Shared
    (module) servers are checked after each test that ran while they served;
    _pool checks them once more after their shutdown."""
    yield
    expect_restart = request.node.get_closest_marker("expect_restart") is not None
    problems = _check_servers(expect_restart) + util.stray_reports()
    if problems:
        pytest.fail("a process of the server failed during this test (the master restarts "
                    "serving processes, so the test itself may have passed):\n" + "\n".join(problems),
                    pytrace=False)


# ---------------------------------------------------------------------------
# Document roots
# ---------------------------------------------------------------------------

A_TXT = b"Hello, world!"
INDEX_HTML = b"<!doctype html><title>spindle test</title><p>root index</p>\n"
SUB_INDEX = b"<!doctype html><title>sub</title><p>sub index</p>\n"
ERROR_404 = b"<!doctype html><title>custom not found</title><p>CUSTOM-404-PAGE</p>\n"
CAFE = b"<!doctype html><p>cafe menu: croissant</p>\n"
OUTSIDE_SECRET = b"OUTSIDE-THE-ROOT-SECRET-CONTENT\n"
SECRET = b"DOTFILE-SECRET\n"
GIT_CONFIG = b"[core]\n\trepositoryformatversion = 0\n"
RANGE_DATA = ((string.ascii_letters + string.digits) * 2).encode()  # 124 bytes
RANGE_MTIME = 1_600_000_000
BIG_SIZE = 5 * 1024 * 1024
HUGE_SIZE = 50 * 1024 * 1024


class DocRoot:
    """Paths and expected contents of a generated document root."""

    def __init__(self, path: Path, outside: Path):
        self.path = path
        self.outside = outside
        self.files: dict[str, bytes] = {}

    def add(self, rel: str, data: bytes) -> Path:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        self.files[rel] = data
        return p

    def sha256(self, rel: str) -> str:
        return hashlib.sha256((self.path / rel).read_bytes()).hexdigest()


def build_docroot(base: Path, with_error_pages: bool = True) -> DocRoot:
    root = base / "www"
    outside = base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_bytes(OUTSIDE_SECRET)
    d = DocRoot(root, outside)
    d.add("index.html", INDEX_HTML)
    d.add("a.txt", A_TXT)
    d.add("style.css", b"body { color: #333; }\n")
    d.add("app.js", b"console.log('spindle');\n")
    d.add("img.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    d.add("data.json", b'{"spindle": true, "n": 42}\n')
    d.add("icon.svg", b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>\n')
    d.add("app.wasm", b"\x00asm\x01\x00\x00\x00")
    d.add("font.woff2", b"wOF2" + b"\x00" * 60)
    d.add("noext", b"no extension here\n")
    d.add("unknown.zzqx", b"unknown extension\n")
    d.add("empty.txt", b"")
    # An old mtime makes Last-Modified a strong validator (usable in If-Range).
    os.utime(d.add("range.txt", RANGE_DATA), (RANGE_MTIME, RANGE_MTIME))
    d.add("big.bin", os.urandom(BIG_SIZE))
    d.add("sub/index.html", SUB_INDEX)
    d.add("sub/page.txt", b"a page in sub\n")
    (root / "emptydir").mkdir()
    d.add(".secret", SECRET)
    d.add(".git/config", GIT_CONFIG)
    d.add("café menu.html", CAFE)
    if with_error_pages:
        d.add("errors/404.html", ERROR_404)
    # symlinks: one escaping the root, one staying inside, a directory escaping
    os.symlink(outside / "secret.txt", root / "link_out.txt")
    os.symlink("a.txt", root / "link_in.txt")
    os.symlink(outside, root / "linkdir_out")
    return d


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> tlsutil.Certs:
    """The test CA and a server certificate it signed (tlsutil.make_certs)."""
    return tlsutil.make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def docroot(tmp_path_factory) -> DocRoot:
    return build_docroot(tmp_path_factory.mktemp("docroot"))


@pytest.fixture(scope="session")
def plain_docroot(tmp_path_factory) -> DocRoot:
    """A root without errors/: the server's built-in error pages are used."""
    return build_docroot(tmp_path_factory.mktemp("plainroot"), with_error_pages=False)


@pytest.fixture(scope="session")
def huge_docroot(tmp_path_factory) -> DocRoot:
    """A root holding one 50 MB random file (graceful-shutdown download)."""
    base = tmp_path_factory.mktemp("hugeroot")
    d = DocRoot(base / "www", base)
    d.path.mkdir()
    with open(d.path / "huge.bin", "wb") as f:
        for _ in range(HUGE_SIZE // (1 << 20)):
            f.write(os.urandom(1 << 20))
    return d


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------

class _Pool:
    def __init__(self, tmp_path_factory):
        self.tmp = tmp_path_factory
        self.servers: dict[tuple, util.Server] = {}

    def get(self, model: str, root: Path, settings: dict) -> util.Server:
        key = (model, str(root), tuple(sorted((k, str(v)) for k, v in settings.items())))
        srv = self.servers.get(key)
        if srv is None or not srv.alive():
            srv = util.Server(model, root, self.tmp.mktemp(f"srv-{model}"), settings).start()
            self.servers[key] = srv
        return srv

    def close(self):
        problems = []
        for srv in self.servers.values():
            if srv.proc is None:
                continue
            if not srv.alive():
                problems.append(f"{srv.model}: had already died\n{srv.diagnostics()}")
                continue
            try:
                rc = srv.stop()
            except util.ServerError as e:
                problems.append(str(e))
                continue
            if rc != 0:
                problems.append(f"{srv.model} {srv.settings}: exit status {rc} after "
                                f"SIGTERM\n{srv.diagnostics()}")
        for srv in self.servers.values():  # what they wrote while stopping (leak reports)
            problems += srv.problems()
            if srv in util.LIVE_SERVERS:
                util.LIVE_SERVERS.remove(srv)
        self.servers.clear()
        return problems


@pytest.fixture(scope="module")
def _pool(request, tmp_path_factory):
    pool = _Pool(tmp_path_factory)
    yield pool
    _fail_or_report(request.session, "shared servers did not shut down cleanly", pool.close())


@pytest.fixture
def servers(model, _pool, docroot):
    """get(root=None, **settings) -> shared running Server; asserts after the
    test that every server it handed out is still alive."""
    used = []

    def get(root: Path | None = None, **settings) -> util.Server:
        srv = _pool.get(model, root or docroot.path, settings)
        used.append(srv)
        return srv

    yield get
    for srv in used:
        srv.assert_alive("during this test ")


@pytest.fixture
def server(servers) -> util.Server:
    """The shared default server for the current model."""
    return servers()


@pytest.fixture
def fresh_server(model, docroot, tmp_path):
    """start(root=None, **settings) -> a dedicated Server, stopped at
    teardown if the test left it running; either way it must have exited 0."""
    started = []

    def start(root: Path | None = None, **settings) -> util.Server:
        srv = util.Server(model, root or docroot.path, tmp_path / f"server{len(started)}",
                          settings).start()
        started.append(srv)
        return srv

    yield start
    errors = []
    for srv in started:
        if srv.alive():
            try:
                rc = srv.stop()
            except util.ServerError as e:
                errors.append(str(e))
                continue
            if rc != 0:
                errors.append(f"exit status {rc} after SIGTERM\n{srv.diagnostics()}")
        elif srv.proc.returncode != 0:  # the test stopped it itself, or it died
            what = "stopped by the test, exit status" if srv.stopped else "server died during the test, status"
            errors.append(f"{what} {srv.proc.returncode}\n{srv.diagnostics()}")
        srv.kill()
    assert not errors, "\n".join(errors)
