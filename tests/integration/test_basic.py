"""GET/HEAD, methods, mandatory response headers, content types, plain httpx use."""
from __future__ import annotations

import hashlib
import os
import re
import time

import httpx
import pytest

import util
from conftest import A_TXT, BIG_SIZE, INDEX_HTML

# Answers decided in the core: one model (conftest.py, `semantics`), except
# file bodies, keep-alive and request bodies (`per_model`).
pytestmark = pytest.mark.semantics


def _client(server) -> httpx.Client:
    # trust_env=False: never route through a proxy from the environment.
    return httpx.Client(base_url=server.base_url, trust_env=False, timeout=10)


def assert_common_headers(resp: util.Response, version: str | None = None):
    date = resp.header("Date")
    assert date and util.IMF_FIXDATE_RE.match(date), f"bad Date {date!r}"
    srv = resp.header("Server")
    assert srv and srv.startswith("spindle"), f"bad Server {srv!r}"
    if version is not None:
        assert srv == f"spindle/{version}"
    if resp.status != 304:
        cl = resp.header("Content-Length")
        assert cl is not None, f"{resp.status} response without Content-Length"


# --------------------------------------------------------------------------
# GET / HEAD
# --------------------------------------------------------------------------

@pytest.mark.per_model
def test_get_small_file_raw(server, docroot, version):
    resp = server.get("/a.txt")
    assert resp.version == "HTTP/1.1"
    assert resp.status == 200
    assert resp.body == A_TXT
    assert resp.header("Content-Length") == "13"
    assert_common_headers(resp, version)
    assert resp.header("Accept-Ranges") == "bytes"
    assert abs(util.parse_http_date(resp.header("Date")) - time.time()) < 5, "stale Date"


def test_file_metadata_headers(server, docroot):
    resp = server.get("/a.txt")
    lm = resp.header("Last-Modified")
    assert lm and util.IMF_FIXDATE_RE.match(lm), f"bad Last-Modified {lm!r}"
    assert int(util.parse_http_date(lm)) == int(os.stat(docroot.path / "a.txt").st_mtime)
    etag = resp.header("ETag")
    assert etag and re.fullmatch(r'"[\x21\x23-\x7e\x80-\xff]*"', etag), \
        f"ETag must be strong and quoted, got {etag!r}"
    # stable across requests
    assert server.get("/a.txt").header("ETag") == etag


def test_etag_differs_between_files(server):
    assert server.get("/a.txt").header("ETag") != server.get("/style.css").header("ETag")


def test_etag_changes_when_file_changes(server, docroot):
    """After a change the new version is served within a short revalidation
    delay (the server may cache files for up to ~1 s); every response on the
    way is self-consistent: body, Content-Length, ETag and Last-Modified all
    belong to the same version."""
    v1, v2 = b"version one", b"version two, longer"
    name = f"mutable-{server.model}-{server.port}.txt"  # never seen by this server before
    p = docroot.path / name
    p.write_bytes(v1)
    os.utime(p, (1_600_000_000, 1_600_000_000))
    r1 = server.get("/" + name)
    assert (r1.status, r1.body) == (200, v1)
    assert r1.header("Last-Modified") == "Sun, 13 Sep 2020 12:26:40 GMT"
    p.write_bytes(v2)
    os.utime(p, (1_700_000_000, 1_700_000_000))
    deadline = time.monotonic() + 3
    while True:
        r = server.get("/" + name)
        assert r.status == 200
        assert r.header("Content-Length") == str(len(r.body))
        if r.body == v1:
            assert (r.header("ETag"), r.header("Last-Modified")) == \
                (r1.header("ETag"), r1.header("Last-Modified")), "stale body with new validators"
        else:
            assert r.body == v2, f"torn or mixed content {r.body!r}"
            break
        assert time.monotonic() < deadline, "changed file still served stale after 3 s"
        time.sleep(0.1)
    assert r.header("ETag") != r1.header("ETag")
    assert r.header("Last-Modified") == "Tue, 14 Nov 2023 22:13:20 GMT"


def test_head_has_same_headers_and_no_body(server):
    with server.connect() as c:
        c.send(util.build_request("GET", "/index.html"))
        g = c.read_response("GET")
        c.send(util.build_request("HEAD", "/index.html"))
        h = c.read_response("HEAD")
        # A body after the HEAD response would corrupt this next response.
        c.send(util.build_request("GET", "/a.txt"))
        nxt = c.read_response("GET")
    assert g.status == h.status == 200
    assert g.body == INDEX_HTML
    for name in ("Content-Length", "Content-Type", "ETag", "Last-Modified", "Accept-Ranges"):
        assert h.header(name) == g.header(name), name
    assert h.header("Content-Length") == str(len(INDEX_HTML))
    assert (nxt.status, nxt.body) == (200, A_TXT), "HEAD response carried a body"


def test_head_on_missing_file_is_404_without_body(server):
    with server.connect() as c:
        c.send(util.build_request("HEAD", "/nope.txt"))
        h = c.read_response("HEAD")
        c.send(util.build_request("GET", "/a.txt"))
        nxt = c.read_response()
    assert h.status == 404
    assert_common_headers(h)
    assert (nxt.status, nxt.body) == (200, A_TXT)


def test_root_serves_index_html(server):
    resp = server.get("/")
    assert resp.status == 200
    assert resp.body == INDEX_HTML
    assert resp.header("Content-Type") == "text/html; charset=utf-8"


