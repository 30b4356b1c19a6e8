"""Malformed requests, limits, and request bodies (RFC 9112 framing)."""
from __future__ import annotations

import time

import pytest

import util
from conftest import A_TXT, INDEX_HTML

# Answers decided in the core: one model (conftest.py, `semantics`), except
# bodies, bytes split across sends, pipelining and closing (`per_model`).
pytestmark = pytest.mark.semantics


def send_raw(server, data: bytes) -> tuple[util.Response, util.Conn]:
    c = server.connect()
    c.send(data)
    return c.read_response(), c


def assert_still_serving(server):
    resp = server.get("/a.txt")
    assert (resp.status, resp.body) == (200, A_TXT), "server stopped serving after an error"


BAD_400 = {
    "missing_host_http11": b"GET /a.txt HTTP/1.1\r\n\r\n",
    "duplicate_host": b"GET /a.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "double_space_in_request_line": b"GET  /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    "missing_version": b"GET /a.txt\r\nHost: x\r\n\r\n",
    "lowercase_version": b"GET /a.txt http/1.1\r\nHost: x\r\n\r\n",
    "garbage_version": b"GET /a.txt HTTP/1.x\r\nHost: x\r\n\r\n",
    "trailing_space_in_request_line": b"GET /a.txt HTTP/1.1 \r\nHost: x\r\n\r\n",
    "header_without_colon": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nFoo bar\r\n\r\n",
    "whitespace_before_colon": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Foo : bar\r\n\r\n",
    "empty_header_name": b"GET /a.txt HTTP/1.1\r\nHost: x\r\n: bar\r\n\r\n",
    "obs_fold": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Foo: a\r\n  folded\r\n\r\n",
    "bare_cr_in_header": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Foo: a\rb\r\n\r\n",
    "bare_cr_in_request_line": b"GET /a.txt\rX HTTP/1.1\r\nHost: x\r\n\r\n",
    "content_length_and_transfer_encoding":
        b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "duplicate_content_length":
        b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
    "content_length_abc": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    "content_length_negative": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "content_length_list": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1,1\r\n\r\n",
    "content_length_plus": b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
    "transfer_encoding_in_http10":
        b"GET /a.txt HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "target_not_origin_form": b"GET a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(BAD_400))
def test_malformed_request_400_and_close(server, name):
    resp, c = send_raw(server, BAD_400[name])
    with c:
        assert resp.status == 400, f"{name}: expected 400, got {resp.status}"
        assert resp.header("Content-Length") is not None
        assert resp.header("Date") and resp.header("Server")
        assert c.wait_closed(2), f"{name}: connection not closed after 400"
    assert_still_serving(server)


@pytest.mark.per_model
def test_400_after_good_request_on_same_connection(server):
    """An error on the second request still answers the first one."""
    with server.connect() as c:
        c.send(util.build_request("GET", "/a.txt") + b"GET /a.txt HTTP/1.1\r\n\r\n")
        assert c.read_response().body == A_TXT
        assert c.read_response().status == 400
        assert c.wait_closed(2)


@pytest.mark.parametrize("version", ["HTTP/2.0", "HTTP/3.0", "HTTP/0.9"])
def test_unsupported_major_version_505(server, version):
    resp, c = send_raw(server, f"GET /a.txt {version}\r\nHost: x\r\n\r\n".encode())
    c.close()
    assert resp.status == 505
    assert_still_serving(server)


