"""Certificates that renew themselves: spindle serves the ACME HTTP-01
challenge files an ACME client leaves in `acme_webroot` for every request,
whatever its Host, over plain HTTP even on an instance that redirects
everything else to HTTPS, under Landlock and as the dropped user; a renewed
certificate put at the same paths is picked up by a reload under load with no
failed request."""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import util
from conftest import A_TXT
from supervision import GEN_RE, run_wrk, wait_log, wrk_result
from tlsutil import client_context, openssl

pytestmark = pytest.mark.semantics

TOKEN = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"
KEY_AUTH = (TOKEN + ".9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI").encode()
CHALLENGE = "/.well-known/acme-challenge/"


@pytest.fixture(scope="module")
def webroot(tmp_path_factory) -> Path:
    """An ACME webroot outside the document root, as certbot --webroot
    leaves it: .well-known/acme-challenge/TOKEN holding the key
    authorization. Directories 0755 and files 0644, so a dropped serving
    user may read them (the fixture's own base directory is root's only)."""
    base = tmp_path_factory.mktemp("acme")
    root = base / "webroot"
    d = root / ".well-known" / "acme-challenge"
    d.mkdir(parents=True)
    for p in (root, root / ".well-known", d):
        p.chmod(0o755)
    (d / TOKEN).write_bytes(KEY_AUTH)
    (d / "adir").mkdir()
    (d / "tok.gz").write_bytes(b"a sidecar is never served")
    (d / ".hidden").write_bytes(b"a dotfile is never served")
    os.mkfifo(d / "fifo")
    (root / "not-a-challenge.txt").write_bytes(b"only challenges are served from the webroot")
    return root


@pytest.mark.per_model
def test_challenge_served_for_any_host(model, servers, webroot):
    """Every model serves the token's file as text/plain, whatever the Host
    (or none, HTTP/1.0), from a webroot outside the root under Landlock (on
    by default), and the site still serves its own files."""
    srv = servers(acme_webroot=str(webroot))
    for host in ("localhost", "www.example.org", "another.example", None):
        r = srv.get(CHALLENGE + TOKEN, host=host, version="HTTP/1.1" if host else "HTTP/1.0")
        assert r.status == 200 and r.body == KEY_AUTH, (host, r.status, r.body[:80])
        assert r.header("Content-Type") == "text/plain", r
    r = srv.request("HEAD", CHALLENGE + TOKEN)
    assert r.status == 200 and r.body == b"" and r.header("Content-Length") == str(len(KEY_AUTH)), r
    assert srv.get("/a.txt").body == A_TXT


def test_without_acme_webroot_the_path_is_the_sites(servers, webroot):
    """Off (the default), a challenge path is an ordinary path of the site:
    a dot-directory, 404 while dotfiles are off."""
    assert servers().get(CHALLENGE + TOKEN).status == 404


@pytest.mark.parametrize("path", [
    CHALLENGE + "missing-token",
    CHALLENGE + "adir",          # a directory named like a token
    CHALLENGE + "fifo",          # not a regular file (and the open does not block)
    CHALLENGE + "tok.gz",        # no sidecars, no extensions
    CHALLENGE + ".hidden",       # no dotfiles
    CHALLENGE,                   # no listing
    CHALLENGE.rstrip("/"),
    CHALLENGE + "adir/",
    CHALLENGE + TOKEN + "/",
    CHALLENGE + "a%2Fb",
])
def test_anything_but_a_token_file_is_404(servers, webroot, path):
    srv = servers(acme_webroot=str(webroot), autoindex="html")
    r = srv.get(path)
    assert r.status == 404 and KEY_AUTH not in r.body, (path, r.status, r.body[:80])


def test_challenge_path_spelled_otherwise_is_the_same_file(servers, webroot):
    """Matched after decoding and canonicalising, as any path is: a spelling
    cannot slip past to the site, nor reach another file of the webroot."""
    srv = servers(acme_webroot=str(webroot))
    for path in ("//.well-known//acme-challenge/" + TOKEN, "/x/../.well-known/./acme-challenge/" + TOKEN,
                 "/%2Ewell-known/acme-challenge/" + TOKEN):
        r = srv.get(path)
        assert r.status == 200 and r.body == KEY_AUTH, (path, r.status)
    # the webroot holds challenges only: the rest of it is not the site
    assert srv.get("/not-a-challenge.txt").status == 404
    assert srv.get(CHALLENGE + "../not-a-challenge.txt").status == 404


def test_methods_other_than_get_and_head_are_refused(servers, webroot):
    srv = servers(acme_webroot=str(webroot))
    r = srv.request("POST", CHALLENGE + TOKEN, headers={"Content-Length": "0"})
    assert r.status == 405 and r.header("Allow") == "GET, HEAD", r


def test_challenge_over_plain_http_where_everything_else_redirects(servers, webroot):
    """A plain-HTTP instance that sends every client to HTTPS still answers
    the ACME server's request itself (it asks over plain HTTP, port 80)."""
    srv = servers(acme_webroot=str(webroot), redirect_https="on")
    r = srv.get(CHALLENGE + TOKEN, host="www.example.org")
    assert r.status == 200 and r.body == KEY_AUTH, r
    r = srv.get("/a.txt", host="www.example.org")
    assert r.status == 301 and r.header("Location") == "https://www.example.org/a.txt", r
    r = srv.get(CHALLENGE + "missing", host="www.example.org")
    assert r.status == 404, r