@pytest.mark.parametrize("path,ctype", [
    ("/index.html", "text/html; charset=utf-8"),
    ("/style.css", "text/css; charset=utf-8"),
    ("/app.js", "text/javascript; charset=utf-8"),
    ("/img.png", "image/png"),
    ("/icon.svg", "image/svg+xml; charset=utf-8"),
    ("/data.json", "application/json"),
    ("/app.wasm", "application/wasm"),
    ("/font.woff2", "font/woff2"),
    ("/noext", "application/octet-stream"),
    ("/unknown.zzqx", "application/octet-stream"),
    ("/big.bin", "application/octet-stream"),
])
def test_content_type_by_extension(server, docroot, path, ctype):
    with server.connect() as c:
        c.send(util.build_request("HEAD", path))
        resp = c.read_response("HEAD")
    assert resp.status == 200
    got = resp.header("Content-Type")
    if ctype == "application/json":
        assert got and got.split(";")[0].strip() == "application/json", got
    else:
        assert got == ctype
    assert resp.header("Content-Length") == str(os.path.getsize(docroot.path / path[1:]))


def test_server_tokens_off_hides_version(servers):
    srv = servers(server_tokens="off")
    assert srv.get("/a.txt").header("Server") == "spindle"
    assert srv.get("/missing").header("Server") == "spindle"


def test_empty_file(server):
    resp = server.get("/empty.txt")
    assert resp.status == 200
    assert resp.header("Content-Length") == "0"
    assert resp.body == b""


@pytest.mark.per_model
def test_small_files_intact(server, docroot):
    with server.connect() as c:
        for rel in ("index.html", "style.css", "app.js", "img.png", "data.json", "app.wasm",
                    "font.woff2", "noext", "range.txt", "sub/page.txt"):
            c.send(util.build_request("GET", "/" + rel))
            resp = c.read_response()
            assert resp.status == 200, rel
            assert resp.body == docroot.files[rel], rel


@pytest.mark.per_model
def test_big_file_intact_raw(server, docroot):
    with server.connect(timeout=30) as c:
        c.send(util.build_request("GET", "/big.bin"))
        resp = c.read_response()
        # the connection is still usable after a sendfile() response
        c.send(util.build_request("GET", "/a.txt"))
        nxt = c.read_response()
    assert resp.status == 200
    assert resp.header("Content-Length") == str(BIG_SIZE)
    assert hashlib.sha256(resp.body).hexdigest() == docroot.sha256("big.bin")
    assert nxt.body == A_TXT


@pytest.mark.per_model
def test_big_file_intact_httpx_streaming(server, docroot):
    h = hashlib.sha256()
    n = 0
    with _client(server) as c, c.stream("GET", "/big.bin") as r:
        assert r.status_code == 200
        for chunk in r.iter_bytes(1 << 16):
            h.update(chunk)
            n += len(chunk)
    assert n == BIG_SIZE
    assert h.hexdigest() == docroot.sha256("big.bin")


# --------------------------------------------------------------------------
# httpx, normal client behaviour
# --------------------------------------------------------------------------

@pytest.mark.per_model
def test_httpx_keepalive_session(server, docroot):
    with _client(server) as c:
        for _ in range(3):
            for rel in ("a.txt", "index.html", "data.json"):
                r = c.get("/" + rel)
                assert r.status_code == 200
                assert r.content == docroot.files[rel]
                assert r.http_version == "HTTP/1.1"
        r404 = c.get("/missing.html")
        assert r404.status_code == 404
        assert c.get("/a.txt").content == A_TXT


def test_httpx_head(server):
    with _client(server) as c:
        r = c.head("/style.css")
    assert r.status_code == 200
    assert r.content == b""
    assert r.headers["content-type"] == "text/css; charset=utf-8"
    assert r.headers["content-length"] == str(len(b"body { color: #333; }\n"))


def test_httpx_redirect_followed(server, docroot):
    with _client(server) as c:
        r = c.get("/sub", follow_redirects=True)
    assert r.status_code == 200
    assert r.content == docroot.files["sub/index.html"]
    assert [h.status_code for h in r.history] == [301]


# --------------------------------------------------------------------------
# Methods
# --------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"])
def test_disallowed_method_405(server, method):
    resp = server.request(method, "/a.txt", headers=[("Content-Length", "0")])
    assert resp.status == 405
    assert resp.header("Allow") == "GET, HEAD"
    assert_common_headers(resp)


def test_connect_method_405(server):
    resp = server.request("CONNECT", "127.0.0.1:443", host="127.0.0.1:443")
    assert resp.status == 405
    assert resp.header("Allow") == "GET, HEAD"


@pytest.mark.per_model
def test_post_with_body_405_then_next_connection_ok(server):
    resp = server.request("POST", "/a.txt", headers=[("Content-Length", "5")], body=b"hello")
    assert resp.status == 405
    assert server.get("/a.txt").body == A_TXT


def test_httpx_post_405(server):
    with _client(server) as c:
        r = c.post("/a.txt", content=b"x=1")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD"


def test_unknown_method_501(server):
    resp = server.request("FOO", "/a.txt")
    assert resp.status == 501
    assert_common_headers(resp)
    assert server.get("/a.txt").status == 200


def test_methods_are_case_sensitive(server):
    """"get" is a different (unknown) token from "GET" (RFC 9110 9.1)."""
    resp = server.request("get", "/a.txt")
    assert resp.status == 501
