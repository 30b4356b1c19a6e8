"""Request paths: decoding, traversal, directories, dotfiles, symlinks, error pages."""
from __future__ import annotations

import os

import pytest

import util
from conftest import A_TXT, CAFE, ERROR_404, GIT_CONFIG, OUTSIDE_SECRET, SECRET, SUB_INDEX

# Answers decided in the core: one model (conftest.py, `semantics`).
pytestmark = pytest.mark.semantics


def test_percent_decoded_utf8_name(server):
    resp = server.get("/caf%C3%A9%20menu.html")
    assert resp.status == 200
    assert resp.body == CAFE
    assert resp.header("Content-Type") == "text/html; charset=utf-8"


def test_percent_decoding_lowercase_hex(server):
    assert server.get("/caf%c3%a9%20menu.html").body == CAFE


def test_percent_encoded_plain_chars(server):
    assert server.get("/%61.txt").body == A_TXT


def test_plus_is_not_space(server):
    assert server.get("/caf%C3%A9+menu.html").status == 404


def test_httpx_utf8_path(server):
    import httpx
    with httpx.Client(base_url=server.base_url, trust_env=False, timeout=10) as c:
        r = c.get("/café menu.html")
    assert r.status_code == 200 and r.content == CAFE


@pytest.mark.parametrize("target", ["/a.txt?x=1", "/a.txt?", "/a.txt?q=/../../etc/passwd",
                                    "/a.txt?x=%ZZ"])
def test_query_string_ignored(server, target):
    resp = server.get(target)
    assert (resp.status, resp.body) == (200, A_TXT)


def test_dot_segments_and_double_slashes_resolved(server):
    assert server.get("/sub/../a.txt").body == A_TXT
    assert server.get("/./a.txt").body == A_TXT
    assert server.get("//a.txt").body == A_TXT


@pytest.mark.parametrize("target", [
    "/../etc/passwd",
    "/../../../../../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
    "/a/..%2f..%2f..%2fetc/passwd",
    "/sub/..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/..%5c..%5c..%5cetc/passwd",
    "/%252e%252e/%252e%252e/etc/passwd",
    "/sub/../../../../../../etc/passwd",
])
def test_traversal_never_serves_outside_files(server, target):
    resp = server.get(target)
    assert resp.status in (400, 404), f"{target}: {resp.status}"
    assert b"root:" not in resp.body


def test_traversal_to_known_outside_file(server, docroot):
    """The exact relative path to a file next to the root is refused too."""
    for target in ("/../outside/secret.txt", "/%2e%2e/outside/secret.txt",
                   "/sub/..%2f..%2foutside/secret.txt"):
        resp = server.get(target)
        assert resp.status in (400, 404), target
        assert OUTSIDE_SECRET not in resp.body


@pytest.mark.parametrize("target", ["/%00", "/a.txt%00.html", "/%zz", "/%4"])
def test_bad_percent_encoding_or_nul_400(server, target):
    resp = server.get(target)
    assert resp.status == 400, f"{target}: {resp}"


def test_directory_with_slash_serves_index(server):
    resp = server.get("/sub/")
    assert resp.status == 200
    assert resp.body == SUB_INDEX
    assert resp.header("Content-Type") == "text/html; charset=utf-8"


def test_directory_without_slash_redirects(server):
    resp = server.get("/sub")
    assert resp.status == 301
    assert resp.header("Location") == "/sub/"
    assert resp.header("Content-Length") == str(len(resp.body))


def test_directory_redirect_never_points_off_site(server):
    """"//sub" must not become a protocol-relative Location ("//sub/" = host sub)."""
    with server.connect() as c:
        c.send(b"GET //sub HTTP/1.1\r\nHost: t\r\n\r\n")
        resp = c.read_response()
    assert resp.status == 301
    assert resp.header("Location") == "/sub/", resp.header("Location")


def test_directory_redirect_preserves_query(server):
    resp = server.get("/sub?x=1&y=2")
    assert resp.status == 301
    assert resp.header("Location") == "/sub/?x=1&y=2"


def test_directory_redirect_of_encoded_name(server, docroot):
    (docroot.path / "dir with space").mkdir(exist_ok=True)
    (docroot.path / "dir with space" / "index.html").write_bytes(b"spaced")
    resp = server.get("/dir%20with%20space")
    assert resp.status == 301
    loc = resp.header("Location")
    assert loc == "/dir%20with%20space/", loc
    assert server.get(loc).body == b"spaced"


def test_directory_redirect_preserves_long_query(server):
    """A legal ~2 KB request line (limit 8192) gets its 301 with the whole query."""
    query = "q=" + "x" * 2000
    resp = server.get("/sub?" + query)
    assert resp.status == 301, f"expected 301, got {resp.status}"
    assert resp.header("Location") == "/sub/?" + query


def test_directory_without_index_403(server):
    assert server.get("/emptydir/").status == 403


