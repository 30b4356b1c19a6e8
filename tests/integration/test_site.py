"""In every model: directory listings (autoindex =
html | json) and the single-page-application fallback."""
from __future__ import annotations

import json
import os
import re
import time
import urllib.parse

import pytest

import util

# Answers decided in the core: one model (conftest.py, `semantics`), except
# the 10,000-entry listing's large body (`per_model`).
pytestmark = pytest.mark.semantics

SITE_INDEX = b"<!doctype html><title>spa</title><div id=app></div>\n"
ODD_NAME = "a&b <i>\"q\"'.txt"        # HTML-special characters
SPACE_NAME = "caf\u00e9 menu?#.txt"   # non-ASCII, and characters that end a URL path
MANY = 10_000
CTL_NAME = b"\x1b[2Jesc\rcr\xffbad.txt"  # ESC, CR and a byte that is not UTF-8


@pytest.fixture(scope="session")
def site_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("siteroot") / "www"
    (root / "list" / "sub dir").mkdir(parents=True)
    (root / "withindex").mkdir()
    (root / "many").mkdir()
    (root / "index.html").write_bytes(SITE_INDEX)
    (root / "app.js").write_bytes(b"console.log(1);\n")
    (root / "noext").write_bytes(b"a file without extension\n")
    (root / "withindex" / "index.html").write_bytes(b"the index wins\n")
    files = {"small.txt": (b"x", 1_600_000_300), ODD_NAME: (b"odd" * 10, 1_600_000_100),
             SPACE_NAME: (b"s" * 100, 1_600_000_200), ".hidden": (b"h", 1_600_000_000)}
    for name, (data, mtime) in files.items():
        p = root / "list" / name
        p.write_bytes(data)
        os.utime(p, (mtime, mtime))
    os.utime(root / "list" / "sub dir", (1_600_000_400, 1_600_000_400))
    (root / "links").mkdir()
    (root / "links" / "real.txt").write_bytes(b"real")
    os.symlink("real.txt", root / "links" / "in.txt")
    outside = root.parent / "outside.txt"
    outside.write_bytes(b"OUTSIDE")
    os.symlink(outside, root / "links" / "out.txt")
    os.mkfifo(root / "links" / "fifo")
    for i in range(MANY):
        (root / "many" / f"file-{i:05d}.txt").write_bytes(b"")
    (root / "ctl").mkdir()
    (root / "ctl" / os.fsdecode(CTL_NAME)).write_bytes(b"ctl")
    return root


def listing_server(servers, site_root):
    return servers(root=site_root, autoindex="html", fallback="/index.html")


def json_server(servers, site_root):
    return servers(root=site_root, autoindex="json", dotfiles="on", fallback="/missing-fallback.html")


# ---- directory listings ---------------------------------------------------------

def test_autoindex_html_listing(model, servers, site_root):
    srv = listing_server(servers, site_root)
    r = srv.get("/list/")
    assert r.status == 200, r
    assert r.header("Content-Type") == "text/html; charset=utf-8"
    body = r.body.decode()
    # names escaped as text, percent-encoded in links; directories end in '/'
    assert '<a href="a%26b%20%3Ci%3E%22q%22%27.txt">a&amp;b &lt;i&gt;&quot;q&quot;&#39;.txt</a>' in body
    quoted = urllib.parse.quote(SPACE_NAME, safe="")
    assert f'<a href="{quoted}">{SPACE_NAME}</a>' in body
    assert '<a href="sub%20dir/">sub dir/</a>' in body
    assert '<a href="../">../</a>' in body, "a parent link below the root"
    assert ".hidden" not in body, "dotfiles are hidden unless dotfiles = on"
    assert "2020-09-13 12:28:20" in body and "<td>30</td>" in body, "dates and sizes"
    # sorted by name (bytewise) by default
    names = re.findall(r'<tr><td><a href="([^"]+)">', body)
    assert names == ["../", "a%26b%20%3Ci%3E%22q%22%27.txt", quoted, "small.txt", "sub%20dir/"], names
    # every link resolves to the entry it names
    for href in names[1:]:
        target = "/list/" + href
        assert srv.get(target).status == 200, target


