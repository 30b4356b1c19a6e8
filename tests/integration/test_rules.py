"""[redirects], [headers] and cors_origins over the wire: each rule kind on
raw requests and curl, a reload that changes them, and bad rules refused
with file:line. (No rule configured: test_replay.py replays the recorded
corpus byte for byte.)"""
import signal
import subprocess

import pytest

import util

CONF = """\
[http]
cors_origins = https://app.example http://localhost:3000

[redirects]
/old.html = 301 /new.html
/blog/* = 308 /posts/$1
//www.example.test/* = 301 https://example.test/$1
/search/* = 302 https://search.example/?q=$1&{query}

[headers]
/ = Server: -
/ = X-Content-Type-Options: nosniff
text/html = Content-Security-Policy: default-src 'self'
/docs/ = Referrer-Policy: no-referrer
/ = Strict-Transport-Security: max-age=31536000
"""


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "www"
    (r / "docs").mkdir(parents=True)
    (r / "index.html").write_text("home\n")
    (r / "new.html").write_text("new\n")
    (r / "old.html").write_text("still here, but moved\n")
    (r / "docs" / "index.html").write_text("docs\n")
    (r / "app.js").write_text("js\n")
    return r


@pytest.fixture
def srv(root, tmp_path):
    conf = tmp_path / "spindle.conf"
    conf.write_text(CONF)
    s = util.Server("epoll", root, tmp_path / "srv", {"workers": 1}, extra_args=["--config", str(conf)]).start()
    s.conf = conf
    yield s
    assert s.stop() == 0, s.diagnostics()


def test_redirects_moved_page_tree_host_and_placeholders(srv):
    r = srv.get("/old.html?x=1")
    assert (r.status, r.reason, r.header("Location")) == (301, "Moved Permanently", "/new.html?x=1"), r
    r = srv.get("/blog/2024/a%20b")
    assert (r.status, r.reason, r.header("Location")) == (308, "Permanent Redirect", "/posts/2024/a%20b"), r
    r = srv.get("/some/page?a=b", host="www.example.test:8080")
    assert (r.status, r.header("Location")) == (301, "https://example.test/some/page?a=b"), r
    r = srv.get("/some/page", host="example.test")
    assert r.status == 404, "another host: no redirect"
    r = srv.get("/search/cats?lang=en")
    assert (r.status, r.reason, r.header("Location")) == (302, "Found", "https://search.example/?q=cats&lang=en")
    # a raw "//" in the path cannot become a Location to another site
    r = srv.get("/blog//evil.example/x")
    assert r.header("Location") == "/posts/evil.example/x", r
    assert srv.get("/new.html").status == 200


def test_headers_added_to_matching_answers_and_server_removed(srv):
    r = srv.get("/docs/")
    assert r.status == 200
    assert r.header("X-Content-Type-Options") == "nosniff"
    assert r.header("Content-Security-Policy") == "default-src 'self'"
    assert r.header("Referrer-Policy") == "no-referrer"
    assert r.header("Strict-Transport-Security") == "max-age=31536000"
    assert not r.has("Server"), r
    r = srv.get("/app.js")
    assert r.header("X-Content-Type-Options") == "nosniff" and not r.has("Content-Security-Policy"), r
    assert not r.has("Referrer-Policy")
    etag = r.header("ETag")
    r = srv.get("/app.js", {"If-None-Match": etag})
    assert r.status == 304 and r.header("X-Content-Type-Options") == "nosniff", "304 too, as nginx"
    r = srv.get("/missing.txt")
    assert r.status == 404 and not r.has("X-Content-Type-Options"), "not on errors (add_header without always)"
    assert not r.has("Server"), "a removal applies to every answer"
    # an answer the session makes on its own, to a request it cannot parse
    with srv.connect() as c:
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        r = c.read_response()
    assert r.status == 400 and not r.has("Server"), r