def test_custom_index_name(servers, docroot):
    (docroot.path / "sub" / "home.htm").write_bytes(b"custom index")
    srv = servers(index="home.htm")
    resp = srv.get("/sub/")
    assert (resp.status, resp.body) == (200, b"custom index")


@pytest.mark.parametrize("target", ["/.secret", "/.git/config", "/.git/", "/sub/../.secret",
                                    "/%2esecret", "/.git%2fconfig"])
def test_dotfiles_hidden_by_default(server, target):
    resp = server.get(target)
    assert resp.status == 404, f"{target}: {resp.status}"
    assert SECRET not in resp.body and GIT_CONFIG not in resp.body


def test_dotfiles_on_serves_them(servers):
    srv = servers(dotfiles="on")
    assert srv.get("/.secret").body == SECRET
    assert srv.get("/.git/config").body == GIT_CONFIG


def test_symlink_escaping_root_403(server):
    resp = server.get("/link_out.txt")
    assert resp.status == 403
    assert OUTSIDE_SECRET not in resp.body


def test_symlinked_directory_escaping_root_refused(server):
    resp = server.get("/linkdir_out/secret.txt")
    assert resp.status in (403, 404)
    assert OUTSIDE_SECRET not in resp.body


def test_symlink_inside_root_200(server):
    resp = server.get("/link_in.txt")
    assert (resp.status, resp.body) == (200, A_TXT)


def test_symlinks_all_follows_outside(servers):
    # Landlock (on by default) confines reads to the root whatever the walk
    # allows: following links out of it needs it off (test_privileges.py)
    srv = servers(symlinks="all", landlock="off")
    assert srv.get("/link_out.txt").body == OUTSIDE_SECRET


def test_symlinks_off_refuses_every_symlink(servers):
    srv = servers(symlinks="off")
    for target in ("/link_in.txt", "/link_out.txt"):
        resp = srv.get(target)
        assert resp.status in (403, 404), target
        assert OUTSIDE_SECRET not in resp.body and A_TXT not in resp.body
    assert srv.get("/a.txt").body == A_TXT


def test_fifo_in_root_is_refused_without_hanging(server, docroot):
    """A non-regular file must not be opened for reading (open() on a FIFO blocks)."""
    fifo = docroot.path / "pipe.txt"
    if not fifo.exists():
        os.mkfifo(fifo)
    resp = server.get("/pipe.txt", timeout=3)
    assert resp.status in (403, 404), resp
    assert server.get("/a.txt", timeout=3).body == A_TXT


def test_symlink_loop_refused(server, docroot):
    loop = docroot.path / "loop.txt"
    if not os.path.lexists(loop):
        os.symlink("loop.txt", loop)
    resp = server.get("/loop.txt")
    assert resp.status in (403, 404), resp


def test_overlong_name_component(server):
    resp = server.get("/" + "n" * 300 + ".txt")
    assert resp.status in (404, 414), resp


def test_deep_nonexistent_path(server):
    resp = server.get("/" + "d/" * 1000 + "x.txt")
    assert resp.status in (404, 414), resp


def test_missing_file_404(server):
    assert server.get("/no/such/file.txt").status == 404


def test_file_used_as_directory_404(server):
    assert server.get("/a.txt/").status == 404
    assert server.get("/a.txt/more").status == 404


# --------------------------------------------------------------------------
# Error pages
# --------------------------------------------------------------------------

def test_custom_404_page(server):
    resp = server.get("/missing.html")
    assert resp.status == 404
    assert resp.body == ERROR_404
    assert resp.header("Content-Type") == "text/html; charset=utf-8"
    assert resp.header("Content-Length") == str(len(ERROR_404))


def test_custom_404_page_not_sent_for_head(server):
    with server.connect() as c:
        c.send(util.build_request("HEAD", "/missing.html"))
        resp = c.read_response("HEAD")
        c.send(util.build_request("GET", "/a.txt"))
        assert c.read_response().body == A_TXT
    assert resp.status == 404
    assert resp.header("Content-Length") == str(len(ERROR_404))


def test_builtin_404_page(servers, plain_docroot):
    srv = servers(root=plain_docroot.path)
    resp = srv.get("/missing.html")
    assert resp.status == 404
    assert (resp.header("Content-Type") or "").startswith("text/html")
    assert b"404" in resp.body
    assert resp.header("Content-Length") == str(len(resp.body))


@pytest.mark.parametrize("target,status", [("/emptydir/", 403), ("/%00", 400)])
def test_builtin_error_pages_mention_status(server, target, status):
    resp = server.get(target)
    assert resp.status == status
    assert (resp.header("Content-Type") or "").startswith("text/html")
    assert str(status).encode() in resp.body


def test_builtin_405_page(server):
    resp = server.request("DELETE", "/a.txt")
    assert resp.status == 405
    assert b"405" in resp.body
