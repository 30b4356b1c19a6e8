"""Command line and configuration file handling."""
from __future__ import annotations

import re
import subprocess
import time

import pytest

import util


def test_binary_exists():
    assert util.spindle_bin().is_file(), f"{util.spindle_bin()} missing: run `make spindle`"


def test_version_prints_name_and_semver():
    r = util.run_spindle("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"spindle \d+\.\d+\.\d+\n?", r.stdout), repr(r.stdout)


def test_help_exits_zero_and_lists_options():
    r = util.run_spindle("--help")
    assert r.returncode == 0, r.stderr
    text = r.stdout + r.stderr
    for opt in ("--port", "--bind", "--root", "--model", "--config", "--check", "--set",
                "--list-models", "--workers", "--threads"):
        assert opt in text, f"--help does not mention {opt}"


def test_no_file_is_read_without_config(tmp_path):
    """./server.conf is read only when named: without --config spindle runs
    with the built-in defaults, whatever lies in its working directory, and
    --help says so."""
    (tmp_path / "www").mkdir()  # the default root
    (tmp_path / "server.conf").write_text("[server]\nport = 18129\nmodel = pool\n")
    r = util.run_spindle("--check", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^port = 8080$", r.stdout, re.M) and "18129" not in r.stdout, r.stdout
    assert re.search(r"^model = epoll$", r.stdout, re.M), r.stdout
    text = " ".join(util.run_spindle("--help").stdout.split())
    assert "without --config no file is read" in text, text


def test_list_models_format():
    r = util.run_spindle("--list-models")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    names = [ln.split()[0] for ln in lines]
    assert "iterative" in names and "epoll" in names, names
    assert len(set(names)) == len(names), f"duplicate model names: {names}"
    for ln in lines:
        # NAME, whitespace, a one-line description
        assert re.match(r"^[a-z0-9_-]+\s+\S", ln), f"bad --list-models line {ln!r}"
        # for a user: no reference to design notes they do not have
        assert "seed" not in ln, ln


def test_unknown_flag_fails():
    r = util.run_spindle("--no-such-flag")
    assert r.returncode != 0


def test_unknown_model_fails_naming_it(tmp_path):
    r = util.run_spindle("--bind", "127.0.0.1", "--port", str(util.free_port()),
                         "--root", str(tmp_path), "--model", "nosuchmodel", timeout=10)
    assert r.returncode != 0
    assert "nosuchmodel" in r.stderr + r.stdout


# --------------------------------------------------------------------------
# --check
# --------------------------------------------------------------------------

def _write(tmp_path, text: str):
    p = tmp_path / "server.conf"
    p.write_text(text)
    return p


def _check(conf, *extra):
    return util.run_spindle("--config", str(conf), "--check", *extra, timeout=10)


def test_check_valid_config_exits_zero_and_describes_it(tmp_path):
    conf = _write(tmp_path, f"""\
; a comment
# another comment
[server]
bind = 127.0.0.1
port = 18123
root = {tmp_path}
model = epoll
max_connections = 50

[http]
keepalive_timeout = 5
header_timeout = 500ms
send_timeout = 2m
drain_timeout = 3s
max_request_line = 8192
max_head = 16384
max_headers = 100
max_body = 1048576
max_ranges = 16
index = index.html
dotfiles = off
symlinks = inside
server_tokens = off

[log]
access_log = off
error_log = -
log_level = info
""")
    r = _check(conf)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "18123" in out, f"--check does not show the port: {out!r}"
    assert "epoll" in out, f"--check does not show the model: {out!r}"


def test_check_accepts_keys_before_any_section(tmp_path):
    conf = _write(tmp_path, f"port = 18124\nroot = {tmp_path}\nkeepalive_timeout = 2s\n")
    r = _check(conf)
    assert r.returncode == 0, r.stderr
    assert "18124" in r.stdout + r.stderr


def test_check_command_line_overrides_config(tmp_path):
    conf = _write(tmp_path, f"[server]\nport = 18125\nroot = {tmp_path}\n")
    r = _check(conf, "--port", "18126")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "18126" in out and "18125" not in out, out


def test_check_set_overrides_config(tmp_path):
    conf = _write(tmp_path, f"[server]\nport = 18127\nroot = {tmp_path}\n")
    r = _check(conf, "--set", "port=18128")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "18128" in out and "18127" not in out, out


@pytest.mark.parametrize("name,text,line", [
    ("unknown_key", "[server]\nport = 8080\nfrobnicate = 1\n", 3),
    ("port_out_of_range", "[server]\nport = 70000\n", 2),
    ("unknown_model", "[server]\n\nmodel = nope\n", 3),
    ("bad_duration", "[http]\nkeepalive_timeout = 5\nheader_timeout = abc\n", 3),
    ("line_without_equals", "[server]\nport = 8080\nthis line has no equals sign\n", 3),
    ("key_in_wrong_section", "[http]\nport = 8080\n", 2),
    ("bad_log_level", "[log]\nlog_level = loud\n", 2),
    ("bad_symlinks_value", "[http]\nsymlinks = sometimes\n", 2),
    ("negative_max_body", "[http]\nmax_body = -5\n", 2),
])
def test_check_bad_config_reports_file_and_line(tmp_path, name, text, line):
    conf = _write(tmp_path, text)
    r = _check(conf)
    assert r.returncode != 0, f"{name}: --check accepted a bad config"
    assert f"{conf}:{line}:" in r.stderr, f"{name}: expected '{conf}:{line}:' in {r.stderr!r}"


def test_check_unknown_section_reports_file_and_line(tmp_path):
    conf = _write(tmp_path, "[nosuchsection]\nfoo = 1\n")
    r = _check(conf)
    assert r.returncode != 0
    assert re.search(re.escape(str(conf)) + r":[12]:", r.stderr), r.stderr


def test_check_missing_config_file_fails(tmp_path):
    r = _check(tmp_path / "does-not-exist.conf")
    assert r.returncode != 0
    assert "does-not-exist.conf" in r.stderr


def test_bad_config_refuses_to_start(tmp_path):
    conf = _write(tmp_path, f"[server]\nroot = {tmp_path}\nport = 70000\n")
    r = util.run_spindle("--config", str(conf), timeout=10)
    assert r.returncode != 0
    assert f"{conf}:3:" in r.stderr


def test_bad_set_value_refuses_to_start(tmp_path):
    r = util.run_spindle("--bind", "127.0.0.1", "--port", str(util.free_port()), "--root",
                         str(tmp_path), "--set", "header_timeout=abc", timeout=10)
    assert r.returncode != 0
    assert "header_timeout" in r.stderr


def test_config_file_is_used_to_serve(tmp_path, docroot):
    """A server configured only by --config listens where the file says."""
    port = util.free_port()
    conf = _write(tmp_path, f"[server]\nbind = 127.0.0.1\nport = {port}\nroot = {docroot.path}\n"
                            f"[log]\naccess_log = off\nerror_log = {tmp_path}/error.log\n")
    proc = subprocess.Popen([str(util.spindle_bin()), "--config", str(conf)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    util.Server.adopt(proc, tmp_path, tmp_path / "error.log", root=docroot.path)
    try:
        resp = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with util.Conn.open(port, timeout=5) as c:
                    c.send(util.build_request("GET", "/a.txt"))
                    resp = c.read_response()
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        assert resp is not None, f"server from --config never answered (exit {proc.poll()})"
        assert resp.status == 200 and resp.body == b"Hello, world!"
    finally:
        proc.terminate()
        try:
            rc = proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert rc == 0, proc.stderr.read()
