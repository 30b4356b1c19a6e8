"""`make install` / `make uninstall`: staged in a temporary DESTDIR,
the installed binary runs (--help, serves with the installed sample
configuration), the units pass `systemd-analyze verify`, and uninstall leaves
no file behind."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import util

# Runs `make` in the repository, which writes build/man/: under pytest-xdist
# never beside test_config_reference.py, which does too (conftest.py keeps this
# group), and never beside another session's (util.repo_make holds a lock).
pytestmark = pytest.mark.xdist_group("make-in-repository")

PREFIX = "/usr/local"
INSTALLED = [
    "sbin/spindle", "bin/spindle-stat", "share/man/man8/spindle.8", "share/man/man5/spindle.conf.5",
    "share/man/man1/spindle-stat.1",
    "etc/spindle/spindle.conf", "lib/systemd/system/spindle.service", "lib/systemd/system/spindle.socket",
]


def make(*args: str) -> subprocess.CompletedProcess:
    r = util.repo_make(*args, timeout=300)
    assert r.returncode == 0, f"make {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


@pytest.fixture(scope="module")
def destdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("destdir")
    make("install", f"DESTDIR={d}", f"PREFIX={PREFIX}")
    return d


def test_install_puts_every_file_in_place(destdir):
    base = destdir / PREFIX.lstrip("/")
    assert files_under(destdir) == sorted(f"{PREFIX.lstrip('/')}/{f}" for f in INSTALLED)
    assert os.access(base / "sbin/spindle", os.X_OK) and os.access(base / "bin/spindle-stat", os.X_OK)
    conf = (base / "etc/spindle/spindle.conf").read_text()
    assert "root = /var/www/html" in conf, "the sample configuration serves Debian's document root"
    unit = (base / "lib/systemd/system/spindle.service").read_text()
    assert f"ExecStart={PREFIX}/sbin/spindle --config {PREFIX}/etc/spindle/spindle.conf" in unit


def test_installed_binary_runs_and_serves(destdir, docroot, tmp_path):
    base = destdir / PREFIX.lstrip("/")
    exe = str(base / "sbin/spindle")
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and "usage: spindle" in r.stdout, r
    r = subprocess.run([str(base / "bin/spindle-stat"), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r
    conf = str(base / "etc/spindle/spindle.conf")
    r = subprocess.run([exe, "--config", conf, "--root", str(docroot.path), "--check"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, f"the installed sample configuration does not pass --check: {r.stderr}"
    # the installed binary with the installed configuration serves a request
    srv = util.Server("epoll", docroot.path, tmp_path, extra_args=["--config", conf])
    srv.argv = lambda: [exe, "--config", conf, "--port", str(srv.port), "--root", str(docroot.path),
                        "--set", f"error_log={srv.error_log}", "--set", "stats=off"]
    srv.start()
    try:
        r = srv.get("/a.txt")
        assert r.status == 200 and r.body == b"Hello, world!"
    finally:
        assert srv.stop() == 0, srv.diagnostics()


def test_installed_man_pages_render_without_warnings(destdir):
    for page in ("share/man/man8/spindle.8", "share/man/man5/spindle.conf.5", "share/man/man1/spindle-stat.1"):
        path = destdir / PREFIX.lstrip("/") / page
        r = subprocess.run(["man", "--warnings", "-l", str(path)], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, MANWIDTH="80"))
        assert r.returncode == 0 and r.stderr == "", f"{page}: {r.stderr}"
        assert "SYNOPSIS" in re.sub(".\b", "", r.stdout)  # overstrike bold


def test_installed_units_verify(destdir, tmp_path):
    """systemd-analyze verify checks every directive (and that ExecStart's
    program exists, so the staged binary stands in for the installed path);
    it exits 0 on an unknown or malformed directive, so any output fails."""
    base = destdir / PREFIX.lstrip("/")
    units = []
    for name in ("spindle.service", "spindle.socket"):
        text = (base / "lib/systemd/system" / name).read_text()
        (tmp_path / name).write_text(text.replace(f"{PREFIX}/sbin/spindle", str(base / "sbin/spindle")))
        units.append(str(tmp_path / name))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and (r.stdout + r.stderr).strip() == "", r.stdout + r.stderr


def test_socket_unit_listens_on_loopback_as_spindle_does(destdir, tmp_path):
    """spindle binds 127.0.0.1 unless told otherwise; the socket unit that
    stands in for its listener must not open the port to every interface.
    The drop-in its comment shows (an empty ListenStream= then the public
    address) must verify too."""
    text = (destdir / PREFIX.lstrip("/") / "lib/systemd/system/spindle.socket").read_text()
    streams = re.findall(r"^ListenStream=(.*)$", text, re.M)
    assert streams == ["127.0.0.1:8080"], streams
    unit = tmp_path / "spindle.socket"
    unit.write_text(text)
    (tmp_path / "spindle.service").write_text("[Service]\nExecStart=/bin/true\n")
    dropin = tmp_path / "spindle.socket.d"
    dropin.mkdir()
    (dropin / "public.conf").write_text("[Socket]\nListenStream=\nListenStream=0.0.0.0:80\n")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and (r.stdout + r.stderr).strip() == "", r.stdout + r.stderr


def test_uninstall_leaves_no_file_behind(tmp_path):
    d = tmp_path / "destdir"
    make("install", f"DESTDIR={d}", f"PREFIX={PREFIX}")
    assert files_under(d), "nothing was installed"
    make("uninstall", f"DESTDIR={d}", f"PREFIX={PREFIX}")
    assert files_under(d) == [], "make uninstall left files behind"
    assert not (d / PREFIX.lstrip("/") / "etc/spindle").exists()


def test_uninstall_keeps_a_configuration_the_operator_changed(tmp_path):
    d = tmp_path / "destdir"
    make("install", f"DESTDIR={d}", f"PREFIX={PREFIX}")
    conf = d / PREFIX.lstrip("/") / "etc/spindle/spindle.conf"
    conf.write_text(conf.read_text().replace("port = 8080", "port = 80"))
    make("install", f"DESTDIR={d}", f"PREFIX={PREFIX}")  # a reinstall does not overwrite it either
    assert "port = 80\n" in conf.read_text()
    make("uninstall", f"DESTDIR={d}", f"PREFIX={PREFIX}")
    assert files_under(d) == [f"{PREFIX.lstrip('/')}/etc/spindle/spindle.conf"]


def test_prefix_usr_puts_the_configuration_in_etc(tmp_path):
    d = tmp_path / "destdir"
    make("install", f"DESTDIR={d}", "PREFIX=/usr")
    assert (d / "etc/spindle/spindle.conf").is_file()
    assert "ExecStart=/usr/sbin/spindle --config /etc/spindle/spindle.conf" in \
        (d / "usr/lib/systemd/system/spindle.service").read_text()
    page = (d / "usr/share/man/man8/spindle.8").read_text()
    assert "/etc/spindle/spindle" in page and "/usr/local" not in page  # scdoc escapes the dot in spindle.conf
    make("uninstall", f"DESTDIR={d}", "PREFIX=/usr")
    assert files_under(d) == []


def test_destdir_with_a_space_installs_there_alone_and_uninstall_twice_is_quiet(tmp_path):
    """A staging directory may have a space in its name (a package builder's
    path); unquoted, `install -d $(DESTDIR)...` made a directory named after
    the part before the space and a relative tree in the checkout, and
    uninstall would `rm -f` the part before the space."""
    d = tmp_path / "stage area"
    decoy = tmp_path / "stage"  # what an unquoted path splits off first
    decoy.write_text("not to be removed")
    before = set(os.listdir(util.REPO_ROOT))
    try:
        make("install", f"DESTDIR={d}", f"PREFIX={PREFIX}")
        assert files_under(d) == sorted(f"{PREFIX.lstrip('/')}/{f}" for f in INSTALLED)
        assert decoy.read_text() == "not to be removed"
        make("uninstall", f"DESTDIR={d}", f"PREFIX={PREFIX}")
        assert files_under(d) == [] and decoy.read_text() == "not to be removed"
        r = make("uninstall", f"DESTDIR={d}", f"PREFIX={PREFIX}")  # again: nothing left to remove
        assert "Error" not in r.stdout + r.stderr, r.stdout + r.stderr
    finally:
        stray = set(os.listdir(util.REPO_ROOT)) - before
        for name in stray:  # `area/usr/...` made in the checkout by an unquoted path
            subprocess.run(["rm", "-rf", "--", str(Path(util.REPO_ROOT) / name)], check=False)
    assert not stray, f"make install wrote outside DESTDIR, into the checkout: {sorted(stray)}"
