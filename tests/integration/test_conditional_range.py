"""Conditional requests (RFC 9110 13) and byte ranges (RFC 9110 14)."""
from __future__ import annotations

import os
import time

import pytest

import util
from conftest import A_TXT, RANGE_DATA

LEN = len(RANGE_DATA)
OLD_DATE = "Sat, 01 Jan 2000 00:00:00 GMT"


@pytest.fixture
def meta(server):
    r = server.get("/range.txt")
    assert r.status == 200 and r.body == RANGE_DATA
    return {"etag": r.header("ETag"), "lm": r.header("Last-Modified")}


def get(server, headers, method="GET", target="/range.txt"):
    """Sends on one connection, then a follow-up GET, to prove no stray body bytes."""
    with server.connect() as c:
        c.send(util.build_request(method, target, headers))
        resp = c.read_response(method)
        c.send(util.build_request("GET", "/a.txt"))
        nxt = c.read_response()
    assert (nxt.status, nxt.body) == (200, A_TXT), "connection desynchronised after response"
    return resp


# --------------------------------------------------------------------------
# Conditional
# --------------------------------------------------------------------------

def assert_304(resp, etag):
    assert resp.status == 304, resp
    assert resp.body == b""
    assert resp.header("ETag") == etag
    assert resp.header("Date") and resp.header("Server")
    assert resp.header("Content-Length") in (None, str(LEN)), \
        "a 304 must not announce a body of another length"


def test_if_none_match_current_etag_304(server, meta):
    assert_304(get(server, [("If-None-Match", meta["etag"])]), meta["etag"])


def test_if_none_match_star_304(server, meta):
    assert_304(get(server, [("If-None-Match", "*")]), meta["etag"])


def test_if_none_match_list_containing_etag_304(server, meta):
    assert_304(get(server, [("If-None-Match", f'"nope-1", {meta["etag"]} , "nope-2"')]),
               meta["etag"])


def test_if_none_match_weak_form_of_etag_304(server, meta):
    """If-None-Match uses the weak comparison (RFC 9110 13.1.2)."""
    assert_304(get(server, [("If-None-Match", "W/" + meta["etag"])]), meta["etag"])


def test_if_none_match_other_etag_200(server, meta):
    resp = get(server, [("If-None-Match", '"some-other-tag"')])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_head_if_none_match_304(server, meta):
    assert_304(get(server, [("If-None-Match", meta["etag"])], method="HEAD"), meta["etag"])


def test_if_modified_since_equal_304(server, meta):
    assert_304(get(server, [("If-Modified-Since", meta["lm"])]), meta["etag"])


def test_if_modified_since_future_304(server, meta):
    assert_304(get(server, [("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT")]),
               meta["etag"])


def test_if_modified_since_rfc850_date_304(server, meta):
    ts = util.parse_http_date(meta["lm"])
    import time
    rfc850 = time.strftime("%A, %d-%b-%y %H:%M:%S GMT", time.gmtime(ts))
    assert_304(get(server, [("If-Modified-Since", rfc850)]), meta["etag"])


def test_if_modified_since_older_200(server, meta):
    resp = get(server, [("If-Modified-Since", OLD_DATE)])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_modified_since_invalid_date_ignored(server, meta):
    resp = get(server, [("If-Modified-Since", "not a date")])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_none_match_takes_precedence_over_if_modified_since(server, meta):
    resp = get(server, [("If-None-Match", '"other"'), ("If-Modified-Since", meta["lm"])])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_conditional_via_httpx(server, meta):
    import httpx
    with httpx.Client(base_url=server.base_url, trust_env=False, timeout=10) as c:
        r = c.get("/range.txt", headers={"If-None-Match": meta["etag"]})
        assert r.status_code == 304 and r.content == b""
        r = c.get("/range.txt", headers={"If-None-Match": '"x"'})
        assert r.status_code == 200 and r.content == RANGE_DATA


# --------------------------------------------------------------------------
# Range
# --------------------------------------------------------------------------

def assert_206(resp, first, last):
    assert resp.status == 206, resp
    assert resp.header("Content-Range") == f"bytes {first}-{last}/{LEN}"
    assert resp.header("Content-Length") == str(last - first + 1)
    assert resp.body == RANGE_DATA[first:last + 1]


