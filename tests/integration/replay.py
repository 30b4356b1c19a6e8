"""Record and replay: a fixed set of raw requests, and the exact bytes spindle
answered them with, kept in replay_corpus.json beside this file.

The corpus pins what a client sees (status lines, header fields in order,
bodies, framing, which connections close) so a change inside the server that
must not change an answer (a refactoring) is checked byte for byte by
test_replay.py. Only what varies by itself is normalised: the Date and
Expires values, and the random multipart boundary.

Record again only when an answer is meant to change:

    .venv/bin/python tests/integration/replay.py --record

and review the corpus diff: every changed byte is a change a client sees.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import util  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "replay_corpus.json"
MODEL = os.environ.get("SPINDLE_REPLAY_MODEL", "epoll")

MTIME = 1_600_000_000          # every file and directory: validators and listings are fixed
DIR_MTIME = 1_600_000_500


def _pattern(n: int) -> bytes:
    """Printable bytes that repeat only after a while (the corpus stays JSON without escapes)."""
    return bytes(32 + (i * 131 + (i >> 8) * 7 + 3) % 95 for i in range(n))


# name -> contents; mtimes are all MTIME unless listed in OLDER
FILES = {
    "index.html": b"<!doctype html><title>home</title><p>home</p>\n",
    "style.css": b"body { color: #333; }\n" * 4,
    "app.js": b"function hello() { return 'hello'; }\n" * 8,
    "app.js.br": b"BROTLI-SIDECAR-BYTES" * 3,
    "app.js.gz": b"\x1f\x8bGZIP-SIDECAR-BYTES" * 2,
    "old.js": b"console.log('new');\n",
    "old.js.gz": b"\x1f\x8bSTALE",
    "small.txt": b"0123456789abcdefghijklmnopqrstuvwxyz\n",
    "empty.txt": b"",
    "mid.bin": _pattern(20_000),       # over sendfile_min, cached
    "big.bin": _pattern(40_000),       # over cache_max_file: an open file, by sendfile
    "data.json": b'{"a": 1}\n',
    "noext": b"no extension\n",
    "caf\u00e9.txt": b"utf-8 name\n",
    "docs/index.html": b"<p>docs</p>\n",
    "docs/page.html": b"<p>a page</p>\n",
    "assets/logo.svg": b"<svg xmlns='http://www.w3.org/2000/svg'/>\n",
    "list/a.txt": b"a" * 10,
    "list/b.txt": b"b" * 300,
    "list/sub/c.txt": b"c",
    "list/.hidden": b"h",
    "errors/404.html": b"<!doctype html><h1>custom not found</h1>\n",
    "errors/403.html": b"<!doctype html><h1>custom forbidden</h1>\n",
    ".secret": b"dotfile\n",
}
OLDER = {"old.js.gz": MTIME - 3600}

CONF = """[http]
health_path = /healthz
{http}
[cache]
cache_max_file = 32k

[content]
precompressed = br gzip
cache_expires = on

