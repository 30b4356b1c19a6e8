#!/usr/bin/env python3
"""What REDbot (the HTTP linter, https://redbot.org) says about spindle's
answers: a small site with one resource of each kind spindle serves (a file,
an index page, a directory redirect, a 404, a large file with ranges, a
precompressed sidecar, a listing), each checked as REDbot checks a URL (a GET,
then its content-negotiation, range and validation requests), its notes
printed one a line as LEVEL category: summary.

Used by test_redbot.py (no note may be BAD), and by hand to compare two
builds, for example spindle before and after a change inside the core:

  .venv/bin/python tests/integration/redbot_notes.py --spindle /tmp/x-pre/spindle > /tmp/before.txt
  .venv/bin/python tests/integration/redbot_notes.py --spindle ./spindle > /tmp/after.txt
  diff /tmp/before.txt /tmp/after.txt

--url URL... checks URLs of a server already running instead.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MTIME = 1_600_000_000  # fixed, so "last modified ... ago" reads the same in two runs a minute apart

# path -> what it is; the site build_site() writes serves each
RESOURCES = {
    "/": "the index page of the root",
    "/a.txt": "a small file",
    "/sub": "a directory without its slash (redirect)",
    "/missing.html": "a file that does not exist (404)",
    "/big.bin": "a 2 MiB file (ranges, sendfile)",
    "/style.css": "a file with a gzip sidecar (precompressed)",
    "/list/": "a directory without an index (listing)",
}
SETTINGS = {"autoindex": "html", "precompressed": "gzip"}


def build_site(root: Path) -> None:
    files = {
        "index.html": b"<!doctype html><title>redbot</title><p>root index</p>\n",
        "a.txt": b"Hello, world!\n",
        "sub/index.html": b"<!doctype html><title>sub</title><p>sub index</p>\n",
        "big.bin": bytes(range(256)) * 8192,
        "style.css": b"body { color: #222; background: #fff; }\n" * 64,
        "list/one.txt": b"one\n",
        "list/two.txt": b"two\n",
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    sidecar = root / "style.css.gz"
    sidecar.write_bytes(gzip.compress(files["style.css"], mtime=0))
    for p in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):  # files, then their directories
        os.utime(p, (MTIME, MTIME))
    os.utime(root, (MTIME, MTIME))


def check_urls(urls: list[str], timeout: float = 30) -> dict[str, list[tuple[str, str, str]]]:
    """url -> [(level, category, summary)] (subnotes indented), from
    REDbot's own checks, all URLs at once in one event loop."""
    from configparser import ConfigParser

    import thor
    from redbot.resource import HttpResource

    parser = ConfigParser()
    parser.read_dict({"redbot": {"enable_local_access": "True"}})  # as its CLI: 127.0.0.1 is allowed
    config = parser["redbot"]
    pending = set(urls)
    resources = {}
    for url in urls:
        res = HttpResource(config)
        res.set_request(url)

        def done(url=url):
            pending.discard(url)
            if not pending:
                thor.stop()
        res.on("check_done", done)
        resources[url] = res
    for res in resources.values():
        res.check()
    thor.schedule(timeout, thor.stop)
    thor.run()
    if pending:
        raise TimeoutError(f"REDbot did not finish {sorted(pending)} within {timeout} s")

    def level(note) -> str:
        return getattr(note.level, "name", str(note.level)).upper()

    out = {}
    for url, res in resources.items():
        if res.fetch_error is not None:
            out[url] = [("ERROR", "fetch", str(getattr(res.fetch_error, "desc", res.fetch_error)))]
            continue
        notes = []
        for note in res.response.notes:
            notes.append((level(note), str(note.category.value), str(note.summary)))
            for sub in note.subnotes:
                notes.append((level(sub), str(note.category.value), "  " + str(sub.summary)))
        out[url] = notes
    return out


# A note that comes and goes with the clock: REDbot's reading of the Date
# field against its own clock says "cached for 1 second" when the answer's
# second ended before it was read. It says nothing about the server.
CLOCK_NOTE = re.compile(r"This response has already been cached for \d+ seconds?\.")


def format_notes(notes: dict[str, list[tuple[str, str, str]]], base: str) -> str:
    """One line a note, sorted within each resource (REDbot's checks run
    concurrently, so their notes arrive in either order)."""
    lines = []
    for url, items in notes.items():
        path = url[len(base):] or "/"
        lines.append(f"== {path}  ({RESOURCES.get(path, '')})")
        kept = sorted((cat, summary, lvl) for lvl, cat, summary in items if not CLOCK_NOTE.fullmatch(summary.strip()))
        lines += [f"{lvl:<5} {cat}: {summary}" for cat, summary, lvl in kept]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_and_check(spindle: str, model: str, extra: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="redbot-") as tmp:
        root = Path(tmp) / "site"
        build_site(root)
        port = free_port()
        args = [spindle, "--bind", "127.0.0.1", "--port", str(port), "--root", str(root), "--model", model,
                "--set", f"error_log={tmp}/error.log", "--set", "access_log=off"]
        for setting in [f"{k}={v}" for k, v in SETTINGS.items()] + extra:
            args += ["--set", setting]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None:
                        raise RuntimeError(f"{spindle} exited {proc.returncode}: {proc.stderr.read().decode()}")
                    time.sleep(0.1)
            base = f"http://127.0.0.1:{port}"
            return format_notes(check_urls([base + p for p in RESOURCES]), base)
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spindle", help="serve the site with this binary and check it")
    ap.add_argument("--model", default="epoll")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="one more setting (iterative: keepalive_timeout=1, as REDbot holds connections open)")
    ap.add_argument("--url", nargs="+", help="check these URLs instead")
    ap.add_argument("--json", action="store_true", help="with --url: the notes as JSON")
    args = ap.parse_args()
    if args.url:
        notes = check_urls(args.url)
        sys.stdout.write(json.dumps(notes) if args.json else format_notes(notes, ""))
        return 0
    if not args.spindle:
        ap.error("--spindle or --url")
    sys.stdout.write(serve_and_check(args.spindle, args.model, args.set))
    return 0


if __name__ == "__main__":
    sys.exit(main())