def test_range_first_ten_bytes(server):
    assert_206(get(server, [("Range", "bytes=0-9")]), 0, 9)


def test_range_middle(server):
    assert_206(get(server, [("Range", "bytes=50-60")]), 50, 60)


def test_range_single_last_byte(server):
    assert_206(get(server, [("Range", f"bytes={LEN - 1}-{LEN - 1}")]), LEN - 1, LEN - 1)


def test_range_suffix(server):
    assert_206(get(server, [("Range", "bytes=-5")]), LEN - 5, LEN - 1)


def test_range_suffix_longer_than_file(server):
    assert_206(get(server, [("Range", f"bytes=-{LEN * 10}")]), 0, LEN - 1)


def test_range_open_ended(server):
    assert_206(get(server, [("Range", "bytes=10-")]), 10, LEN - 1)


def test_range_last_beyond_end_is_clamped(server):
    assert_206(get(server, [("Range", f"bytes=100-{LEN + 1000}")]), 100, LEN - 1)


@pytest.mark.parametrize("spec", [f"bytes={LEN}-", f"bytes={LEN + 5}-{LEN + 10}", "bytes=-0"])
def test_range_unsatisfiable_416(server, spec):
    resp = get(server, [("Range", spec)])
    assert resp.status == 416, resp
    assert resp.header("Content-Range") == f"bytes */{LEN}"
    assert resp.header("Content-Length") == str(len(resp.body))


@pytest.mark.parametrize("spec", ["bytes=0-0", "bytes=0-", "bytes=-1"])
def test_range_on_empty_file_416(server, spec):
    """RFC 9110 14.1.1/15.5.17: no byte range overlaps a 0-length
    representation, so every one is unsatisfiable (nginx answers 416 too)."""
    resp = get(server, [("Range", spec)], target="/empty.txt")
    assert resp.status == 416, resp
    assert resp.header("Content-Range") == "bytes */0"


@pytest.mark.parametrize("spec", ["bytes=5-2", "items=0-1", "bytes=abc", "bytes=", "bytes=--1",
                                  "bytes=1-2-3", "bytes 0-1", "bytes=0-1,,abc"])
def test_range_invalid_syntax_ignored(server, spec):
    resp = get(server, [("Range", spec)])
    assert resp.status == 200, f"{spec!r}: {resp}"
    assert resp.body == RANGE_DATA
    assert resp.header("Content-Range") is None


def test_range_huge_numbers_no_overflow(server):
    """A position that does not fit 64 bits makes the header invalid for us
    (range.c, and tests/unit/test_range.c: RANGE_IGNORE), and RFC 9110 14.2
    lets a server ignore an invalid Range: the whole file, 200."""
    resp = get(server, [("Range", "bytes=0-99999999999999999999999999")])
    assert resp.status == 200, resp
    assert resp.header("Content-Range") is None
    assert resp.body == RANGE_DATA


def test_if_range_current_etag_206(server, meta):
    assert_206(get(server, [("Range", "bytes=0-9"), ("If-Range", meta["etag"])]), 0, 9)


def test_if_range_current_date_206(server, meta):
    assert_206(get(server, [("Range", "bytes=0-9"), ("If-Range", meta["lm"])]), 0, 9)


def test_if_range_old_etag_full_200(server):
    resp = get(server, [("Range", "bytes=0-9"), ("If-Range", '"an-old-etag"')])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_range_old_date_full_200(server):
    resp = get(server, [("Range", "bytes=0-9"), ("If-Range", OLD_DATE)])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_range_date_of_just_modified_file_is_weak_200(server, docroot):
    """RFC 9110 13.1.5: an If-Range date that is not a strong validator (a
    modification time not at least a second before now, 8.8.2.2) makes the
    condition false: full 200. The file's mtime is an hour ahead, so no second
    boundary crossed between the two requests can make it strong."""
    target = f"/future-{server.model}-{server.port}.txt"
    path = docroot.path / target[1:]
    path.write_bytes(RANGE_DATA)
    future = int(time.time()) + 3600
    os.utime(path, (future, future))
    lm = server.get(target).header("Last-Modified")
    assert lm == util.http_date(future), lm
    resp = get(server, [("Range", "bytes=0-9"), ("If-Range", lm)], target=target)
    assert (resp.status, resp.body) == (200, RANGE_DATA), \
        f"weak Last-Modified accepted as If-Range validator: {resp.status}"