[cache_control]
/assets/* = public, max-age=31536000, immutable
*.css = public, max-age=60
text/html = no-cache
"""

# The servers the cases run on: settings over the file above.
SERVERS = {
    # cache on, listings as HTML, precompressed sidecars, Cache-Control rules
    "site": "autoindex = html\n",
    # no cache (every file opened), JSON listings, dotfiles, the SPA fallback
    "nocache": "autoindex = json\ndotfiles = on\nfallback = /index.html\n",
    # listings off: a directory without an index is refused
    "plain": "autoindex = off\nmax_ranges = 4\n",
    # every request redirected to HTTPS
    "redirect": "",
}
SERVER_SETTINGS = {"nocache": {"cache_size": "0"},
                   "redirect": {"redirect_https": "on", "redirect_https_port": "8443"}}


def build_site(root: Path) -> None:
    for rel, data in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "emptydir").mkdir()
    os.symlink("small.txt", root / "link-in.txt")
    outside = root.parent / "outside.txt"
    outside.write_bytes(b"OUTSIDE")
    os.symlink(outside, root / "link-out.txt")
    os.mkfifo(root / "fifo")
    for p in sorted(root.rglob("*"), key=lambda q: -len(q.parts)):
        if p.is_symlink() or p.name == "fifo":
            continue
        t = DIR_MTIME if p.is_dir() else OLDER.get(p.relative_to(root).as_posix(), MTIME)
        os.utime(p, (t, t))
    os.utime(root, (DIR_MTIME, DIR_MTIME))


def etag(rel: str) -> str:
    data = FILES[rel]
    return f'"{OLDER.get(rel, MTIME):x}-{len(data):x}"'


LM = util.http_date(MTIME)
EARLIER = util.http_date(MTIME - 100)
LATER = util.http_date(MTIME + 100)


def req(target="/", method="GET", headers=(), body=b"", version="HTTP/1.1", host="localhost") -> bytes:
    lines = [f"{method} {target} {version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# (server, name, steps): each step is bytes to send, or ("wait", marker):
# read until marker arrives. After the last step the client half-closes and
# reads until the server closes.
def cases() -> list[tuple[str, str, list]]:
    c: list[tuple[str, str, list]] = []

    def add(server, name, *steps):
        c.append((server, name, list(steps)))

    E = etag
    for srv in ("site", "nocache"):
        add(srv, "get-index", req("/"))
        add(srv, "head-index", req("/", "HEAD"))
        add(srv, "get-css", req("/style.css"))
        add(srv, "get-small", req("/small.txt"))
        add(srv, "get-empty", req("/empty.txt"))
        add(srv, "get-mid", req("/mid.bin"))
        add(srv, "get-big", req("/big.bin"))
        add(srv, "head-big", req("/big.bin", "HEAD"))
        add(srv, "get-json", req("/data.json"))
        add(srv, "get-noext", req("/noext"))
        add(srv, "get-utf8-name", req("/caf%C3%A9.txt"))
        add(srv, "get-svg-rule", req("/assets/logo.svg"))
        add(srv, "get-dot-segments", req("/docs/../small.txt"))
        add(srv, "get-query", req("/small.txt?x=1&y=2"))
        add(srv, "get-symlink-in", req("/link-in.txt"))
        add(srv, "get-symlink-out", req("/link-out.txt"))
        add(srv, "get-fifo", req("/fifo"))
        add(srv, "get-dotfile", req("/.secret"))
        add(srv, "get-missing", req("/missing.txt"))
        add(srv, "get-missing-route", req("/app/settings"))
        add(srv, "get-file-slash", req("/small.txt/"))
        add(srv, "get-traversal", req("/../etc/passwd"))
        add(srv, "get-encoded-traversal", req("/%2e%2e/%2e%2e/etc/passwd"))
        add(srv, "get-nul", req("/small%00.txt"))
        # directories: redirects, index files, listings
        add(srv, "dir-redirect", req("/docs"))
        add(srv, "dir-redirect-query", req("/docs?a=b"))
        add(srv, "dir-redirect-encoded", req("/list/sub"))
        add(srv, "dir-index", req("/docs/"))
        add(srv, "dir-index-head", req("/docs/", "HEAD"))
        add(srv, "listing", req("/list/"))
        add(srv, "listing-sub", req("/list/sub/"))
        add(srv, "listing-sorted", req("/list/?sort=size&order=desc"))
        add(srv, "listing-head", req("/list/", "HEAD"))
        add(srv, "listing-empty", req("/emptydir/"))
        add(srv, "listing-range", req("/list/", headers=[("Range", "bytes=0-9")]))
        # conditionals
        add(srv, "inm-match", req("/small.txt", headers=[("If-None-Match", E("small.txt"))]))
        add(srv, "inm-list", req("/small.txt", headers=[("If-None-Match", f'"x", W/{E("small.txt")}')]))
        add(srv, "inm-star", req("/small.txt", headers=[("If-None-Match", "*")]))
        add(srv, "inm-miss", req("/small.txt", headers=[("If-None-Match", '"nope"')]))
        add(srv, "ims-later", req("/small.txt", headers=[("If-Modified-Since", LATER)]))
        add(srv, "ims-earlier", req("/small.txt", headers=[("If-Modified-Since", EARLIER)]))
        add(srv, "ims-bad-date", req("/small.txt", headers=[("If-Modified-Since", "yesterday")]))
        add(srv, "im-miss", req("/small.txt", headers=[("If-Match", '"nope"')]))
        add(srv, "im-match", req("/small.txt", headers=[("If-Match", E("small.txt"))]))
        add(srv, "ius-earlier", req("/small.txt", headers=[("If-Unmodified-Since", EARLIER)]))
        add(srv, "ius-later", req("/small.txt", headers=[("If-Unmodified-Since", LATER)]))
        add(srv, "inm-head", req("/small.txt", "HEAD", headers=[("If-None-Match", E("small.txt"))]))
        add(srv, "inm-big", req("/big.bin", headers=[("If-None-Match", E("big.bin"))]))
        add(srv, "im-miss-big", req("/big.bin", headers=[("If-Match", '"nope"')]))
        add(srv, "inm-rule", req("/assets/logo.svg", headers=[("If-None-Match", E("assets/logo.svg"))]))
        add(srv, "inm-css-rule", req("/style.css", headers=[("If-Modified-Since", LATER)]))
        add(srv, "listing-ims", req("/list/", headers=[("If-Modified-Since", util.http_date(DIR_MTIME))]))
        add(srv, "listing-im-miss", req("/list/", headers=[("If-Match", '"nope"')]))
        # ranges
        for name, rng in [("first10", "bytes=0-9"), ("suffix", "bytes=-5"), ("open", "bytes=10-"),
                          ("two", "bytes=0-0,5-9"), ("overlap", "bytes=0-5,3-9"),
                          ("adjacent", "bytes=0-4,5-9"), ("many", "bytes=0-0,2-2,4-4,6-6,8-8,10-10"),
                          ("unsat", "bytes=1000-2000"), ("bad-unit", "items=0-1"), ("junk", "bytes=abc"),
                          ("whole", "bytes=0-"), ("past-end", "bytes=30-100"), ("zero-suffix", "bytes=-0")]:
            add(srv, f"range-{name}", req("/small.txt", headers=[("Range", rng)]))
        add(srv, "range-empty-file", req("/empty.txt", headers=[("Range", "bytes=0-1")]))
        add(srv, "range-head", req("/small.txt", "HEAD", headers=[("Range", "bytes=0-9")]))
        add(srv, "range-head-multi", req("/small.txt", "HEAD", headers=[("Range", "bytes=0-1,4-5")]))
        add(srv, "range-mid", req("/mid.bin", headers=[("Range", "bytes=100-199")]))
        add(srv, "range-mid-multi", req("/mid.bin", headers=[("Range", "bytes=0-99,19000-19099")]))
        add(srv, "range-big", req("/big.bin", headers=[("Range", "bytes=30000-30099")]))
        add(srv, "range-big-multi", req("/big.bin", headers=[("Range", "bytes=0-9,20000-20009,-10")]))
        add(srv, "range-big-unsat", req("/big.bin", headers=[("Range", "bytes=40000-")]))
        add(srv, "if-range-etag", req("/small.txt", headers=[("Range", "bytes=0-3"), ("If-Range", E("small.txt"))]))
        add(srv, "if-range-miss", req("/small.txt", headers=[("Range", "bytes=0-3"), ("If-Range", '"nope"')]))
        add(srv, "if-range-date", req("/small.txt", headers=[("Range", "bytes=0-3"), ("If-Range", LM)]))
        add(srv, "if-range-old-date", req("/small.txt", headers=[("Range", "bytes=0-3"), ("If-Range", EARLIER)]))
        add(srv, "range-and-inm", req("/small.txt", headers=[("Range", "bytes=0-3"),
                                                             ("If-None-Match", E("small.txt"))]))
        add(srv, "range-rule", req("/assets/logo.svg", headers=[("Range", "bytes=0-4,8-9")]))
        # sidecars
        for name, ae in [("none", None), ("br", "br"), ("gzip", "gzip"), ("both", "gzip, br"),
                         ("q", "br;q=0.5, gzip;q=0.9"), ("star", "*"), ("identity", "identity"),
                         ("refused", "identity;q=0, deflate"), ("zstd", "zstd")]:
            h = [("Accept-Encoding", ae)] if ae else []
            add(srv, f"sidecar-{name}", req("/app.js", headers=h))
        add(srv, "sidecar-head", req("/app.js", "HEAD", headers=[("Accept-Encoding", "br")]))
        add(srv, "sidecar-range", req("/app.js", headers=[("Accept-Encoding", "gzip"), ("Range", "bytes=0-3")]))
        add(srv, "sidecar-multirange", req("/app.js", headers=[("Accept-Encoding", "br"),
                                                               ("Range", "bytes=0-3,10-12")]))
        add(srv, "sidecar-unsat", req("/app.js", headers=[("Accept-Encoding", "br"), ("Range", "bytes=900-")]))
        add(srv, "sidecar-inm", req("/app.js", headers=[("Accept-Encoding", "br"),
                                                        ("If-None-Match", E("app.js")[:-1] + '-br"')]))
        add(srv, "sidecar-im-miss", req("/app.js", headers=[("Accept-Encoding", "br"), ("If-Match", '"x"')]))
        add(srv, "sidecar-stale", req("/old.js", headers=[("Accept-Encoding", "gzip")]))
        add(srv, "sidecar-plain-file", req("/small.txt", headers=[("Accept-Encoding", "identity;q=0")]))
        # methods and request-level errors
        add(srv, "post", req("/", "POST", headers=[("Content-Length", "3")], body=b"abc"))
        add(srv, "put", req("/x", "PUT", headers=[("Content-Length", "0")]))
        add(srv, "delete", req("/small.txt", "DELETE"))
        add(srv, "options-star", req("*", "OPTIONS"))
        add(srv, "options", req("/", "OPTIONS"))
        add(srv, "trace", req("/", "TRACE"))
        add(srv, "connect", req("localhost:80", "CONNECT"))
        add(srv, "unknown-method", req("/", "FROB"))
        add(srv, "absolute-form", req("http://localhost/small.txt"))
        add(srv, "absolute-form-other-host", req("http://example.com/small.txt"))
        add(srv, "absolute-form-https", req("https://localhost/docs"))
        add(srv, "no-host", req("/small.txt", host=None))
        add(srv, "two-hosts", req("/small.txt", headers=[("Host", "other")]))
        add(srv, "http10", req("/small.txt", version="HTTP/1.0", host=None))
        add(srv, "http10-keepalive", req("/small.txt", version="HTTP/1.0", host=None,
                                         headers=[("Connection", "keep-alive")]), req("/"))
        add(srv, "http11-close", req("/small.txt", headers=[("Connection", "close")]), req("/"))
        add(srv, "http2-version", req("/", version="HTTP/2.0"))
        add(srv, "http09", b"GET /\r\n\r\n")
        add(srv, "bad-version", req("/", version="HTTP/1.x"))
        add(srv, "garbage", b"GARBAGE\r\n\r\n")
        add(srv, "bare-lf", b"GET /small.txt HTTP/1.1\nHost: x\n\n")
        add(srv, "bare-cr", b"GET /small.txt HTTP/1.1\rHost: x\r\n\r\n")
        add(srv, "space-before-colon", b"GET / HTTP/1.1\r\nHost : x\r\n\r\n")
        add(srv, "obs-fold", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n")
        add(srv, "long-uri", req("/" + "a" * 9000))
        add(srv, "long-header", req("/", headers=[("X-Big", "b" * 17000)]))
        add(srv, "many-headers", req("/", headers=[(f"X-H{i}", "v") for i in range(120)]))
        add(srv, "long-path-404", req("/" + "d/" * 1500 + "x"))
        # bodies and framing
        add(srv, "get-with-body", req("/small.txt", headers=[("Content-Length", "5")], body=b"hello"), req("/"))
        add(srv, "chunked-body", req("/small.txt", headers=[("Transfer-Encoding", "chunked")],
                                     body=b"5\r\nhello\r\n0\r\n\r\n"), req("/"))
        add(srv, "chunked-bad", req("/small.txt", headers=[("Transfer-Encoding", "chunked")],
                                    body=b"zz\r\nhello\r\n0\r\n\r\n"))
        add(srv, "cl-and-te", req("/", headers=[("Content-Length", "3"), ("Transfer-Encoding", "chunked")],
                                  body=b"0\r\n\r\n"))
        add(srv, "two-cl", req("/", headers=[("Content-Length", "3"), ("Content-Length", "4")], body=b"abcd"))
        add(srv, "bad-cl", req("/", headers=[("Content-Length", "-1")]))
        add(srv, "te-gzip", req("/", headers=[("Transfer-Encoding", "gzip")]))
        add(srv, "body-too-big", req("/", headers=[("Content-Length", "2000000")]))
        add(srv, "expect-continue", req("/small.txt", headers=[("Content-Length", "4"), ("Expect", "100-continue")]),
            ("wait", b"100 Continue\r\n\r\n"), b"body", req("/"))
        add(srv, "expect-continue-refused", req("/", "POST", headers=[("Content-Length", "4"),
                                                                      ("Expect", "100-continue")]))
        add(srv, "expect-unknown", req("/", headers=[("Expect", "teapot")]))
        add(srv, "expect-unknown-body", req("/", headers=[("Expect", "teapot"), ("Content-Length", "2")], body=b"ab"))
        # pipelining and keep-alive
        add(srv, "pipeline-3", req("/small.txt") + req("/style.css") + req("/missing"))
        add(srv, "pipeline-mixed", req("/", "HEAD") + req("/small.txt", headers=[("Range", "bytes=0-1,3-4")])
            + req("/docs") + req("/list/") + req("/small.txt", headers=[("If-None-Match", E("small.txt"))]))
        add(srv, "pipeline-big", req("/small.txt") + req("/big.bin") + req("/mid.bin") + req("/"))
        add(srv, "pipeline-close-middle", req("/small.txt") + req("/", headers=[("Connection", "close")])
            + req("/style.css"))
        add(srv, "pipeline-error-middle", req("/small.txt") + b"BROKEN\r\n\r\n" + req("/"))
        add(srv, "pipeline-post-body", req("/", "POST", headers=[("Content-Length", "2")], body=b"xy")
            + req("/small.txt"))
        add(srv, "pipeline-many", b"".join(req("/small.txt") for _ in range(20)))
        add(srv, "keepalive-sequential", req("/small.txt"), ("wait", b"xyz\n"), req("/"))
        add(srv, "health", req("/healthz"))
        add(srv, "health-head", req("/healthz", "HEAD"))
        add(srv, "health-query", req("/healthz?x"))
    add("plain", "dir-no-index", req("/list/"))
    add("plain", "dir-no-index-head", req("/list/", "HEAD"))
    add("plain", "range-too-many", req("/small.txt", headers=[("Range", "bytes=0-0,2-2,4-4,6-6,8-8")]))
    add("plain", "range-four", req("/small.txt", headers=[("Range", "bytes=0-0,2-2,4-4,6-6")]))
    add("plain", "get-index", req("/"))
    add("redirect", "to-https", req("/docs/page.html?q=1"))
    add("redirect", "to-https-port", req("/", host="example.com:8080"))
    add("redirect", "to-https-v6", req("/x", host="[::1]:8080"))
    add("redirect", "bad-host", req("/", host="evil\"host"))
    add("redirect", "odd-host", req("/", host="a~b"))
    add("redirect", "no-host", req("/", version="HTTP/1.0", host=None))
    add("redirect", "post", req("/", "POST", headers=[("Content-Length", "0")]))
    return c


DATE_RE = re.compile(rb"\r\n(Date|Expires): [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT")
BOUNDARY_RE = re.compile(rb"boundary=([0-9a-f]{16})")


def normalize(data: bytes) -> bytes:
    """Date and Expires values and multipart boundaries replaced by fixed
    text of the same length (Content-Length stays right)."""
    data = DATE_RE.sub(lambda m: b"\r\n" + m.group(1) + b": Thu, 01 Jan 1970 00:00:00 GMT", data)
    for b in set(BOUNDARY_RE.findall(data)):
        data = data.replace(b, b"B" * 16)
    return data


def run_case(port: int, steps: list, timeout: float = 5.0) -> bytes:
    """Sends the steps on one connection, half-closes, and returns every
    byte the server sent until it closed."""
    got = b""
    deadline = time.monotonic() + timeout
    with socket.create_connection((util.HOST, port), timeout=timeout) as s:
        for step in steps:
            if isinstance(step, tuple):
                while step[1] not in got:
                    s.settimeout(max(0.01, deadline - time.monotonic()))
                    chunk = s.recv(65536)
                    if not chunk:
                        raise AssertionError(f"closed before {step[1]!r}: {got[-300:]!r}")
                    got += chunk
                continue
            s.sendall(step)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server closed first: what it sent is still readable
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    return got


def server_conf(workdir: Path, name: str) -> Path:
    p = workdir / f"{name}.conf"
    p.write_text(CONF.format(http=SERVERS[name]))
    return p


def start_servers(root: Path, workdir: Path, model: str = MODEL) -> dict:
    out = {}
    for name in SERVERS:
        conf = server_conf(workdir, name)
        out[name] = util.Server(model, root, workdir / name, settings=SERVER_SETTINGS.get(name),
                                extra_args=["--config", str(conf)]).start()
    return out


def case_id(server: str, name: str) -> str:
    return f"{server}/{name}"


def as_text(b: bytes) -> str:
    return b.decode("latin-1")


def record(path: Path = CORPUS) -> int:
    with tempfile.TemporaryDirectory(prefix="spindle-replay-") as tmp:
        tmp = Path(tmp)
        root = tmp / "www"
        root.mkdir()
        build_site(root)
        servers = start_servers(root, tmp)
        try:
            entries = []
            for server, name, steps in cases():
                resp = normalize(run_case(servers[server].port, steps))
                entries.append({"case": case_id(server, name),
                                "request": [as_text(s) if isinstance(s, bytes) else ["wait", as_text(s[1])]
                                            for s in steps],
                                "response": as_text(resp)})
        finally:
            for s in servers.values():
                s.stop()
    path.write_text(json.dumps({"model": MODEL, "cases": entries}, indent=1, ensure_ascii=True) + "\n")
    print(f"replay: {len(entries)} cases recorded into {path}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="record the corpus with $SPINDLE_BIN (or ./spindle)")
    ap.add_argument("--out", type=Path, default=CORPUS)
    a = ap.parse_args()
    if not a.record:
        ap.error("nothing to do: --record")
    sys.exit(record(a.out))