def test_acme_webroot_must_be_a_directory(tmp_path, docroot):
    """A webroot that is missing or not a directory stops the start (and
    --check, and so a reload) with the file, the line and the reason."""
    conf = tmp_path / "spindle.conf"
    (tmp_path / "file").write_text("")
    for value, why in ((tmp_path / "missing", "No such file or directory"), (tmp_path / "file", "not a directory")):
        conf.write_text(f"[server]\nroot = {docroot.path}\n\n[tls]\nacme_webroot = {value}\n")
        r = util.run_spindle("--config", str(conf), "--check")
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert f"{conf}:5: acme_webroot: '{value}'" in r.stderr and why in r.stderr, r.stderr


@pytest.fixture
def www_data() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.fail("dropping to another user needs root (the suite runs as root)")
    return pwd.getpwnam("www-data")


def test_dropped_user_reads_the_webroot_and_one_it_cannot_enter_is_refused(docroot, webroot, tmp_path, www_data):
    """As `user` under Landlock the serving process reads the webroot (the
    master opened it; Landlock has a rule for it); a webroot the user cannot
    enter is refused at start, naming it, not answered 404 ever after."""
    # as test_privileges.py's: sticky and open to all, as /tmp, so a
    # sanitizer build's dropped process can write its report there
    work = Path(tempfile.mkdtemp(prefix="spindle-acme-"))
    work.chmod(0o1777)
    srv = util.Server("epoll", docroot.path, work, {"user": "www-data", "acme_webroot": str(webroot)}).start()
    try:
        r = srv.get(CHALLENGE + TOKEN)
        assert r.status == 200 and r.body == KEY_AUTH, (r.status, r.body[:80], srv.diagnostics())
        assert re.search(r"landlock \(ABI \d+\): .* and the ACME webroot " + re.escape(str(webroot)),
                         srv.error_log.read_text()), srv.diagnostics()
    finally:
        assert srv.stop() == 0, srv.diagnostics()
        shutil.rmtree(work, ignore_errors=True)
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    r = util.run_spindle("--root", str(docroot.path), "--port", str(util.free_port()), "--check",
                         "--set", "user=www-data", "--set", f"acme_webroot={closed}")
    assert r.returncode != 0 and f"acme_webroot: the serving processes' user (uid {www_data.pw_uid}) cannot " \
                                 f"enter {closed}" in r.stderr, (r.returncode, r.stderr)


# ---------------------------------------------------------------------------
# A renewed certificate at the same paths
# ---------------------------------------------------------------------------

def _server_cert(certs, d: Path, name: str) -> tuple[Path, Path]:
    """Another certificate for localhost from the test CA: (chain, key)."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", "/CN=localhost", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(certs.ca), "-CAkey", str(certs.dir / "ca.key"),
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", str(certs.dir / "san.ext"), cwd=d)
    (d / f"{name}.chain").write_bytes((d / f"{name}.pem").read_bytes() + certs.ca.read_bytes())
    return d / f"{name}.chain", d / f"{name}.key"


def _serial_of_pem(pem: Path) -> int:
    r = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in", str(pem)], capture_output=True, text=True,
                       timeout=30)
    return int(r.stdout.strip().split("=")[1], 16)


def _served_serial(port: int, certs) -> int:
    with socket.create_connection((util.HOST, port), timeout=5) as raw:
        with client_context(certs).wrap_socket(raw, server_hostname="localhost") as s:
            return int(s.getpeercert()["serialNumber"], 16)


@pytest.mark.campaign
@pytest.mark.parametrize("model", ["epoll", "prefork"])
def test_renewed_certificate_at_the_same_paths_served_after_reload_under_wrk(model, certs, docroot, tmp_path):
    """What a deploy hook does: new files over the old paths, then SIGHUP.
    Connections made after the reload get the new certificate, and wrk over
    HTTPS across it sees no failed request."""
    d = tmp_path / "certs"
    d.mkdir()
    old_chain, old_key = _server_cert(certs, d, "old")
    new_chain, new_key = _server_cert(certs, d, "new")
    chain, key = d / "fullchain.pem", d / "privkey.pem"
    shutil.copy(old_chain, chain)
    shutil.copy(old_key, key)
    srv = util.Server(model, docroot.path, tmp_path / "srv",
                      {"tls": "on", "tls_certificate": str(chain), "tls_certificate_key": str(key), "workers": 2,
                       "keepalive_timeout": 30}).start()
    try:
        assert _served_serial(srv.port, certs) == _serial_of_pem(old_chain)
        wrk = run_wrk(srv.port, 4, conns=8, scheme="https")
        time.sleep(1.5)
        shutil.copy(new_chain, chain)
        shutil.copy(new_key, key)
        srv.signal(signal.SIGHUP)
        assert wait_log(srv, GEN_RE.format(n=2, model=model), util.scaled(5)), srv.diagnostics()
        # until the old generation has drained, it may still take a new
        # connection (with the old certificate): both accept on the sockets
        assert wait_log(srv, r"generation 1 \(pid \d+\) finished", util.scaled(15)), srv.diagnostics()
        assert _served_serial(srv.port, certs) == _serial_of_pem(new_chain)
        res = wrk_result(wrk, timeout=util.scaled(40))
        print(f"\nwrk over https across a certificate reload ({model}): {res['requests']} requests, "
              f"{res['failed']} failed")
        assert res["rc"] == 0 and res["requests"] > 100, res["out"]
        assert res["failed"] == 0, res["out"]
    finally:
        assert srv.stop() == 0, srv.diagnostics()
