"""Serving a site as its owner configured it: precompressed
sidecars (1), Cache-Control rules (2), a types file and default_type (6).
Every model, a few requests each, on one server per model configured by file."""
from __future__ import annotations

import gzip
import os
import signal
import time

import pytest

import util

# Answers decided in the core: one model (conftest.py, `semantics`), except
# the per-process cache and the head larger than its first buffer (`per_model`).
pytestmark = pytest.mark.semantics

APP_JS = b"function hello() { return 'hello, hello, hello, hello'; }\n" * 8
MTIME = 1_600_000_000
# Stand-ins for what brotli and zstd make: the server never decodes a sidecar,
# it only has to send the right file's bytes under the right Content-Encoding.
APP_BR = b"BROTLI-SIDECAR-BYTES" * 3
APP_ZST = b"\x28\xb5\x2f\xfdZSTD-SIDECAR-BYTES"
APP_GZ = gzip.compress(APP_JS, mtime=0)

CONF = """[content]
precompressed = br zstd gzip
types_file = {types}
default_type = application/x-spindle-default
cache_expires = on

[cache_control]
/assets/* = public, max-age=31536000, immutable
*.map = private, max-age=60
text/html = no-cache
"""


def _write(root, rel, data, mtime=MTIME):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    os.utime(p, (mtime, mtime))
    return p


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("site")
    root = base / "www"
    _write(root, "app.js", APP_JS)
    _write(root, "app.js.br", APP_BR)
    _write(root, "app.js.zst", APP_ZST)
    _write(root, "app.js.gz", APP_GZ)
    _write(root, "only-gz.css", b"body { color: red; }\n" * 10)
    _write(root, "only-gz.css.gz", gzip.compress(b"body { color: red; }\n" * 10, mtime=0))
    # a sidecar left behind by an edit: older than its original, never sent
    _write(root, "edited.js", b"console.log('new');\n", MTIME)
    _write(root, "edited.js.gz", gzip.compress(b"console.log('old');\n"), MTIME - 3600)
    _write(root, "plain.txt", b"no sidecar here\n")
    _write(root, "index.html", b"<!doctype html><p>home</p>\n")
    _write(root, "assets/logo.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>\n")
    _write(root, "js/app.js.map", b'{"version":3}\n')
    _write(root, "thing.zzqx", b"custom type\n")
    _write(root, "notes.md", b"# the types file says otherwise\n")
    _write(root, "noext", b"no extension\n")
    types = base / "mime.types"
    types.write_text("# a mime.types of our own\napplication/x-zzqx\tzzqx\ntext/x-notes md\n")
    conf = base / "spindle.conf"
    conf.write_text(CONF.format(types=types))
    return root, conf


@pytest.fixture(scope="module")
def srv(model_name, site, tmp_path_factory):
    root, conf = site
    s = util.Server(model_name, root, tmp_path_factory.mktemp(f"content-{model_name}"),
                    extra_args=["--config", str(conf)]).start()
    yield s
    if s.alive():
        assert s.stop() == 0, s.diagnostics()


def get(srv, target, ae=None, method="GET", **headers):
    h = dict(headers)
    if ae is not None:
        h["Accept-Encoding"] = ae
    return srv.request(method, target, headers=h)


# --------------------------------------------------------------------------
# 1. precompressed sidecars
# --------------------------------------------------------------------------

@pytest.mark.parametrize("ae,coding,body", [
    ("gzip, deflate, br, zstd", "br", APP_BR),   # a browser: the server's order decides
    ("gzip, zstd", "zstd", APP_ZST),
    ("gzip", "gzip", APP_GZ),
    ("br;q=0.2, gzip;q=0.9", "gzip", APP_GZ),    # the client's weights come first
    ("*", "br", APP_BR),
], ids=["browser", "gzip-zstd", "gzip", "client-weights", "star"])
def test_sidecar_follows_accept_encoding(model, srv, ae, coding, body):
    r = get(srv, "/app.js", ae)
    assert r.status == 200, r
    assert r.header("Content-Encoding") == coding, r
    assert r.body == body and int(r.header("Content-Length")) == len(body)
    assert r.header("Content-Type") == "text/javascript; charset=utf-8", "the original's type"
    assert r.header("Vary") == "Accept-Encoding"
    assert r.header("ETag").endswith(f'-{coding}"'), r.header("ETag")
    if coding == "gzip":
        assert gzip.decompress(r.body) == APP_JS