def test_request_line_too_long_414(server):
    target = "/" + "a" * 9000
    resp, c = send_raw(server, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    c.close()
    assert resp.status == 414
    assert_still_serving(server)


def test_request_line_at_limit_is_not_414(server):
    # "GET " + target + " HTTP/1.1" == 8192 bytes exactly; the query is ignored
    target = "/a.txt?" + "b" * (8192 - len("GET /a.txt? HTTP/1.1"))
    line = f"GET {target} HTTP/1.1"
    assert len(line) == 8192
    resp, c = send_raw(server, f"{line}\r\nHost: x\r\n\r\n".encode())
    c.close()
    assert (resp.status, resp.body) == (200, A_TXT)


def test_content_length_overflow_rejected(server):
    resp, c = send_raw(server, b"GET /a.txt HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 99999999999999999999999\r\n\r\n")
    with c:
        # invalid framing, not a large body: 400 and close (README; the parser's
        # unit test "CL far overflow" fixes -400 too)
        assert resp.status == 400, resp
        assert c.wait_closed(2)
    assert_still_serving(server)


def test_request_line_limit_is_configurable(servers):
    srv = servers(max_request_line=100)
    resp, c = send_raw(srv, f"GET /{'c' * 120} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    c.close()
    assert resp.status == 414
    assert srv.get("/a.txt").body == A_TXT


def test_head_too_large_431(server):
    headers = "".join(f"X-Pad-{i}: {'p' * 500}\r\n" for i in range(40))  # ~20 KB, 41 fields
    resp, c = send_raw(server, f"GET /a.txt HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    c.close()
    assert resp.status == 431
    assert_still_serving(server)


def _head_of_size(total: int) -> bytes:
    base = b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Pad: "
    return base + b"p" * (total - len(base) - 4) + b"\r\n\r\n"


def test_head_exactly_max_head_accepted(server):
    h = _head_of_size(16384)
    assert len(h) == 16384
    resp, c = send_raw(server, h)
    c.close()
    assert (resp.status, resp.body) == (200, A_TXT)


def test_head_just_over_max_head_431(server):
    resp, c = send_raw(server, _head_of_size(16400))
    c.close()
    assert resp.status == 431


def test_too_many_headers_431(server):
    headers = "".join(f"X-H{i}: v\r\n" for i in range(120))
    resp, c = send_raw(server, f"GET /a.txt HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    c.close()
    assert resp.status == 431
    assert_still_serving(server)


def test_many_headers_below_limit_ok(server):
    headers = "".join(f"X-H{i}: v\r\n" for i in range(90))
    resp, c = send_raw(server, f"GET /a.txt HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    c.close()
    assert (resp.status, resp.body) == (200, A_TXT)


def test_header_limits_are_configurable(servers):
    srv = servers(max_headers=5, max_head=1024, max_request_line=512)
    few = "".join(f"X-H{i}: v\r\n" for i in range(4))
    resp, c = send_raw(srv, f"GET /a.txt HTTP/1.1\r\nHost: x\r\n{few}\r\n".encode())
    c.close()
    assert resp.status == 200
    many = "".join(f"X-H{i}: v\r\n" for i in range(8))
    resp, c = send_raw(srv, f"GET /a.txt HTTP/1.1\r\nHost: x\r\n{many}\r\n".encode())
    c.close()
    assert resp.status == 431
    big = f"X-Big: {'q' * 1200}\r\n"
    resp, c = send_raw(srv, f"GET /a.txt HTTP/1.1\r\nHost: x\r\n{big}\r\n".encode())
    c.close()
    assert resp.status == 431


def test_header_values_with_tabs_and_obs_text_accepted(server):
    resp, c = send_raw(server, b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-T: a\tb \xe9\xff\r\n"
                               b"X-Empty:\r\n\r\n")
    c.close()
    assert (resp.status, resp.body) == (200, A_TXT)


def test_header_names_case_insensitive(server):
    resp, c = send_raw(server, b"GET /a.txt HTTP/1.1\r\nhOsT: x\r\nCONNECTION: close\r\n\r\n")
    with c:
        assert (resp.status, resp.body) == (200, A_TXT)
        assert c.wait_closed(2)


# --------------------------------------------------------------------------
# Request bodies on GET/HEAD
# --------------------------------------------------------------------------

@pytest.mark.per_model
def test_get_with_content_length_body_then_pipelined(server):
    body = b"0123456789" * 100
    data = (util.build_request("GET", "/a.txt", [("Content-Length", str(len(body)))], body)
            + util.build_request("GET", "/index.html"))
    with server.connect() as c:
        c.send(data)
        r1 = c.read_response()
        r2 = c.read_response()
    assert (r1.status, r1.body) == (200, A_TXT)
    assert (r2.status, r2.body) == (200, INDEX_HTML)


@pytest.mark.per_model
def test_get_body_that_looks_like_a_request_is_not_executed(server):
    """Body bytes are skipped, not parsed: no smuggled request."""
    smuggled = util.build_request("GET", "/index.html")
    data = (util.build_request("GET", "/a.txt", [("Content-Length", str(len(smuggled)))],
                               smuggled) + util.build_request("GET", "/style.css"))
    with server.connect() as c:
        c.send(data)
        r1 = c.read_response()
        r2 = c.read_response()
        assert not c.readable_within(0.3), "a third response appeared: body was parsed"
    assert r1.body == A_TXT
    assert r2.body == b"body { color: #333; }\n"


@pytest.mark.per_model
def test_get_body_sent_later_in_pieces(server):
    body = b"x" * 5000
    head = util.build_request("GET", "/a.txt", [("Content-Length", str(len(body)))])
    with server.connect() as c:
        c.send(head)
        c.send_slowly(body, chunk=1000, pause=0.02)
        c.send(util.build_request("GET", "/index.html"))
        assert c.read_response().body == A_TXT
        assert c.read_response().body == INDEX_HTML


@pytest.mark.per_model
def test_head_with_body_then_pipelined(server):
    data = (util.build_request("HEAD", "/a.txt", [("Content-Length", "4")], b"abcd")
            + util.build_request("GET", "/a.txt"))
    with server.connect() as c:
        c.send(data)
        h = c.read_response("HEAD")
        g = c.read_response()
    assert h.status == 200 and h.header("Content-Length") == "13"
    assert g.body == A_TXT


@pytest.mark.per_model
def test_get_with_chunked_body_then_pipelined(server):
    chunked = (b"5;ext=1\r\nhello\r\n"
               b"6\r\n world\r\n"
               b"1A;name=\"quoted value\"\r\n" + b"z" * 26 + b"\r\n"
               b"0\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n")
    data = (util.build_request("GET", "/a.txt", [("Transfer-Encoding", "chunked")], chunked)
            + util.build_request("GET", "/index.html"))
    with server.connect() as c:
        c.send(data)
        r1 = c.read_response()
        r2 = c.read_response()
        assert not c.wait_closed(0.2)
    assert (r1.status, r1.body) == (200, A_TXT)
    assert (r2.status, r2.body) == (200, INDEX_HTML)


@pytest.mark.per_model
def test_chunked_body_split_across_sends(server):
    chunked = b"a\r\n0123456789\r\n3\r\nabc\r\n0\r\n\r\n"
    head = util.build_request("GET", "/a.txt", [("Transfer-Encoding", "chunked")])
    with server.connect() as c:
        c.send(head)
        c.send_slowly(chunked, chunk=2, pause=0.003)
        c.send(util.build_request("GET", "/index.html"))
        assert c.read_response().body == A_TXT
        assert c.read_response().body == INDEX_HTML


def test_malformed_chunked_body_400(server):
    data = util.build_request("GET", "/a.txt", [("Transfer-Encoding", "chunked")],
                              b"zz\r\nhello\r\n0\r\n\r\n")
    resp, c = send_raw(server, data)
    with c:
        assert resp.status == 400
        assert c.wait_closed(2)
    assert_still_serving(server)


def test_transfer_encoding_gzip_501(server):
    resp, c = send_raw(server, util.build_request(
        "GET", "/a.txt", [("Transfer-Encoding", "gzip")]))
    c.close()
    assert resp.status == 501
    assert_still_serving(server)


@pytest.mark.per_model
def test_body_over_max_body_413_and_close(server):
    head = util.build_request("GET", "/a.txt", [("Content-Length", str(1048576 + 1))])
    resp, c = send_raw(server, head)
    with c:
        assert resp.status == 413
        assert c.wait_closed(2)
    assert_still_serving(server)


@pytest.mark.per_model
def test_body_exactly_max_body_accepted(servers):
    srv = servers(max_body=1000)
    data = (util.build_request("GET", "/a.txt", [("Content-Length", "1000")], b"b" * 1000)
            + util.build_request("GET", "/index.html"))
    with srv.connect() as c:
        c.send(data)
        assert c.read_response().body == A_TXT
        assert c.read_response().body == INDEX_HTML


def test_content_length_over_configured_max_body_413(servers):
    srv = servers(max_body=1000)
    resp, c = send_raw(srv, util.build_request("GET", "/a.txt", [("Content-Length", "1001")]))
    with c:
        assert resp.status == 413
        assert c.wait_closed(2)


@pytest.mark.per_model
def test_chunked_body_over_max_body_413(servers):
    srv = servers(max_body=1000)
    chunk = b"258\r\n" + b"c" * 600 + b"\r\n"  # 0x258 = 600
    data = util.build_request("GET", "/a.txt", [("Transfer-Encoding", "chunked")],
                              chunk * 2 + b"0\r\n\r\n")
    resp, c = send_raw(srv, data)
    with c:
        assert resp.status == 413
        assert c.wait_closed(2)
    assert srv.get("/a.txt").body == A_TXT


# --------------------------------------------------------------------------
# Expect: 100-continue (RFC 9110 10.1.1)
# --------------------------------------------------------------------------

def expect_head(method="GET", target="/a.txt", body_len=5, expect="100-continue", version="HTTP/1.1",
                chunked=False):
    framing = ("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(body_len))
    return util.build_request(method, target, [framing, ("Expect", expect)], version=version)


@pytest.mark.per_model
def test_expect_100_continue_answered_before_body_then_pipelined(server):
    """The client sends the head only and waits (bounded) for 100 Continue,
    as curl does; without it the request would hang until the body deadline."""
    with server.connect() as c:
        c.send(expect_head(body_len=5))
        interim = c.read_response(timeout=util.scaled(3))
        assert (interim.status, interim.reason) == (100, "Continue"), interim
        assert interim.headers == [], "100 Continue carries no fields here"
        c.send(b"hello" + util.build_request("GET", "/index.html"))
        final = c.read_response()
        assert (final.status, final.body) == (200, A_TXT)
        nxt = c.read_response()
        assert (nxt.status, nxt.body) == (200, INDEX_HTML)


@pytest.mark.per_model
def test_expect_100_continue_chunked_body(server):
    with server.connect() as c:
        c.send(expect_head(chunked=True))
        assert c.read_response(timeout=util.scaled(3)).status == 100
        c.send(b"5\r\nhello\r\n0\r\n\r\n" + util.build_request("GET", "/index.html"))
        assert (c.read_response().body, c.read_response().body) == (A_TXT, INDEX_HTML)


@pytest.mark.per_model
def test_expect_100_continue_twice_on_one_connection(server):
    with server.connect() as c:
        for _ in range(2):
            c.send(expect_head(body_len=3))
            assert c.read_response(timeout=util.scaled(3)).status == 100
            c.send(b"abc")
            assert c.read_response().body == A_TXT


@pytest.mark.per_model
def test_expect_100_continue_with_body_already_sent(server):
    """A client that did not wait: the body is here, so the 100 may be
    omitted (RFC 9110 10.1.1); either way the final answer follows and the
    connection stays in step."""
    with server.connect() as c:
        c.send(expect_head(body_len=5) + b"hello" + util.build_request("GET", "/index.html"))
        r = c.read_response()
        if r.status == 100:
            r = c.read_response()
        assert (r.status, r.body) == (200, A_TXT)
        assert c.read_response().body == INDEX_HTML


@pytest.mark.parametrize("method,status", [("POST", 405), ("PUT", 405), ("BREW", 501)])
def test_expect_100_continue_refused_request_gets_final_status_at_once(server, method, status):
    """A request refused whatever its body is answered without waiting for
    the body, and closed (the client may or may not send it)."""
    with server.connect() as c:
        c.send(expect_head(method=method, body_len=1000))
        r = c.read_response(timeout=util.scaled(3))
        assert r.status == status, r
        assert r.header("Connection") == "close"
        if status == 405:
            assert r.header("Allow") == "GET, HEAD"
    assert_still_serving(server)


@pytest.mark.per_model
def test_expect_100_continue_too_large_413_at_once(servers):
    srv = servers(max_body=1000)
    with srv.connect() as c:
        c.send(expect_head(body_len=1001))
        r = c.read_response(timeout=util.scaled(3))
        assert r.status == 413
        assert c.wait_closed(util.scaled(2))


@pytest.mark.parametrize("expect", ["something-else", "100-continue, foo", "100-continuex"])
def test_unknown_expectation_417(server, expect):
    with server.connect() as c:
        c.send(util.build_request("GET", "/a.txt", [("Expect", expect)]))
        r = c.read_response()
        assert r.status == 417, r
        # no body was announced, so framing is intact and the connection goes on
        c.send(util.build_request("GET", "/index.html"))
        assert c.read_response().body == INDEX_HTML


@pytest.mark.per_model
def test_unknown_expectation_with_body_417_and_close(server):
    with server.connect() as c:
        c.send(expect_head(expect="fast-please", body_len=50))
        r = c.read_response(timeout=util.scaled(3))
        assert r.status == 417
        assert r.header("Connection") == "close"
    assert_still_serving(server)


def test_expect_case_insensitive(server):
    with server.connect() as c:
        c.send(expect_head(expect="100-Continue", body_len=2))
        assert c.read_response(timeout=util.scaled(3)).status == 100
        c.send(b"ok")
        assert c.read_response().body == A_TXT


@pytest.mark.parametrize("expect", ["100-continue", "something-else"])
def test_expect_ignored_from_http10_client(server, expect):
    """RFC 9110 10.1.1: a 100-continue from an HTTP/1.0 client is ignored
    (1.0 has no interim responses), and so is any other expectation."""
    with server.connect() as c:
        c.send(expect_head(version="HTTP/1.0", body_len=5, expect=expect) + b"hello")
        r = c.read_response()
        assert (r.status, r.body) == (200, A_TXT), r
        assert not c.buf.startswith(b"HTTP/1.1 100"), "interim response sent to HTTP/1.0"


@pytest.mark.per_model
def test_expect_100_continue_with_curl(server, tmp_path):
    """curl sends Expect: 100-continue for a body above 1 MiB and waits up to
    --expect100-timeout for the 100; with a 20 s wait, a server that never
    answers it shows as a slow request."""
    import shutil
    import subprocess
    import time
    curl = shutil.which("curl")
    assert curl, "curl is a test dependency"
    body = tmp_path / "body.bin"
    body.write_bytes(b"x" * 500_000)
    t0 = time.monotonic()
    r = subprocess.run([curl, "-sS", "--noproxy", "*", "-X", "GET", "--data-binary", f"@{body}",
                        "-H", "Expect: 100-continue", "--expect100-timeout", "20",
                        "-o", "-", "-w", "\n%{http_code}", f"http://127.0.0.1:{server.port}/a.txt"],
                       capture_output=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    out, code = r.stdout.rsplit(b"\n", 1)
    assert (code, out) == (b"200", A_TXT)
    assert elapsed < util.scaled(10), f"curl waited {elapsed:.1f}s: no 100 Continue"


def test_expect_on_two_field_lines_is_one_list(server):
    """RFC 9110 5.3: "Expect: 100-continue" and "Expect: foo" on two lines are
    the list "100-continue, foo", which has a member we cannot meet: 417, as
    for the one-line form (the second line was ignored, and 100 sent)."""
    with server.connect() as c:
        c.send(util.build_request("GET", "/a.txt", [("Content-Length", "3"), ("Expect", "100-continue"),
                                                   ("Expect", "fast-please")]))
        r = c.read_response(timeout=util.scaled(3))
        assert r.status == 417, r
        assert r.header("Connection") == "close"
    assert_still_serving(server)


@pytest.mark.parametrize("expect", ["", ",", "100-continue,", " , 100-continue"])
def test_expect_empty_members_are_nothing(server, expect):
    """Expect is #expectation: empty list members do not count (RFC 9110
    5.6.1), so an empty Expect is no expectation (was 417), and a trailing
    comma after 100-continue still gets the 100."""
    with server.connect() as c:
        c.send(expect_head(expect=expect, body_len=2))
        if "100-continue" in expect:
            assert c.read_response(timeout=util.scaled(3)).status == 100
        c.send(b"ok")
        r = c.read_response(timeout=util.scaled(3))
        assert (r.status, r.body) == (200, A_TXT), r
        c.send(util.build_request("GET", "/index.html"))
        assert c.read_response().body == INDEX_HTML


@pytest.mark.per_model
@pytest.mark.parametrize("framing", [[], [("Content-Length", "0")]])
def test_expect_100_continue_without_body_gets_final_response_only(server, framing):
    """No body to wait for: the final response at once, no interim 100 (RFC
    9110 10.1.1 lets a server omit it), and the connection stays in step."""
    with server.connect() as c:
        c.send(util.build_request("GET", "/a.txt", framing + [("Expect", "100-continue")])
               + util.build_request("GET", "/index.html"))
        r = c.read_response(timeout=util.scaled(3))
        assert (r.status, r.body) == (200, A_TXT), r
        assert c.read_response().body == INDEX_HTML
        assert c.buf == b"", f"stray bytes after the responses: {c.buf[:80]!r}"


@pytest.mark.per_model
def test_expect_100_continue_then_no_body_408_and_close(servers):
    """A client that gets its 100 Continue and never sends the body holds the
    connection only until the body deadline (header_timeout from the 100):
    408, close, and the server goes on serving."""
    srv = servers(header_timeout=1, keepalive_timeout=1)
    with srv.connect() as c:
        c.send(expect_head(body_len=10))
        assert c.read_response(timeout=util.scaled(3)).status == 100
        t0 = time.monotonic()
        c.send(b"abc")  # part of the body, then silence
        r = c.read_response(timeout=util.scaled(5))
        elapsed = time.monotonic() - t0
        assert r.status == 408, r
        assert r.header("Connection") == "close"
        assert elapsed <= util.scaled(3), f"408 after {elapsed:.1f}s with a 1s body deadline"
        assert c.wait_closed(util.scaled(2))
    assert_still_serving(srv)