def test_autoindex_html_names_with_control_bytes(model, servers, site_root):
    """A page that says UTF-8 carries no raw control byte and no ill-formed
    UTF-8 from a file name; its link still fetches the file."""
    srv = listing_server(servers, site_root)
    r = srv.get("/ctl/")
    assert r.status == 200, r
    body = r.body.decode("utf-8")  # strict: ill-formed UTF-8 raises
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", body), "a raw control character"
    assert "\u241b[2Jesc\u240dcr\ufffdbad.txt</a>" in body, body
    href = re.search(r'<a href="([^"]+)">\u241b', body).group(1)
    assert href == urllib.parse.quote(CTL_NAME, safe="")
    assert srv.get("/ctl/" + href).body == b"ctl"


def test_autoindex_sort_and_order(model, servers, site_root):
    srv = listing_server(servers, site_root)

    def order(query):
        r = srv.get("/list/" + query)
        assert r.status == 200, r
        return [urllib.parse.unquote(h) for h in re.findall(r'<tr><td><a href="([^"]+)">', r.body.decode())
                if h != "../"]

    assert order("?sort=mtime") == [ODD_NAME, SPACE_NAME, "small.txt", "sub dir/"]
    assert order("?sort=mtime&order=desc") == ["sub dir/", "small.txt", SPACE_NAME, ODD_NAME]
    # size: the directory counts as 0, ties broken by name
    assert order("?sort=size") == ["sub dir/", "small.txt", ODD_NAME, SPACE_NAME]
    assert order("?order=desc") == ["sub dir/", "small.txt", SPACE_NAME, ODD_NAME]


def test_autoindex_root_keeps_index_and_validators_work(model, servers, site_root):
    srv = listing_server(servers, site_root)
    assert srv.get("/").body == SITE_INDEX, "an index file is served, not listed"
    assert srv.get("/withindex/").body == b"the index wins\n"
    r = srv.get("/list")
    assert r.status == 301 and r.header("Location") == "/list/", r
    r = srv.get("/list/")
    etag, lastmod = r.header("ETag"), r.header("Last-Modified")
    assert etag and etag.startswith('W/"') and lastmod, r
    st = os.stat(site_root / "list")
    assert lastmod == util.http_date(st.st_mtime)
    again = srv.get("/list/", headers=[("If-None-Match", etag)])
    assert again.status == 304 and again.body == b"" and again.header("ETag") == etag, again
    since = srv.get("/list/", headers=[("If-Modified-Since", lastmod)])
    assert since.status == 304, since
    # another order is another body: its validator differs
    other = srv.get("/list/?sort=size", headers=[("If-None-Match", etag)])
    assert other.status == 200 and other.header("ETag") != etag
    head = srv.request("HEAD", "/list/")
    assert head.status == 200 and head.body == b""
    assert head.header("Content-Length") == str(len(r.body))
    assert head.header("ETag") == etag


def test_autoindex_lists_only_what_would_be_served(model, servers, site_root):
    """symlinks = inside (the default): a link leaving the root is not listed,
    nor a FIFO; a link inside is, with its target's size."""
    srv = json_server(servers, site_root)
    doc = json.loads(srv.get("/links/").body)
    assert {e["name"]: e["size"] for e in doc["entries"]} == {"in.txt": 4, "real.txt": 4}, doc
    assert srv.get("/links/out.txt").status == 403


def test_autoindex_off_is_403(model, server):
    """The default (autoindex = off): a directory without an index is refused."""
    assert server.get("/emptydir/").status == 403


