"""Certificates that renew themselves: spindle serves the ACME HTTP-01
challenge files an ACME client leaves in `acme_webroot` for every request,
whatever its Host, over plain HTTP even on an instance that redirects
everything else to HTTPS, under Landlock and as the dropped user; a renewed
certificate put at the same paths is picked up by a reload under load with no
failed request; and certbot, against Pebble (Let's Encrypt's test ACME
server), obtains a certificate through spindle's webroot that spindle then
serves and curl verifies against Pebble's root."""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import ssl
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
GO_BIN = util.REPO_ROOT / "build" / "go" / "bin"


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


# ---------------------------------------------------------------------------
# certbot against Pebble, through spindle
# ---------------------------------------------------------------------------

ACME_NAME = "www.spindle.test"


def _tool(path: Path | str | None, what: str) -> str:
    if path is None or not Path(path).exists():
        pytest.fail(f"{what} is missing: `make deps` (scripts/install-deps.sh) installs it", pytrace=False)
    return str(path)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
        try:
            with socket.create_connection((util.HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listening on {port} after {timeout}s:\n{log.read_text(errors='replace')[-3000:]}")


def _started(port: int, proc: subprocess.Popen, log: Path, last: bool) -> bool:
    """Whether proc listens on port; False when it exited because a port it
    was given had been taken since it was found free (try others), unless
    this was the last try."""
    try:
        _wait_port(port, proc, log, 10)
        return True
    except AssertionError:
        if last or proc.poll() is None or "address already in use" not in log.read_text(errors="replace"):
            raise
        return False


def _curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True, timeout=20)


def test_certbot_gets_a_certificate_from_pebble_through_spindle(certs, docroot, tmp_path):
    """certbot certonly --webroot, unchanged, against Pebble: Pebble asks
    spindle's plain port for the challenge (its DNS, pebble-challtestsrv,
    says every name is 127.0.0.1), certbot's deploy hook copies the
    certificate to the paths spindle reads and sends SIGHUP, and curl
    verifies what spindle's TLS port then serves against Pebble's root. Every
    process the test starts is stopped by its pid; the whole takes seconds."""
    pebble = _tool(GO_BIN / "pebble", "pebble")
    challtestsrv = _tool(GO_BIN / "pebble-challtestsrv", "pebble-challtestsrv")
    certbot = _tool(shutil.which("certbot"), "certbot")

    webroot = tmp_path / "acme"
    webroot.mkdir()
    # spindle starts on a placeholder certificate: the test CA's, which
    # Pebble's root does not vouch for
    live = tmp_path / "tls"
    live.mkdir()
    chain, key = live / "fullchain.pem", live / "privkey.pem"
    shutil.copy(certs.chain, chain)
    shutil.copy(certs.key, key)
    tls_port = util.free_port()
    from test_listen import ListenServer
    srv = ListenServer("epoll", docroot.path, tmp_path / "srv", [f"127.0.0.1:{tls_port} tls"],
                       settings={"tls_certificate": str(chain), "tls_certificate_key": str(key),
                                 "acme_webroot": str(webroot)})

    procs: list[subprocess.Popen] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(argv: list[str], name: str, env: dict | None = None) -> subprocess.Popen:
        out = open(logs / f"{name}.log", "wb")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 cwd=tmp_path, env=env)
        finally:
            out.close()
        procs.append(p)
        return p

    try:
        srv.start()
        # DNS for Pebble: every A query answers 127.0.0.1, AAAA nothing (so
        # Pebble dials spindle's IPv4 address); its challenge servers are off
        for attempt in range(3):   # a free port may be taken meanwhile: by a client's socket, say
            dns_port, dns_mgmt_port = util.free_port(), util.free_port()
            dns = start([challtestsrv, "-dnsserver", f"127.0.0.1:{dns_port}", "-management",
                         f"127.0.0.1:{dns_mgmt_port}", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
                         "-http01", "", "-https01", "", "-doh", "", "-tlsalpn01", ""], "challtestsrv")
            if _started(dns_mgmt_port, dns, logs / "challtestsrv.log", last=attempt == 2):
                break
        for attempt in range(3):
            acme_port, mgmt_port = util.free_port(), util.free_port()
            config = tmp_path / "pebble.json"
            config.write_text(json.dumps({"pebble": {
                "listenAddress": f"127.0.0.1:{acme_port}", "managementListenAddress": f"127.0.0.1:{mgmt_port}",
                "certificate": str(certs.chain), "privateKey": str(certs.key),
                # the HTTP-01 validation goes to spindle's plain port
                "httpPort": srv.port, "tlsPort": util.free_port(),
                "ocspResponderURL": "", "externalAccountBindingRequired": False,
                "retryAfter": {"authz": 1, "order": 1}, "keyAlgorithm": "ecdsa"}}))
            # real validation (never PEBBLE_VA_ALWAYS_VALID), without its random
            # sleeps and with no nonce refused on purpose: the test stays short
            env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_VA_ALWAYS_VALID="0", PEBBLE_WFE_NONCEREJECT="0",
                       PEBBLE_AUTHZREUSE="0")
            peb = start([pebble, "-config", str(config), "-dnsserver", f"127.0.0.1:{dns_port}"], "pebble", env)
            if _started(acme_port, peb, logs / "pebble.log", last=attempt == 2):
                break
        _wait_port(mgmt_port, peb, logs / "pebble.log", 10)

        # Pebble's root, from its management API (made fresh at each start)
        r = _curl("--cacert", str(certs.ca), f"https://127.0.0.1:{mgmt_port}/roots/0")
        assert r.returncode == 0 and b"BEGIN CERTIFICATE" in r.stdout, r.stderr
        pebble_root = tmp_path / "pebble-root.pem"
        pebble_root.write_bytes(r.stdout)
        verify = ["--cacert", str(pebble_root), "--resolve", f"{ACME_NAME}:{tls_port}:127.0.0.1",
                  f"https://{ACME_NAME}:{tls_port}/a.txt"]
        r = _curl(*verify)
        assert r.returncode != 0, "the placeholder certificate verified against Pebble's root"

        hook = (f'cp "$RENEWED_LINEAGE/fullchain.pem" {chain} && cp "$RENEWED_LINEAGE/privkey.pem" {key} '
                f'&& kill -HUP {srv.proc.pid}')
        cb = tmp_path / "certbot"
        t0 = time.monotonic()
        r = subprocess.run([certbot, "certonly", "--non-interactive", "--agree-tos",
                            "--register-unsafely-without-email", "--server", f"https://127.0.0.1:{acme_port}/dir",
                            "--webroot", "-w", str(webroot), "-d", ACME_NAME, "--deploy-hook", hook,
                            "--config-dir", str(cb / "config"), "--work-dir", str(cb / "work"),
                            "--logs-dir", str(cb / "logs")],
                           capture_output=True, text=True, timeout=90,
                           env=dict(os.environ, REQUESTS_CA_BUNDLE=str(certs.ca)))
        took = time.monotonic() - t0
        assert r.returncode == 0, (f"certbot exited {r.returncode}:\n{r.stdout}\n{r.stderr}\n--- pebble:\n"
                                   f"{(logs / 'pebble.log').read_text(errors='replace')[-3000:]}\n"
                                   f"{srv.diagnostics()}")
        print(f"\ncertbot certonly against Pebble through spindle: {took:.1f} s")
        # Pebble fetched the challenge from spindle, over plain HTTP
        access = srv.access_log.read_text(errors="replace")
        assert re.search(r'"GET /\.well-known/acme-challenge/[A-Za-z0-9_-]+ HTTP/1\.1" 200 ', access), access
        assert not [p for p in webroot.rglob("*") if p.is_file()], "certbot removes its challenge files"

        assert wait_log(srv, GEN_RE.format(n=2, model="epoll"), util.scaled(10)), \
            f"the deploy hook's SIGHUP brought no new generation\n{srv.diagnostics()}"
        # the old generation takes new connections (on the placeholder)
        # until it has drained: both accept on the same sockets
        assert wait_log(srv, r"generation 1 \(pid \d+\) finished", util.scaled(15)), srv.diagnostics()
        r = _curl(*verify)
        assert r.returncode == 0 and r.stdout == A_TXT, (r.returncode, r.stderr, srv.diagnostics())
        # and the certificate served is the one certbot got
        lineage = cb / "config" / "live" / ACME_NAME / "cert.pem"
        ctx = ssl.create_default_context(cafile=str(pebble_root))
        with socket.create_connection((util.HOST, tls_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=ACME_NAME) as s:
                served = int(s.getpeercert()["serialNumber"], 16)
        assert served == _serial_of_pem(lineage)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if srv.proc is not None:
            assert srv.stop() == 0, srv.diagnostics()