def test_identity_response_varies_too(model, srv):
    for ae in (None, "identity", "compress", "br;q=0, zstd;q=0, gzip;q=0"):
        r = get(srv, "/app.js", ae)
        assert (r.status, r.body) == (200, APP_JS), (ae, r)
        assert not r.has("Content-Encoding"), (ae, r)
        assert r.header("Vary") == "Accept-Encoding", (ae, r)
    etags = {get(srv, "/app.js", ae).header("ETag") for ae in (None, "br", "zstd", "gzip")}
    assert len(etags) == 4, f"one ETag per encoding: {etags}"
    # a file without sidecars is not varied, and HEAD says what GET would
    r = get(srv, "/plain.txt", "gzip, br")
    assert r.status == 200 and not r.has("Vary") and not r.has("Content-Encoding")
    h = get(srv, "/app.js", "gzip", method="HEAD")
    assert h.status == 200 and h.body == b"" and h.header("Content-Encoding") == "gzip"
    assert int(h.header("Content-Length")) == len(APP_GZ)


def test_sidecar_conditionals_and_ranges_use_encoded_bytes(model, srv):
    gz = get(srv, "/app.js", "gzip")
    etag = gz.header("ETag")
    r = get(srv, "/app.js", "gzip", **{"If-None-Match": etag})
    assert r.status == 304 and r.body == b"", r
    assert r.header("ETag") == etag and r.header("Vary") == "Accept-Encoding"
    # the gzip tag does not validate the brotli bytes
    r = get(srv, "/app.js", "br", **{"If-None-Match": etag})
    assert (r.status, r.body) == (200, APP_BR), r
    r = get(srv, "/app.js", "gzip", Range="bytes=0-9")
    assert r.status == 206 and r.body == APP_GZ[:10], r
    assert r.header("Content-Range") == f"bytes 0-9/{len(APP_GZ)}"
    assert r.header("Content-Encoding") == "gzip"
    r = get(srv, "/app.js", "gzip", Range="bytes=-5", **{"If-Range": etag})
    assert (r.status, r.body) == (206, APP_GZ[-5:]), r
    r = get(srv, "/app.js", "br", Range="bytes=0-3", **{"If-Range": etag})
    assert (r.status, r.body) == (200, APP_BR), "If-Range with another encoding's tag: whole"
    # errors about the chosen representation say that it was chosen by Accept-Encoding
    r = get(srv, "/app.js", "gzip", Range=f"bytes={len(APP_GZ)}-")
    assert r.status == 416 and r.header("Content-Range") == f"bytes */{len(APP_GZ)}", r
    assert r.header("Vary") == "Accept-Encoding"
    r = get(srv, "/app.js", "gzip", **{"If-Match": '"nope"'})
    assert r.status == 412 and r.header("Vary") == "Accept-Encoding", r


def test_stale_missing_and_direct_sidecars(model, srv):
    r = get(srv, "/edited.js", "gzip")
    assert (r.status, r.body) == (200, b"console.log('new');\n"), "an older sidecar is ignored"
    assert not r.has("Content-Encoding")
    r = get(srv, "/only-gz.css", "br, zstd")
    assert r.status == 200 and not r.has("Content-Encoding") and r.header("Vary") == "Accept-Encoding"
    r = get(srv, "/only-gz.css", "br, gzip")
    assert r.header("Content-Encoding") == "gzip"
    assert gzip.decompress(r.body) == b"body { color: red; }\n" * 10
    # asked for by name, a sidecar is an ordinary file
    r = get(srv, "/app.js.gz", "gzip")
    assert (r.status, r.body) == (200, APP_GZ), r
    assert r.header("Content-Type") == "application/gzip" and not r.has("Content-Encoding")


@pytest.mark.per_model
def test_sidecars_are_cached_like_files(model, site, fresh_server):
    root, _ = site
    s = fresh_server(root=root, precompressed="gzip")
    # one connection: in the fork model each connection has its own process (and cache)
    with s.connect() as c:
        for _ in range(2):
            c.send(util.build_request("GET", "/app.js", {"Accept-Encoding": "gzip"}))
            r = c.read_response()
            assert (r.status, r.body) == (200, APP_GZ), r
    # the original and its sidecar: missed once each, then both hit
    st = util.wait_stats(s.port, lambda st: st["cache"]["hits"] + st["cache"]["misses"] >= 4)
    assert (st["cache"]["hits"], st["cache"]["misses"]) == (2, 2), st["cache"]
    if model != "fork":  # per-connection processes report no cache gauges
        assert st["cache"]["entries"] == 2 and st["cache"]["bytes"] >= len(APP_JS) + len(APP_GZ)