def test_autoindex_json_listing(model, servers, site_root):
    srv = json_server(servers, site_root)
    r = srv.get("/list/?sort=size&order=desc")
    assert r.status == 200 and r.header("Content-Type") == "application/json", r
    doc = json.loads(r.body)
    assert doc["path"] == "/list/" and doc["truncated"] is False
    names = [e["name"] for e in doc["entries"]]
    # dotfiles = on here: the dotfile is listed
    assert names == [SPACE_NAME, ODD_NAME, "small.txt", ".hidden", "sub dir"], names
    by_name = {e["name"]: e for e in doc["entries"]}
    assert by_name[ODD_NAME] == {"name": ODD_NAME, "url": "a%26b%20%3Ci%3E%22q%22%27.txt", "type": "file",
                                 "size": 30, "mtime": "2020-09-13T12:28:20Z"}
    assert by_name["sub dir"]["type"] == "directory" and by_name["sub dir"]["size"] is None
    assert by_name["sub dir"]["url"] == "sub%20dir/"
    for e in doc["entries"]:  # every url fetches its entry
        assert srv.get("/list/" + e["url"]).status == 200, e
    root = json.loads(srv.get("/list/sub%20dir/").body)
    assert root == {"path": "/list/sub dir/", "entries": [], "truncated": False}


@pytest.mark.per_model
def test_autoindex_ten_thousand_entries(model, servers, site_root):
    """10,000 entries list in bounded time; the body stays under the 4 MiB cap."""
    srv = json_server(servers, site_root)
    t0 = time.monotonic()
    r = srv.get("/many/?sort=mtime&order=desc", timeout=util.scaled(20))
    elapsed = time.monotonic() - t0
    assert r.status == 200, r
    assert elapsed < util.scaled(5), f"a 10,000-entry listing took {elapsed:.2f}s"
    assert len(r.body) < 4 << 20
    doc = json.loads(r.body)
    assert len(doc["entries"]) == MANY and doc["truncated"] is False
    # equal mtimes are common here: ties are by name, reversed with order=desc
    names = [e["name"] for e in doc["entries"]]
    mt = [e["mtime"] for e in doc["entries"]]
    assert all(mt[i] >= mt[i + 1] for i in range(MANY - 1))
    assert all(names[i] > names[i + 1] for i in range(MANY - 1) if mt[i] == mt[i + 1])
    srv.assert_alive()


# ---- single-page-application fallback ---------------------------------------------

def test_fallback_serves_the_app_for_routes(model, servers, site_root):
    srv = listing_server(servers, site_root)
    for route in ("/settings", "/users/42/profile", "/deep/route/"):
        r = srv.get(route)
        assert r.status == 200 and r.body == SITE_INDEX, (route, r)
        assert r.header("Content-Type").startswith("text/html")
    head = srv.request("HEAD", "/settings")
    assert head.status == 200 and head.body == b"" and head.header("Content-Length") == str(len(SITE_INDEX))
    # existing files are served as they are, with or without an extension
    assert srv.get("/app.js").body == b"console.log(1);\n"
    assert srv.get("/noext").body == b"a file without extension\n"
    # a missing path with an extension stays a 404: a broken asset link must not get HTML
    for missing in ("/missing.js", "/assets/logo.png", "/v1.2"):
        assert srv.get(missing).status == 404, missing
    # methods other than GET/HEAD are not rescued
    assert srv.request("POST", "/settings").status == 405


def test_fallback_missing_is_404_not_a_loop(model, servers, site_root):
    srv = json_server(servers, site_root)  # fallback = /missing-fallback.html
    r = srv.get("/settings")
    assert r.status == 404, r
    assert srv.get("/app.js").status == 200
    srv.assert_alive()


def test_fallback_off_by_default(model, server):
    assert server.get("/no/such/route").status == 404


# ---- configuration ----------------------------------------------------------------

@pytest.mark.parametrize("line, problem", [
    ("autoindex = yes", "autoindex: 'yes' is not off, html or json"),
    ("fallback = index.html", "fallback: 'index.html' must be a path starting with '/'"),
    ("fallback = /index.html?x", "fallback: '/index.html?x' must be a path starting with '/'"),
    ("access_log_format = clf", "access_log_format: 'clf' is not combined, json or vhost_combined"),
])
def test_bad_values_name_file_and_line(tmp_path, docroot, line, problem):
    section = "log" if line.startswith("access_log_format") else "http"
    conf = tmp_path / "bad.conf"
    conf.write_text(f"[{section}]\n{line}\n")
    r = util.run_spindle("--config", str(conf), "--root", str(docroot.path), "--check")
    assert r.returncode != 0
    assert f"{conf}:2: {problem}" in r.stderr, r.stderr
