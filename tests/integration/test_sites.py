"""Several sites on one server ([site NAME] sections): each chosen by Host
(an absolute-form target's authority first) and, over TLS, by SNI, which
also picks its certificate; each with its own root, error pages, listings,
rules, access-log name and request counter; 421 when the Host names
another site than the SNI did; default_site = reject; the file cache keeps
two sites' same-named files apart; a reload adds a site and changes a
certificate under wrk without a failed request; bad [site] sections are
refused with file:line.

What a site answers does not depend on the model: these run under one
(the `semantics` marker)."""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

import util
from supervision import GEN_RE, log_text, run_wrk, wait_log, wrk_result
from tlsutil import Certs, openssl

pytestmark = pytest.mark.semantics

HOST = util.HOST
# a's and b's index pages have one length and one mtime, so one ETag: only
# the cache key tells them apart
SITE_A = b"<p>site a</p>\n"
SITE_B = b"<p>site b</p>\n"
SITE_C = b"<p>site c, added by a reload</p>\n"
DEFAULT = b"<p>the default site</p>\n"
A_404 = b"<p>a has no such page</p>\n"
SAME_MTIME = 1_700_000_000


def leaf(certs: Certs, d: Path, name: str, *dns: str) -> tuple[Path, Path]:
    """A certificate for dns names signed by the test CA, written with its
    chain, and its key."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={dns[0]}", cwd=d)
    (d / f"{name}.ext").write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in dns) + "\n")
    # a serial of its own: -CAcreateserial would write into the shared CA's directory
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(certs.ca), "-CAkey", str(certs.dir / "ca.key"),
            "-set_serial", f"0x{secrets.token_hex(8)}", "-out", f"{name}.pem", "-days", "2",
            "-extfile", f"{name}.ext", cwd=d)
    chain = d / f"{name}.chain.pem"
    chain.write_bytes((d / f"{name}.pem").read_bytes() + certs.ca.read_bytes())
    return chain, d / f"{name}.key"


class Sites:
    """Roots and certificates of the sites a, b (and c, which a reload adds)."""

    def __init__(self, base: Path, certs: Certs):
        self.certs = certs
        self.root = {}
        for name, index in (("default", DEFAULT), ("a", SITE_A), ("b", SITE_B), ("c", SITE_C)):
            r = base / name
            r.mkdir()
            (r / "index.html").write_bytes(index)
            (r / "a.txt").write_bytes(b"Hello from " + name.encode() + b"\n")
            self.root[name] = r
        for name in ("a", "b"):
            os.utime(self.root[name] / "index.html", (SAME_MTIME, SAME_MTIME))
        (self.root["a"] / "errors").mkdir()
        (self.root["a"] / "errors" / "404.html").write_bytes(A_404)
        (self.root["b"] / "files").mkdir()
        (self.root["b"] / "files" / "only-in-b.txt").write_bytes(b"b\n")
        d = base / "tls"
        d.mkdir()
        self.cert = {
            "a": leaf(certs, d, "a", "a.test", "www.a.test"),
            "b": leaf(certs, d, "b", "b.test", "*.b.test"),
            "b2": leaf(certs, d, "b2", "b.test", "*.b.test"),
            "c": leaf(certs, d, "c", "c.test"),
        }

    def conf(self, default_site: str = "serve", with_c: bool = False, b_cert: str = "b",
             log_format: str = "json") -> str:
        text = (f"[server]\ndefault_site = {default_site}\n"
                f"[log]\naccess_log_format = {log_format}\n"
                f"[site a]\nnames = a.test www.a.test\nroot = {self.root['a']}\n"
                f"tls_certificate = {self.cert['a'][0]}\ntls_certificate_key = {self.cert['a'][1]}\n"
                f"[site b]\nnames = b.test *.b.test\nroot = {self.root['b']}\nautoindex = html\n"
                f"tls_certificate = {self.cert[b_cert][0]}\ntls_certificate_key = {self.cert[b_cert][1]}\n"
                f"[site b headers]\n/ = X-Site: b\n")
        if with_c:
            text += (f"[site c]\nnames = c.test\nroot = {self.root['c']}\n"
                     f"tls_certificate = {self.cert['c'][0]}\ntls_certificate_key = {self.cert['c'][1]}\n")
        return text


class SitesServer(util.Server):
    """Plain HTTP on the harness's port and HTTPS on tls_port, both from
    `listen` lines; the sites from a config file (rewritten for a reload)."""

    def __init__(self, model: str, sites: Sites, workdir: Path, conf_text: str, **settings):
        workdir.mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "sites.conf"
        self.conf.write_text(conf_text)
        self.tls_port = util.free_port()
        base = {"tls_certificate": str(sites.certs.chain), "tls_certificate_key": str(sites.certs.key),
                "metrics": "on"}
        super().__init__(model, sites.root["default"], workdir, {**base, **settings},
                         extra_args=["--config", str(self.conf)])

    def argv(self) -> list[str]:
        return super().argv() + ["--set", f"listen={HOST}:{self.port}",
                                 "--set", f"listen={HOST}:{self.tls_port} tls"]


@pytest.fixture(scope="module")
def sites(tmp_path_factory, certs) -> Sites:
    return Sites(tmp_path_factory.mktemp("sites"), certs)


@pytest.fixture(scope="module")
def srv(model_name, sites, tmp_path_factory):
    s = SitesServer(model_name, sites, tmp_path_factory.mktemp("sites-srv"), sites.conf()).start()
    yield s
    rc = s.stop()
    assert rc == 0, s.diagnostics()


def get(s: util.Server, host: str | None, target: str = "/", version: str = "HTTP/1.1") -> util.Response:
    return s.request("GET", target, host=host, version=version)


def tls_get(s: SitesServer, certs: Certs, sni: str | None, host: str | None, target: str = "/"):
    """One request over TLS with this SNI (None: none sent) and Host: the
    response and the certificate the server showed (as a dict)."""
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.check_hostname = False  # the test looks at the certificate itself
    raw = socket.create_connection((HOST, s.tls_port), timeout=5)
    tls = ctx.wrap_socket(raw, server_hostname=sni)
    with util.Conn(tls, 5.0) as c:
        peer = tls.getpeercert()
        c.send(util.build_request("GET", target, host=host))
        return c.read_response("GET"), peer


def subject_names(peer: dict) -> set[str]:
    return {v for kind, v in peer.get("subjectAltName", ()) if kind == "DNS"}


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "--max-time", str(util.scaled(10)), *args], capture_output=True,
                          timeout=util.scaled(20))


# ---------------------------------------------------------------------------
# choosing the site

def test_host_chooses_the_site_over_http(model, srv):
    for host, body in (("a.test", SITE_A), ("A.Test:8080", SITE_A), ("www.a.test.", SITE_A),
                       ("b.test", SITE_B), ("x.y.b.test", SITE_B), ("B.TEST", SITE_B),
                       ("c.test", DEFAULT), ("b.test.evil", DEFAULT), ("localhost", DEFAULT),
                       (f"{HOST}:{srv.port}", DEFAULT)):
        r = get(srv, host)
        assert r.status == 200 and r.body == body, (host, r)
    # HTTP/1.0 without Host: the default site
    r = get(srv, None, version="HTTP/1.0")
    assert r.status == 200 and r.body == DEFAULT
    # RFC 9112 3.2.2: an absolute-form target's authority wins over Host
    r = get(srv, "a.test", "http://b.test/")
    assert r.status == 200 and r.body == SITE_B, r
    # a site's rules are its own
    assert get(srv, "b.test").header("X-Site") == "b"
    assert get(srv, "a.test").header("X-Site") is None


def test_each_site_serves_its_certificate(model, srv, sites):
    """curl verifies each site's certificate against the CA by its name
    (the top level's is for localhost: it would not verify for these)."""
    for name, body in (("a.test", SITE_A), ("www.a.test", SITE_A), ("b.test", SITE_B),
                       ("deep.b.test", SITE_B), ("localhost", DEFAULT)):
        r = curl("--cacert", str(sites.certs.ca), "--resolve", f"{name}:{srv.tls_port}:{HOST}",
                 f"https://{name}:{srv.tls_port}/")
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout == body, name


def test_unknown_or_no_sni_gets_the_default_certificate(model, srv, sites):
    r, peer = tls_get(srv, sites.certs, "nope.test", "nope.test")
    assert subject_names(peer) == {"localhost"} and r.status == 200 and r.body == DEFAULT
    # no SNI (a client that dialled an address): Host alone chooses
    r, peer = tls_get(srv, sites.certs, None, "a.test")
    assert subject_names(peer) == {"localhost"} and r.status == 200 and r.body == SITE_A


def test_host_naming_another_site_than_the_sni_is_421(model, srv, sites):
    """RFC 9110 15.5.20: a connection set up for one site is not used for
    another; the same site's other name is fine."""
    r, peer = tls_get(srv, sites.certs, "a.test", "b.test")
    assert subject_names(peer) == {"a.test", "www.a.test"}
    assert r.status == 421, r
    r, _ = tls_get(srv, sites.certs, "a.test", "www.a.test")
    assert r.status == 200 and r.body == SITE_A
    r, _ = tls_get(srv, sites.certs, "x.b.test", "nope.test")
    assert r.status == 421, r
    r, _ = tls_get(srv, sites.certs, "nope.test", "b.test")
    assert r.status == 421, r


# ---------------------------------------------------------------------------
# what each site has of its own

def test_error_pages_and_listings_are_the_sites_own(model, srv):
    r = get(srv, "a.test", "/nope")
    assert r.status == 404 and r.body == A_404
    r = get(srv, "b.test", "/nope")
    assert r.status == 404 and r.body != A_404
    r = get(srv, "b.test", "/files/")
    assert r.status == 200 and b"only-in-b.txt" in r.body, r
    assert get(srv, "a.test", "/files/").status == 404


def test_the_cache_keeps_two_sites_files_apart(model, srv):
    """a's and b's /index.html have one path, size and mtime: a cache keyed
    by the path alone would answer one site with the other's page."""
    assert get(srv, "a.test").header("ETag") == get(srv, "b.test").header("ETag")
    for _ in range(5):
        for host, name, body in (("a.test", "a", SITE_A), ("b.test", "b", SITE_B), ("localhost", "default", DEFAULT)):
            assert get(srv, host).body == body, host
            assert get(srv, host, "/a.txt").body == b"Hello from " + name.encode() + b"\n", host


def test_the_access_log_and_metrics_name_the_site(model, srv):
    for host in ("a.test", "a.test", "b.test", "other.test"):
        assert get(srv, host, "/a.txt?logged").status == 200

    def logged():
        return [json.loads(ln) for ln in srv.access_log.read_text().splitlines()
                if '"target":"/a.txt?logged"' in ln]
    lines = util.wait_for(lambda: len(logged()) >= 4 and logged(), util.scaled(3))
    assert sorted(d["site"] for d in lines[-4:]) == ["a", "a", "b", "default"], lines

    m = get(srv, HOST, "/metrics")
    assert m.status == 200
    counts = dict(re.findall(rb'^spindle_site_requests_total\{site="([a-z]+)"\} (\d+)$', m.body, re.M))
    assert set(counts) == {b"default", b"a", b"b"}, m.body
    assert int(counts[b"a"]) >= 2 and int(counts[b"b"]) >= 1


def test_vhost_combined_puts_the_site_first(model, sites, tmp_path):
    s = SitesServer(model, sites, tmp_path / "srv", sites.conf(log_format="vhost_combined")).start()
    try:
        assert get(s, "b.test", "/a.txt").status == 200
        assert get(s, "nope.test", "/a.txt").status == 200
        lines = util.wait_for(lambda: len(s.access_log.read_text().splitlines()) >= 2 and
                              s.access_log.read_text().splitlines(), util.scaled(3))
        # in either order: a line is written once its response is, and two
        # loop threads may write theirs the other way round (seen under TSan)
        assert sorted(ln.split(" ", 1)[0] for ln in lines) == ["b", "default"], lines
        b = next(ln for ln in lines if ln.startswith("b "))
        assert re.match(r'^b 127\.0\.0\.1 - - \[[^]]+\] "GET /a\.txt HTTP/1\.1" 200 \d+ ', b), lines
        assert next(ln for ln in lines if ln.startswith("default ")).startswith("default 127.0.0.1 - - ["), lines
    finally:
        assert s.stop() == 0, s.diagnostics()


def test_default_site_reject(model, sites, tmp_path):
    """A name no site claims: 404 over plain HTTP, 421 over TLS; the
    sites' own names are served as before."""
    s = SitesServer(model, sites, tmp_path / "srv", sites.conf(default_site="reject")).start()
    try:
        assert get(s, "nope.test").status == 404
        assert get(s, None, version="HTTP/1.0").status == 404
        r = get(s, "a.test")
        assert r.status == 200 and r.body == SITE_A
        r, _ = tls_get(s, sites.certs, "nope.test", "nope.test")
        assert r.status == 421
        r, _ = tls_get(s, sites.certs, "b.test", "b.test")
        assert r.status == 200 and r.body == SITE_B
    finally:
        assert s.stop() == 0, s.diagnostics()


def test_server_wide_paths_answer_whatever_the_host_under_reject(model, sites, tmp_path):
    """With default_site = reject, the health check, the statistics and ACME
    challenges are still answered for a Host no site claims, or none (a
    load balancer's check sends none), from the default site."""
    webroot = tmp_path / "acme"
    (webroot / ".well-known" / "acme-challenge").mkdir(parents=True)
    (webroot / ".well-known" / "acme-challenge" / "tok-123").write_text("tok-123.thumb")
    s = SitesServer(model, sites, tmp_path / "srv", sites.conf(default_site="reject"),
                    health_path="/healthz", acme_webroot=str(webroot)).start()
    try:
        for host, version in ((None, "HTTP/1.0"), ("nope.test", "HTTP/1.1")):
            for path in ("/healthz", "/metrics", "/status"):
                assert get(s, host, path, version).status == 200, (host, path)
            r = get(s, host, "/.well-known/acme-challenge/tok-123", version)
            assert r.status == 200 and r.body == b"tok-123.thumb", (host, r)
            assert get(s, host, "/a.txt", version).status == 404
        r, _ = tls_get(s, sites.certs, None, "nope.test", "/healthz")
        assert r.status == 200
        r, _ = tls_get(s, sites.certs, "nope.test", "nope.test", "/a.txt")
        assert r.status == 421
    finally:
        assert s.stop() == 0, s.diagnostics()


def test_421_says_misdirected_request(model, srv, sites):
    """RFC 9110 15.5.20: the reason phrase, in the status line and the page."""
    r, _ = tls_get(srv, sites.certs, "a.test", "b.test")
    assert r.status == 421 and r.reason == "Misdirected Request", r
    assert b"Misdirected Request" in r.body


def test_an_address_sent_as_sni_counts_as_none(model, sites, tmp_path):
    """RFC 6066 3: SNI carries no address; a client that sends one (wrk
    does) is served as one that sent none: the Host chooses the site."""
    s = SitesServer(model, sites, tmp_path / "srv", sites.conf(default_site="reject")).start()
    try:
        req = b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        r = subprocess.run(["openssl", "s_client", "-quiet", "-connect", f"{HOST}:{s.tls_port}",
                            "-servername", "127.0.0.1", "-CAfile", str(sites.certs.ca)],
                           input=req, capture_output=True, timeout=util.scaled(20))
        head = r.stdout.split(b"\r\n", 1)[0]
        assert head == b"HTTP/1.1 200 OK", (r.stdout[:300], r.stderr[-500:])
        assert r.stdout.endswith(SITE_A)
    finally:
        assert s.stop() == 0, s.diagnostics()


def test_redirect_https_per_site_beside_tls_listeners(model, sites, tmp_path):
    """redirect_https = on in a site: its plain HTTP requests get 301 to
    HTTPS on redirect_https_port, its HTTPS ones are served (curl -L ends
    there, no loop); another site is served over both; ACME challenges are
    answered over plain HTTP all the same. At the top level it is every
    site's that does not say otherwise."""
    webroot = tmp_path / "acme"
    (webroot / ".well-known" / "acme-challenge").mkdir(parents=True)
    (webroot / ".well-known" / "acme-challenge" / "tok-9").write_text("tok-9.thumb")
    tls_port = util.free_port()
    conf = sites.conf().replace("[site a]\n", "[site a]\nredirect_https = on\n")
    s = SitesServer(model, sites, tmp_path / "srv", conf, acme_webroot=str(webroot),
                    redirect_https_port=str(tls_port))
    s.tls_port = tls_port
    s.start()
    try:
        r = get(s, "a.test", "/a.txt?x=1")
        assert r.status == 301 and r.header("Location") == f"https://a.test:{tls_port}/a.txt?x=1", r
        resolve = ["--resolve", f"a.test:{s.port}:{HOST}", "--resolve", f"a.test:{tls_port}:{HOST}"]
        c = curl("-L", "--max-redirs", "3", "--cacert", str(sites.certs.ca), *resolve,
                 "-w", "%{num_redirects} %{url_effective}", "-o", str(tmp_path / "body"),
                 f"http://a.test:{s.port}/a.txt")
        assert c.returncode == 0, c.stderr
        assert c.stdout.decode() == f"1 https://a.test:{tls_port}/a.txt"
        assert (tmp_path / "body").read_bytes() == b"Hello from a\n"
        for version in ("--http1.1", "--http2"):  # served over TLS, whichever protocol
            c = curl(version, "--cacert", str(sites.certs.ca), *resolve, "-w", "%{http_code} %{http_version}",
                     "-o", "/dev/null", f"https://a.test:{tls_port}/a.txt")
            assert c.stdout.decode() == ("200 1.1" if version == "--http1.1" else "200 2"), (c.stdout, c.stderr)
        r = get(s, "a.test", "/.well-known/acme-challenge/tok-9")
        assert r.status == 200 and r.body == b"tok-9.thumb"
        r = get(s, "b.test", "/a.txt")
        assert r.status == 200 and r.body == b"Hello from b\n"
        assert get(s, "other.test", "/a.txt").status == 200
    finally:
        assert s.stop() == 0, s.diagnostics()
    # at the top level, beside a TLS listener: every site's plain requests,
    # but for a site that says off
    conf = sites.conf().replace("[site b]\n", "[site b]\nredirect_https = off\n")
    s = SitesServer(model, sites, tmp_path / "srv2", conf, redirect_https="on",
                    redirect_https_port=str(tls_port))
    s.tls_port = tls_port
    s.start()
    try:
        r = get(s, "other.test", "/a.txt")
        assert r.status == 301 and r.header("Location") == f"https://other.test:{tls_port}/a.txt", r
        r, _ = tls_get(s, sites.certs, None, "other.test", "/a.txt")
        assert r.status == 200 and r.body == b"Hello from default\n"
        assert get(s, "a.test", "/a.txt").status == 301
        assert get(s, "b.test", "/a.txt").status == 200
    finally:
        assert s.stop() == 0, s.diagnostics()


# ---------------------------------------------------------------------------
# reload

@pytest.mark.campaign
@pytest.mark.concurrent
def test_reload_adds_a_site_and_changes_a_certificate_under_wrk(model, sites, tmp_path):
    """SIGHUP with a third site and a renewed certificate for b while wrk
    runs: no request fails, and then c is served with its certificate and b
    with its new one."""
    s = SitesServer(model, sites, tmp_path / "srv", sites.conf()).start()
    try:
        assert wait_log(s, GEN_RE.format(n=1, model=model), util.scaled(3)), s.diagnostics()
        _, before = tls_get(s, sites.certs, "b.test", "b.test")
        wrk = run_wrk(s.port, 4, conns=8)
        time.sleep(1)
        s.conf.write_text(sites.conf(with_c=True, b_cert="b2"))
        s.signal(signal.SIGHUP)
        assert wait_log(s, GEN_RE.format(n=2, model=model), util.scaled(5)), s.diagnostics()
        res = wrk_result(wrk, timeout=util.scaled(40))
        assert res["rc"] == 0 and res["requests"] > 0, res["out"]
        assert res["failed"] == 0, res["out"]
        print(f"\nreload adding a site under wrk -c8: {res['requests']} requests, {res['failed']} failed")
        r = curl("--cacert", str(sites.certs.ca), "--resolve", f"c.test:{s.tls_port}:{HOST}",
                 f"https://c.test:{s.tls_port}/")
        assert r.returncode == 0 and r.stdout == SITE_C, r.stderr
        assert get(s, "c.test").body == SITE_C
        r, after = tls_get(s, sites.certs, "b.test", "b.test")
        assert r.body == SITE_B and after["serialNumber"] != before["serialNumber"]
        # and a reload that removes it again
        s.conf.write_text(sites.conf())
        s.signal(signal.SIGHUP)
        assert wait_log(s, GEN_RE.format(n=3, model=model), util.scaled(5)), s.diagnostics()
        assert util.wait_for(lambda: get(s, "c.test").body == DEFAULT, util.scaled(5))
    finally:
        assert s.stop(timeout=util.scaled(20)) == 0, s.diagnostics()


# ---------------------------------------------------------------------------
# configuration errors

BASE = "[site a]\nnames = a.test\nroot = {root}\n"
BAD_SITES = [
    # (what, text after BASE, the line named, words of the message); a
    # section's own problems name its header's line (6)
    ("duplicate name", "[site b]\nroot = {root}\nnames = x.test A.TEST.\n", 8,
     "names: 'a.test' is also a name of [site a]"),
    ("no root", "[site b]\nnames = b.test\n", 6, "[site b] has no root"),
    ("no names", "[site b]\nroot = {root}\n", 6, "[site b] has no names"),
    ("empty site", "[site b]\n", 6, "[site b] has no names"),
    ("unknown key", "[site b]\nnames = b.test\nthreads = 4\n", 8, "unknown key 'threads' in [site b]"),
    ("unknown subsection", "[site b rewrites]\n/ = x\n", 6, "unknown section [site b rewrites]"),
    ("empty unknown subsection", "[site b rewrites]\n", 6, "unknown section [site b rewrites]"),
    ("two names", "[site b c]\n", 6, "unknown section [site b c]"),
    ("empty unknown section", "[bogus]\n", 6, "unknown section [bogus]"),
    ("bad site name", "[site b/c]\nnames = b.test\n", 6, "'b/c' is not a site name"),
    ("reserved name", "[site default]\nnames = b.test\n", 6, "'default' is not a site name"),
    ("bad host name", "[site b]\nnames = b_test\n", 7, "names: 'b_test' is not a host name"),
    ("root not a directory", "[site b]\nnames = b.test\nroot = /nonexistent\n", 8, "root: '/nonexistent'"),
    ("certificate without key", "[site b]\nnames = b.test\nroot = {root}\ntls_certificate = /x.pem\n", 9,
     "tls_certificate and tls_certificate_key go together"),
    ("bad rule", "[site b]\nnames = b.test\nroot = {root}\n[site b redirects]\n/a = 301\n", 10, "redirects:"),
    ("a site twice", "[site b]\nnames = b.test\nroot = {root}\n[site b]\nnames = c.test\n", 9,
     "[site b] appears twice (first at line 6)"),
    ("a site's rules twice", "[site b]\nnames = b.test\nroot = {root}\n[site b headers]\n/ = A: b\n"
     "[site b headers]\n", 11, "[site b headers] appears twice (first at line 9)"),
    ("a key twice", "[site b]\nnames = b.test\nroot = {root}\nnames = c.test\n", 9,
     "[site b]: names is given twice (first at line 7)"),
]


@pytest.mark.parametrize("what,text,line,words", BAD_SITES, ids=[b[0] for b in BAD_SITES])
def test_bad_site_sections_are_refused_with_file_and_line(what, text, line, words, tmp_path):
    (tmp_path / "www").mkdir()
    conf = tmp_path / "t.conf"
    conf.write_text("[server]\nport = 8080\n" + (BASE + text).format(root=tmp_path / "www"))
    r = util.run_spindle("--check", "--config", str(conf), cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{conf}:{line}: " in r.stderr and words in r.stderr, r.stderr


def test_top_level_redirects_are_the_default_sites_only(model, sites, tmp_path):
    """[redirects] at the top level are the default site's, as an nginx
    server block's rewrites stay in it: a catch-all there does not move the
    named sites, which have their own [site NAME redirects]. cors_origins =
    off in a site drops the inherited list."""
    conf = ("[http]\ncors_origins = https://app.test\n[redirects]\n/* = 302 https://moved.test/$1\n"
            + sites.conf().replace("[site b]\n", "[site b]\ncors_origins = off\n")
            + "[site a redirects]\n/old = 301 /a.txt\n")
    s = SitesServer(model, sites, tmp_path / "srv", conf).start()
    try:
        r = get(s, "other.test", "/a.txt")
        assert r.status == 302 and r.header("Location") == "https://moved.test/a.txt", r
        r = get(s, "b.test", "/a.txt")
        assert r.status == 200 and r.body == b"Hello from b\n", r
        r = get(s, "a.test", "/old")
        assert r.status == 301 and r.header("Location") == "/a.txt", r
        r = get(s, "a.test", "/a.txt")
        assert r.status == 200 and r.body == b"Hello from a\n", r
        hdr = {"Origin": "https://app.test"}
        r = s.request("GET", "/a.txt", host="a.test", headers=hdr)
        assert r.header("Access-Control-Allow-Origin") == "https://app.test", r
        r = s.request("GET", "/a.txt", host="b.test", headers=hdr)
        assert r.header("Access-Control-Allow-Origin") is None, r
    finally:
        assert s.stop() == 0, s.diagnostics()


def test_names_are_normalised(model, sites, tmp_path):
    """Names compare without case and a final dot: written so in names,
    they are accepted and kept in lower case without the dot."""
    conf = sites.conf().replace("names = a.test www.a.test", "names = A.Test. www.a.test")
    (tmp_path / "t.conf").write_text(conf)
    (tmp_path / "www").mkdir()
    r = util.run_spindle("--check", "--config", str(tmp_path / "t.conf"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[site a]\nnames = a.test www.a.test\n" in r.stdout
    s = SitesServer(model, sites, tmp_path / "srv", conf).start()
    try:
        r = get(s, "a.test")
        assert r.status == 200 and r.body == SITE_A
    finally:
        assert s.stop() == 0, s.diagnostics()


def test_check_prints_the_sites_and_reads_them_back(tmp_path, sites):
    """--check writes every site as sections (inherited settings filled
    in), and that output is a configuration that reads back the same."""
    (tmp_path / "www").mkdir()
    conf = tmp_path / "t.conf"
    conf.write_text("[http]\nindex = home.html\n" + sites.conf())
    r = util.run_spindle("--check", "--config", str(conf), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[site a]\nnames = a.test www.a.test\n" in r.stdout
    assert re.search(r"\[site b\]\n(.*\n)*?index = home\.html\n", r.stdout), r.stdout
    assert "[site b headers]\n/ = X-Site: b\n" in r.stdout
    (tmp_path / "again.conf").write_text(r.stdout.split("\n# would serve")[0])
    again = util.run_spindle("--check", "--config", str(tmp_path / "again.conf"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    strip = lambda out: [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert strip(again.stdout) == strip(r.stdout)


def test_a_sites_broken_certificate_is_refused_at_check_and_reload(model, sites, tmp_path):
    """A site's certificate loads as the top level's does: --check names the
    configuration's file and line, the site and the certificate's file; a reload to it is refused and the old one serves on."""
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    text = sites.conf().replace(str(sites.cert["b"][0]), str(bad))
    (tmp_path / "www").mkdir()
    (tmp_path / "bad.conf").write_text(text)
    r = util.run_spindle("--check", "--config", str(tmp_path / "bad.conf"), "--set", f"listen={HOST}:1 tls",
                         "--set", f"tls_certificate={sites.certs.chain}",
                         "--set", f"tls_certificate_key={sites.certs.key}", cwd=tmp_path)
    where = f"{tmp_path / 'bad.conf'}:14: [site b] tls_certificate"  # the configuration's file and line
    assert r.returncode == 2 and f"tls: {where} '{bad}': not a PEM file" in r.stderr, r.stderr

    s = SitesServer(model, sites, tmp_path / "srv", sites.conf()).start()
    try:
        assert wait_log(s, GEN_RE.format(n=1, model=model), util.scaled(3)), s.diagnostics()
        s.conf.write_text(text)
        s.signal(signal.SIGHUP)
        assert wait_log(s, r"reload: cannot set up the new configuration", util.scaled(5)), s.diagnostics()
        r, peer = tls_get(s, sites.certs, "b.test", "b.test")
        assert r.status == 200 and r.body == SITE_B and "b.test" in subject_names(peer)
        assert "generation 2" not in log_text(s)
    finally:
        assert s.stop() == 0, s.diagnostics()