def test_identity_refused(model, srv):
    r = get(srv, "/plain.txt", "identity;q=0")
    assert r.status == 406, r
    r = get(srv, "/app.js", "*;q=0")
    assert r.status == 406 and r.header("Vary") == "Accept-Encoding", r
    r = get(srv, "/only-gz.css", "gzip, identity;q=0")
    assert r.status == 200 and r.header("Content-Encoding") == "gzip"
    assert get(srv, "/plain.txt").status == 200, "the server keeps serving"


# --------------------------------------------------------------------------
# 2. Cache-Control rules, 6. types file
# --------------------------------------------------------------------------

def test_cache_control_rules_first_match_and_expires(model, srv):
    t0 = time.time()
    r = get(srv, "/assets/logo.svg")
    assert r.status == 200
    assert r.header("Cache-Control") == "public, max-age=31536000, immutable"
    expires = util.parse_http_date(r.header("Expires"))
    assert abs(expires - (t0 + 31536000)) < util.scaled(5), r.header("Expires")
    r304 = get(srv, "/assets/logo.svg", **{"If-None-Match": r.header("ETag")})
    assert r304.status == 304
    assert r304.header("Cache-Control") == "public, max-age=31536000, immutable", "304s carry it too"
    assert r304.has("Expires")
    r = get(srv, "/js/app.js.map")
    assert r.header("Cache-Control") == "private, max-age=60", "*.map crosses directories"
    # text/html by type (also the index of /); no max-age, so no Expires
    for target in ("/", "/index.html"):
        r = get(srv, target)
        assert r.header("Cache-Control") == "no-cache" and not r.has("Expires"), (target, r)
    r = get(srv, "/plain.txt", Range="bytes=0-1")
    assert r.status == 206 and not r.has("Cache-Control"), "no rule matched"
    assert get(srv, "/no-such-file").status == 404
    assert not get(srv, "/assets/missing.svg").has("Cache-Control"), "errors get no rule"


INDEX_CONF = """[cache_control]
/index.html = no-cache
/docs/ = public, max-age=600
/sub/*.html = private, max-age=5
"""


def test_cache_control_path_rules_match_the_index_file_served(model, tmp_path):
    """GET / serves /index.html, so a rule for /index.html applies to it, as
    nginx's location = /index.html does to / (its index directive redirects
    internally); a rule on a directory's path still covers the directory."""
    root = tmp_path / "www"
    for rel in ("index.html", "plain.txt", "docs/index.html", "docs/page.txt", "sub/index.html"):
        _write(root, rel, f"<p>{rel}</p>\n".encode())
    conf = tmp_path / "spindle.conf"
    conf.write_text(INDEX_CONF)
    s = util.Server(model, root, tmp_path / "srv", extra_args=["--config", str(conf)]).start()
    try:
        cases = [("/", "no-cache"), ("/index.html", "no-cache"),
                 ("/docs/", "public, max-age=600"), ("/docs/index.html", "public, max-age=600"),
                 ("/docs/page.txt", "public, max-age=600"),
                 ("/sub/", "private, max-age=5"), ("/sub/index.html", "private, max-age=5"),
                 ("/plain.txt", None)]
        for target, value in cases:
            r = get(s, target)
            assert r.status == 200 and r.header("Cache-Control") == value, (target, r)
            r304 = get(s, target, **{"If-None-Match": r.header("ETag")})
            assert r304.status == 304 and r304.header("Cache-Control") == value, (target, r304)
        r = get(s, "/docs")
        assert r.status == 301 and not r.has("Cache-Control"), "a redirect is no file"
    finally:
        assert s.stop() == 0, s.diagnostics()


def test_types_file_and_default_type(model, srv):
    assert get(srv, "/thing.zzqx").header("Content-Type") == "application/x-zzqx"
    assert get(srv, "/notes.md").header("Content-Type") == "text/x-notes; charset=utf-8", "overridden"
    assert get(srv, "/noext").header("Content-Type") == "application/x-spindle-default"
    assert get(srv, "/plain.txt").header("Content-Type") == "text/plain; charset=utf-8", "built-in kept"