def test_cors_preflight_get_and_other_options(srv):
    pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "GET",
           "Access-Control-Request-Headers": "x-token"}
    r = srv.request("OPTIONS", "/new.html", pre)
    assert r.status == 204, r
    assert r.header("Access-Control-Allow-Origin") == "https://app.example"
    assert r.header("Access-Control-Allow-Methods") == "GET, HEAD"
    assert r.header("Access-Control-Allow-Headers") == "x-token"
    assert r.header("Access-Control-Max-Age") == "86400"
    assert r.header("Vary") == "Origin"
    # not a preflight, or not from a listed origin: 405 with Allow as before
    for h in ({}, {"Origin": "https://app.example"},
              {"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}):
        r = srv.request("OPTIONS", "/new.html", h)
        assert r.status == 405 and r.header("Allow") == "GET, HEAD", (h, r)
        assert not r.has("Access-Control-Allow-Origin")
    r = srv.get("/new.html", {"Origin": "http://localhost:3000"})
    assert r.status == 200 and r.header("Access-Control-Allow-Origin") == "http://localhost:3000"
    assert r.header("Vary") == "Origin"
    r = srv.request("HEAD", "/new.html", {"Origin": "https://evil.example"})
    assert not r.has("Access-Control-Allow-Origin") and r.header("Vary") == "Origin", r


def test_curl_sees_each_rule(srv):
    def curl(*args):
        p = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-D", "-", "--max-time", "10", *args],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode == 0, p.stderr
        return p.stdout.lower()
    base = srv.base_url
    assert "location: /new.html\n" in curl(f"{base}/old.html")
    assert "location: https://example.test/a\n" in curl("-H", "Host: www.example.test", f"{base}/a")
    assert "x-content-type-options: nosniff\n" in curl(f"{base}/")
    out = curl("-X", "OPTIONS", "-H", "Origin: https://app.example", "-H", "Access-Control-Request-Method: GET",
               f"{base}/")
    assert out.startswith("http/1.1 204") and "access-control-allow-origin: https://app.example" in out, out


def test_a_reload_changes_the_rules(srv):
    assert srv.get("/old.html").status == 301
    srv.conf.write_text("[http]\ncors_origins = *\n[redirects]\n/new.html = 307 /old.html\n"
                        "[headers]\n/ = X-Frame-Options: DENY\n")
    srv.signal(signal.SIGHUP)
    # the old generation answers until it has drained: wait for its end
    assert util.wait_for(lambda: "generation 1 (pid" in srv.error_log.read_text(errors="replace"),
                         util.scaled(5)), srv.error_log.read_text(errors="replace")
    assert srv.get("/old.html").status == 200, "the old rule went"
    r = srv.get("/new.html")
    assert (r.status, r.reason, r.header("Location")) == (307, "Temporary Redirect", "/old.html"), r
    r = srv.get("/old.html", {"Origin": "https://anywhere.example"})
    assert r.header("X-Frame-Options") == "DENY" and not r.has("X-Content-Type-Options"), r
    assert r.header("Access-Control-Allow-Origin") == "*" and not r.has("Vary"), r
    assert r.has("Server"), "the removal went with its rule"


@pytest.mark.parametrize("section,line,why", [
    ("redirects", "/a = 303 /b", "expected 'STATUS TARGET' with STATUS 301, 302, 307 or 308"),
    ("redirects", "/a/* = 301 /b/$2", "$2 names no '*' of the pattern"),
    ("redirects", "old = 301 /b", "a pattern is a path starting with '/'"),
    ("headers", "/ = Content-Length: 3", "a field the server owns"),
    ("headers", "/ = X-A", "expected 'Name: value'"),
    ("http", "cors_origins = app.example", "is not an origin"),
])
def test_bad_rules_name_file_and_line(root, tmp_path, section, line, why):
    conf = tmp_path / "bad.conf"
    conf.write_text(f"# a comment\n[{section}]\n{line}\n")
    r = util.run_spindle("--config", str(conf), "--root", str(root), "--check")
    assert r.returncode != 0 and f"{conf}:3: " in r.stderr and why in r.stderr, r.stderr


def test_acme_challenge_stays_first(root, tmp_path):
    """A catch-all redirect rule moves the site, not an ACME challenge (the
    CA asks over plain HTTP and must get the token's file) nor the health
    path a load balancer polls."""
    webroot = tmp_path / "acme"
    d = webroot / ".well-known" / "acme-challenge"
    d.mkdir(parents=True)
    for p in (tmp_path, webroot, webroot / ".well-known", d):
        p.chmod(0o755)
    (d / "tok123").write_bytes(b"tok123.key")
    conf = tmp_path / "acme.conf"
    conf.write_text(f"[http]\nhealth_path = /healthz\n[tls]\nacme_webroot = {webroot}\n"
                    "[redirects]\n/* = 301 https://example.test{path}\n")
    s = util.Server("epoll", root, tmp_path / "srv", extra_args=["--config", str(conf)]).start()
    try:
        r = s.get("/.well-known/acme-challenge/tok123")
        assert r.status == 200 and r.body == b"tok123.key", r
        r = s.get("/index.html")
        assert (r.status, r.header("Location")) == (301, "https://example.test/index.html"), r
        assert s.get("/healthz").status == 200
    finally:
        assert s.stop() == 0, s.diagnostics()