def test_if_range_weak_etag_full_200(server, meta):
    """If-Range requires a strong match (RFC 9110 13.1.5)."""
    resp = get(server, [("Range", "bytes=0-9"), ("If-Range", "W/" + meta["etag"])])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def check_multipart(resp, ranges):
    assert resp.status == 206, resp
    assert resp.header("Content-Range") is None, "multipart response has a top-level Content-Range"
    ctype = resp.header("Content-Type")
    assert ctype and ctype.startswith("multipart/byteranges"), ctype
    assert resp.header("Content-Length") == str(len(resp.body))
    parts = util.parse_multipart_byteranges(ctype, resp.body)
    assert len(parts) == len(ranges), f"expected {len(ranges)} parts, got {len(parts)}"
    for (hdrs, data), (first, last) in zip(parts, ranges):
        assert hdrs.get("content-range") == f"bytes {first}-{last}/{LEN}", hdrs
        assert "content-type" in hdrs
        assert data == RANGE_DATA[first:last + 1]


def test_two_ranges_multipart(server):
    check_multipart(get(server, [("Range", "bytes=0-9,20-29")]), [(0, 9), (20, 29)])


def test_three_ranges_with_suffix_multipart(server):
    check_multipart(get(server, [("Range", "bytes=0-0, 60-69, -4")]),
                    [(0, 0), (60, 69), (LEN - 4, LEN - 1)])


def test_multipart_with_one_unsatisfiable_range_dropped(server):
    resp = get(server, [("Range", f"bytes=0-4,{LEN + 10}-{LEN + 20}")])
    # one satisfiable range remains: either a single-part 206 or a 1-part multipart
    assert resp.status == 206
    if (resp.header("Content-Type") or "").startswith("multipart/byteranges"):
        check_multipart(resp, [(0, 4)])
    else:
        assert_206(resp, 0, 4)


def test_max_ranges_exactly_is_honoured(server):
    ranges = [(i * 4, i * 4 + 1) for i in range(16)]
    spec = "bytes=" + ",".join(f"{a}-{b}" for a, b in ranges)
    check_multipart(get(server, [("Range", spec)]), ranges)


def test_more_than_max_ranges_full_200(server):
    spec = "bytes=" + ",".join(f"{i * 4}-{i * 4 + 1}" for i in range(17))
    resp = get(server, [("Range", spec)])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_max_ranges_configurable(servers):
    srv = servers(max_ranges=2)
    resp = get(srv, [("Range", "bytes=0-1,4-5,8-9")])
    assert (resp.status, resp.body) == (200, RANGE_DATA)
    check_multipart(get(srv, [("Range", "bytes=0-1,4-5")]), [(0, 1), (4, 5)])


def test_head_with_range_206_no_body(server):
    resp = get(server, [("Range", "bytes=0-9")], method="HEAD")
    assert resp.status == 206
    assert resp.header("Content-Range") == f"bytes 0-9/{LEN}"
    assert resp.header("Content-Length") == "10"
    assert resp.body == b""


def test_range_on_big_file(server, docroot):
    data = docroot.files["big.bin"]
    first, last = 3_000_000, 4_200_000
    resp = get(server, [("Range", f"bytes={first}-{last}")], target="/big.bin")
    assert resp.status == 206
    assert resp.header("Content-Range") == f"bytes {first}-{last}/{len(data)}"
    assert resp.body == data[first:last + 1]


def test_range_ignored_when_not_modified(server, meta):
    """If-None-Match matching wins over Range: 304."""
    assert_304(get(server, [("If-None-Match", meta["etag"]), ("Range", "bytes=0-9")]),
               meta["etag"])


def test_range_ignored_on_error_responses(server):
    resp = get(server, [("Range", "bytes=0-1")], target="/missing.txt")
    assert resp.status == 404