def test_reload_with_broken_types_file_is_refused(site, tmp_path):
    """The master's reload is the same whatever the model: one model suffices."""
    model = "epoll"
    root, _ = site
    types = tmp_path / "mime.types"
    types.write_text("application/x-zzqx zzqx\n")
    myconf = tmp_path / "spindle.conf"
    myconf.write_text(f"[content]\ntypes_file = {types}\n")
    s = util.Server(model, root, tmp_path / "srv", extra_args=["--config", str(myconf)]).start()
    try:
        assert s.get("/thing.zzqx").header("Content-Type") == "application/x-zzqx"
        types.write_text("application/x-zzqx zzqx\nnot-a-type nope\n")
        s.signal(signal.SIGHUP)
        log = ""
        deadline = time.monotonic() + util.scaled(3)
        while time.monotonic() < deadline and "invalid" not in log:
            time.sleep(0.05)
            log = s.error_log.read_text(errors="replace")
        assert f"{types}:2: the line does not start with a MIME type" in log, log
        assert "not-a-type" not in log, "the line's content was echoed"
        assert "the new configuration is invalid" in log, log
        assert s.get("/thing.zzqx").header("Content-Type") == "application/x-zzqx", "old config kept"
    finally:
        assert s.stop() == 0, s.diagnostics()
    # at start-up the same file is an error naming it, and a non-zero exit
    r = util.run_spindle("--config", str(myconf), "--root", str(root), "--check")
    assert r.returncode != 0 and f"{types}:2:" in r.stderr, r.stderr


def test_reload_with_types_file_replaced_by_a_fifo_is_refused(site, tmp_path):
    """A FIFO in place of types_file: the master's reload must not block in
    open(2) (it would ignore SIGTERM too); it refuses it and keeps serving."""
    root, _ = site
    types = tmp_path / "mime.types"
    types.write_text("application/x-zzqx zzqx\n")
    myconf = tmp_path / "spindle.conf"
    myconf.write_text(f"[content]\ntypes_file = {types}\n")
    s = util.Server("epoll", root, tmp_path / "srv", extra_args=["--config", str(myconf)]).start()
    try:
        types.unlink()
        os.mkfifo(types)
        s.signal(signal.SIGHUP)
        assert util.wait_for(lambda: "the new configuration is invalid" in s.error_log.read_text(errors="replace"),
                             util.scaled(3)), s.error_log.read_text(errors="replace")
        assert f"{types}: not a regular file" in s.error_log.read_text(errors="replace")
        assert s.get("/thing.zzqx").header("Content-Type") == "application/x-zzqx", "old config kept"
    finally:
        assert s.stop() == 0, s.diagnostics()


@pytest.mark.per_model
def test_longest_file_head_is_whole(model, tmp_path, certs):
    """Every field a file's 206 can carry, each as long as configuration
    allows (a 255-byte Strict-Transport-Security over TLS, a 159-byte
    Cache-Control with Expires, a 199-byte type from the types file plus its
    charset, a gzip sidecar's Content-Encoding and Vary, a range of a
    terabyte-sized file, HTTP/1.0 keep-alive), adds up
    to more than the 1024 bytes a connection's head buffer starts with: the
    head must still go out whole, every field and the blank line after them."""
    from tlsutil import client_context, tls_conn, tls_settings

    root = tmp_path / "www"
    root.mkdir()
    for name in ("huge.zzlong", "huge.zzlong.gz"):
        with open(root / name, "wb") as f:
            f.truncate(10**12)  # sparse: nothing is written
    mime = "text/x-" + "l" * (199 - len("text/x-"))
    types = tmp_path / "mime.types"
    types.write_text(f"{mime} zzlong\n")
    cache_control = "public, max-age=600, " + "x" * (159 - len("public, max-age=600, "))
    hsts = "max-age=63072000; " + "i" * (255 - len("max-age=63072000; "))
    conf = tmp_path / "spindle.conf"
    conf.write_text(f"[content]\nprecompressed = gzip\ntypes_file = {types}\ncache_expires = on\n\n"
                    f"[cache_control]\n*.zzlong = {cache_control}\n")
    s = util.Server(model, root, tmp_path / "srv", tls_settings(certs, hsts=hsts),
                    extra_args=["--config", str(conf)]).start()
    try:
        with tls_conn(s.port, client_context(certs)) as c:
            for _ in range(2):  # the connection is kept and serves again
                c.send(util.build_request("GET", "/huge.zzlong", {"Range": "bytes=-1", "Accept-Encoding": "gzip",
                                                                           "Connection": "keep-alive"},
                                          version="HTTP/1.0"))
                r = c.read_response("GET")
                assert len(r.raw_head) > 1024, "the case this test is for"
                assert r.status == 206 and r.body == b"\0", r
                assert r.header("Content-Range") == f"bytes {10**12 - 1}-{10**12 - 1}/{10**12}", r
                assert r.header("Content-Type") == mime + "; charset=utf-8", r
                assert r.header("Cache-Control") == cache_control and r.has("Expires"), r
                assert r.header("Content-Encoding") == "gzip" and r.header("Vary") == "Accept-Encoding", r
                assert r.header("Strict-Transport-Security") == hsts, r
                assert r.header("Connection") == "keep-alive", r
    finally:
        assert s.stop() == 0, s.diagnostics()
