"""Every model answers exactly as the default model does, byte for byte.

The tests marked `semantics` (conditionals, ranges, framing errors, paths,
MIME types, sidecars, Cache-Control, listings, error pages, redirects) run
under one model only (conftest.py): every model drives the same connection
core, so a model cannot change what those answers say. This module is the
proof. It replays a corpus of the requests those tests make against every
model and compares each answer, status line, header fields and body, with the
answer the default model gives to the same request at the same moment.

Each corpus entry is sent whole on a fresh connection, followed by a request
that asks to close, and the answer is read to EOF: a model that answered with
other bytes, kept a connection the core closes (or closed one it keeps), or
lost the request after an answer, differs here. Only what is not the same from
one answer to the next is blanked out: the Date and Expires values (the clock)
and the multipart boundary (random per response, of fixed length).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import util
from conftest import SEMANTICS_MODEL, RANGE_DATA
from test_content import site  # noqa: F401 (a fixture, used by name)
from test_framing import BAD_400

CLOSE = b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
OLD_DATE = "Sat, 01 Jan 2000 00:00:00 GMT"
FUTURE_DATE = "Fri, 01 Jan 2100 00:00:00 GMT"
LEN = len(RANGE_DATA)


def req(target: str, method: str = "GET", version: str = "HTTP/1.1", **headers) -> bytes:
    return util.build_request(method, target, [(k.replace("_", "-"), v) for k, v in headers.items()],
                              version=version)


def core_corpus(v: dict) -> list[tuple[str, bytes]]:
    """Requests against conftest's docroot; v holds range.txt's validators."""
    etag, lm = v["etag"], v["lm"]
    c: list[tuple[str, bytes]] = []
    # files, types, HEAD, methods
    for target in ("/", "/a.txt", "/index.html", "/style.css", "/app.js", "/img.png", "/data.json",
                   "/icon.svg", "/app.wasm", "/font.woff2", "/noext", "/unknown.zzqx", "/empty.txt",
                   "/caf%C3%A9%20menu.html", "/sub/", "/sub/page.txt"):
        c.append((f"GET {target}", req(target)))
    for target in ("/a.txt", "/missing", "/sub/", "/range.txt"):
        c.append((f"HEAD {target}", req(target, "HEAD")))
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "CONNECT", "BREW", "get"):
        c.append((f"{method} /a.txt", req("/a.txt", method)))
    # conditionals
    for name, headers in {
        "INM current": {"If-None-Match": etag},
        "INM star": {"If-None-Match": "*"},
        "INM list": {"If-None-Match": f'"x", {etag}, "y"'},
        "INM weak": {"If-None-Match": "W/" + etag},
        "INM other": {"If-None-Match": '"other"'},
        "IMS equal": {"If-Modified-Since": lm},
        "IMS future": {"If-Modified-Since": FUTURE_DATE},
        "IMS older": {"If-Modified-Since": OLD_DATE},
        "IMS invalid": {"If-Modified-Since": "not a date"},
        "IMS rfc850": {"If-Modified-Since": "Sunday, 13-Sep-20 12:26:40 GMT"},
        "IMS asctime": {"If-Modified-Since": "Sun Sep 13 12:26:40 2020"},
        "INM over IMS": {"If-None-Match": '"other"', "If-Modified-Since": FUTURE_DATE},
        "IM current": {"If-Match": etag},
        "IM star": {"If-Match": "*"},
        "IM other": {"If-Match": '"other"'},
        "IM weak": {"If-Match": "W/" + etag},
        "IM star junk": {"If-Match": "*junk"},
        "IUS older": {"If-Unmodified-Since": OLD_DATE},
        "IUS current": {"If-Unmodified-Since": lm},
        "IUS invalid": {"If-Unmodified-Since": "not a date"},
        "IM fails over INM": {"If-Match": '"other"', "If-None-Match": etag},
        "IM fails over Range": {"If-Match": '"other"', "Range": "bytes=0-9"},
        "IM passes with Range": {"If-Match": etag, "Range": "bytes=0-9"},
        "INM over Range": {"If-None-Match": etag, "Range": "bytes=0-9"},
    }.items():
        c.append((name, req("/range.txt", **headers)))
        c.append((f"HEAD {name}", req("/range.txt", "HEAD", **headers)))
    c.append(("INM two lines", b"GET /range.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"x\"\r\n"
                               b"If-None-Match: " + etag.encode() + b"\r\n\r\n"))
    # ranges
    for spec in ("bytes=0-9", "bytes=10-19", f"bytes={LEN - 1}-{LEN - 1}", "bytes=-10", "bytes=-1000",
                 "bytes=100-", f"bytes=100-{LEN + 50}", f"bytes={LEN}-", "bytes=-0", "bytes=5-2",
                 "items=0-1", "bytes=abc", "bytes=", "bytes=--1", "bytes=0-99999999999999999999999",
                 "bytes=0-1,5-6", "bytes=0-1,5-6,-3", "bytes=0-10,5-15", "bytes=0-4,5-9",
                 "bytes=0-50,10-20", "bytes=50-59,0-9", "bytes=0-1,200-300", "bytes=0-,0-",
                 "bytes=" + ",".join(f"{i}-{i}" for i in range(0, 40, 2)),
                 "bytes=" + ",".join(f"{i}-{i}" for i in range(0, 32, 2))):
        c.append((f"Range {spec[:40]}", req("/range.txt", Range=spec)))
    c.append(("Range on empty file", req("/empty.txt", Range="bytes=0-0")))
    c.append(("suffix Range on empty file", req("/empty.txt", Range="bytes=-5")))
    c.append(("Range on a 404", req("/missing", Range="bytes=0-1")))
    c.append(("Range HEAD", req("/range.txt", "HEAD", Range="bytes=0-9")))
    c.append(("Range multipart HEAD", req("/range.txt", "HEAD", Range="bytes=0-1,5-6")))
    c.append(("Range multipart big", req("/big.bin", Range="bytes=0-99,1000000-1000099,-100")))
    for name, if_range in {"etag": etag, "date": lm, "old etag": '"old"', "old date": OLD_DATE,
                           "weak etag": "W/" + etag}.items():
        c.append((f"If-Range {name}", req("/range.txt", Range="bytes=0-9", If_Range=if_range)))
    # paths, redirects, error pages
    for target in ("/caf%c3%a9%20menu.html", "/%61.txt", "/a+b.txt", "/a.txt?x=1", "/a.txt?",
                   "/a.txt?q=/../../etc/passwd", "/./a.txt", "//a.txt", "/sub/../a.txt",
                   "/../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/a/..%2f..%2f..%2fetc/passwd",
                   "/..%5c..%5c..%5cetc/passwd", "/%252e%252e/etc/passwd", "/../outside/secret.txt",
                   "/%00", "/a.txt%00.html", "/%zz", "/%4", "/sub", "//sub", "/sub?x=1&y=2",
                   "/sub?q=" + "x" * 2000, "/emptydir/", "/emptydir", "/.secret", "/.git/config", "/.git/",
                   "/sub/../.secret", "/link_out.txt", "/linkdir_out/secret.txt", "/link_in.txt",
                   "/" + "n" * 300, "/a/b/c/d/e/f/g/h/i/j/k", "/missing", "/a.txt/x", "/errors/404.html",
                   "http://example.com/a.txt"):
        c.append((f"GET {target[:60]}", req(target)))
    # framing: malformed requests, limits, versions, bodies, expectations
    c += [(f"400 {name}", data) for name, data in sorted(BAD_400.items())]
    for version in ("HTTP/2.0", "HTTP/3.0", "HTTP/0.9", "HTTP/1.0"):
        c.append((f"version {version}", req("/a.txt", version=version)))
    c.append(("HTTP/1.0 keep-alive", req("/a.txt", version="HTTP/1.0", Connection="keep-alive")))
    c.append(("request line 414", req("/" + "x" * 9000)))
    c.append(("head 431", req("/a.txt", X_Big="x" * 17000)))
    c.append(("headers 431", util.build_request("GET", "/a.txt", [(f"X-H{i}", "v") for i in range(101)])))
    c.append(("tabs and obs-text", b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A: a\tb\xe9\r\n\r\n"))
    c.append(("leading empty lines", b"\r\n\r\nGET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n"))
    c.append(("TE gzip 501", req("/a.txt", Transfer_Encoding="gzip")))
    c.append(("Content-Length body", req("/a.txt", Content_Length="5") + b"hello"))
    c.append(("chunked body", req("/a.txt", Transfer_Encoding="chunked") + b"5\r\nhello\r\n0\r\n\r\n"))
    c.append(("malformed chunked", req("/a.txt", Transfer_Encoding="chunked") + b"zz\r\nhello\r\n0\r\n\r\n"))
    c.append(("body over max_body", req("/a.txt", Content_Length=str(1048577))))
    c.append(("POST with body", req("/a.txt", "POST", Content_Length="3") + b"abc"))
    c.append(("Expect 100 with body", req("/a.txt", Expect="100-continue", Content_Length="5") + b"hello"))
    c.append(("Expect 100 no body", req("/a.txt", Expect="100-continue")))
    c.append(("Expect 100 too large", req("/a.txt", Expect="100-continue", Content_Length="2000000")))
    for expect in ("something-else", "100-continue, foo", "", ","):
        c.append((f"Expect {expect!r}", req("/a.txt", Expect=expect)))
    c.append(("Expect HTTP/1.0", req("/a.txt", version="HTTP/1.0", Expect="something-else")))
    c.append(("Connection close", req("/a.txt", Connection="close")))
    c.append(("Connection list", req("/a.txt", Connection="foo, close")))
    # a pipelined batch of the above, answered in order on one connection
    batch = [data for name, data in c if name.startswith(("GET /", "INM", "IMS", "Range", "If-Range"))
             and "Range multipart big" not in name]
    c.append(("pipelined batch", b"".join(batch)))
    return c


CONFIGS = {
    # name: (root fixture, settings, extra arguments)
    "core": ("docroot", {}, None),
    "builtin-pages": ("plain_docroot", {"server_tokens": "off"}, None),
    "limits": ("docroot", {"max_ranges": "3", "max_request_line": "64", "max_head": "512",
                           "max_headers": "5", "max_body": "4", "index": "page.txt",
                           "dotfiles": "on", "symlinks": "off"}, None),
    "listing-html": ("docroot", {"autoindex": "html", "fallback": "/index.html"}, None),
    "listing-json": ("docroot", {"autoindex": "json", "dotfiles": "on", "symlinks": "all"}, None),
    "content": ("site", {}, "config"),
}


def listing_corpus() -> list[tuple[str, bytes]]:
    c = []
    for target in ("/", "/emptydir/", "/errors/", "/sub/", "/.git/", "/linkdir_out/", "/nope", "/deep/route/",
                   "/errors/?sort=size&order=desc", "/errors/?sort=mtime", "/errors/?sort=name&order=asc",
                   "/errors/?sort=bogus", "/emptydir"):
        c.append((f"GET {target}", req(target)))
        c.append((f"HEAD {target}", req(target, "HEAD")))
    return c


def content_corpus() -> list[tuple[str, bytes]]:
    c = []
    for ae in (None, "gzip, deflate, br, zstd", "gzip, zstd", "gzip", "br;q=0.2, gzip;q=0.9", "*",
               "identity", "compress", "br;q=0, zstd;q=0, gzip;q=0", "identity;q=0", "*;q=0",
               "gzip, identity;q=0"):
        for target in ("/app.js", "/only-gz.css", "/edited.js", "/plain.txt"):
            headers = {} if ae is None else {"Accept-Encoding": ae}
            c.append((f"GET {target} AE {ae}", req(target, **headers)))
    c.append(("sidecar range", req("/app.js", Accept_Encoding="gzip", Range="bytes=0-9")))
    c.append(("sidecar by name", req("/app.js.gz", Accept_Encoding="gzip")))
    for target in ("/", "/index.html", "/assets/logo.svg", "/js/app.js.map", "/thing.zzqx", "/notes.md",
                   "/noext", "/no-such-file", "/assets/missing.svg", "/assets"):
        c.append((f"GET {target}", req(target)))
        c.append((f"HEAD {target}", req(target, "HEAD")))
    return c


_BOUNDARY_RE = re.compile(rb"multipart/byteranges; boundary=([0-9a-f]+)")
_CLOCK_RE = re.compile(rb"\r\n(Date|Expires): [^\r\n]*")


def normalise(raw: bytes) -> bytes:
    """The answer without what changes from one answer to the next."""
    for boundary in set(_BOUNDARY_RE.findall(raw)):
        raw = raw.replace(boundary, b"B" * len(boundary))
    return _CLOCK_RE.sub(rb"\r\n\1: (clock)", raw)


def answer(srv: util.Server, name: str, data: bytes) -> bytes:
    with srv.connect(timeout=util.scaled(10)) as c:
        c.send(data + CLOSE)
        try:
            return c.read_all(timeout=util.scaled(10))
        except TimeoutError:
            raise AssertionError(f"{srv.model}: {name!r} not answered to the end in "
                                 f"{util.scaled(10):g} s; got {c.buf[:300]!r}") from None


@pytest.fixture(scope="module")
def started(request, tmp_path_factory):
    """get(model, config) -> a running server of that configuration, one per
    (model, config) for the module; each must exit 0 when stopped."""
    servers: dict[tuple[str, str], util.Server] = {}

    def get(model: str, config: str) -> util.Server:
        key = (model, config)
        if key not in servers:
            root_fixture, settings, extra = CONFIGS[config]
            root = request.getfixturevalue(root_fixture)
            if root_fixture == "site":
                root, conf = root
                extra = ["--config", str(conf)]
            else:
                root = root.path
            servers[key] = util.Server(model, root, tmp_path_factory.mktemp(f"agree-{model}-{config}"),
                                       settings, extra_args=extra).start()
        return servers[key]

    yield get
    problems = []
    for srv in servers.values():
        if srv.alive() and srv.stop() != 0:
            problems.append(srv.diagnostics())
    assert not problems, "\n".join(problems)


def corpus_for(config: str, ref: util.Server) -> list[tuple[str, bytes]]:
    if config in ("core", "builtin-pages", "limits"):
        r = ref.get("/range.txt")
        return core_corpus({"etag": r.header("ETag") or '"none"', "lm": r.header("Last-Modified") or OLD_DATE})
    if config.startswith("listing"):
        return listing_corpus()
    return content_corpus()


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_model_answers_like_the_default_model(model, started, config):
    ref = started(SEMANTICS_MODEL, config)
    srv = started(model, config)
    corpus = corpus_for(config, ref)
    differences = []
    for name, data in corpus:
        want = normalise(answer(ref, name, data))
        assert want, f"{name!r}: {SEMANTICS_MODEL} sent nothing"
        got = normalise(answer(srv, name, data))
        if got != want:
            if len(differences) < 3:
                differences.append(f"{name!r} ({data[:200]!r}):\n  {SEMANTICS_MODEL}: {want[:600]!r}\n"
                                   f"  {model}: {got[:600]!r}")
            else:
                differences.append(name)
    assert not differences, (f"{len(differences)} of {len(corpus)} answers of {model} differ from "
                             f"{SEMANTICS_MODEL}'s:\n" + "\n".join(differences))
