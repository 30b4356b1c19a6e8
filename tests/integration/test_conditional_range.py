"""Conditional requests (RFC 9110 13) and byte ranges (RFC 9110 14)."""
from __future__ import annotations

import os
import time

import pytest

import util
from conftest import A_TXT, RANGE_DATA, RANGE_MTIME

# Answers decided in the core: one model (conftest.py, `semantics`), except
# a range of the 5 MB file, sent by the model's sendfile (`per_model`).
pytestmark = pytest.mark.semantics

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


# If-Match and If-Unmodified-Since, in the order of RFC 9110 13.2.2.

def assert_412(resp):
    assert resp.status == 412, resp
    assert resp.header("Content-Length") == str(len(resp.body))
    assert resp.header("Content-Range") is None


def test_if_match_current_etag_200(server, meta):
    resp = get(server, [("If-Match", meta["etag"])])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_match_star_200(server, meta):
    resp = get(server, [("If-Match", "*")])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_match_list_containing_etag_200(server, meta):
    resp = get(server, [("If-Match", f'"nope", {meta["etag"]}')])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_match_other_etag_412(server, meta):
    assert_412(get(server, [("If-Match", '"some-other-tag"')]))


def test_if_match_weak_etag_412(server, meta):
    """If-Match uses the strong comparison: W/ never matches (RFC 9110 13.1.1)."""
    assert_412(get(server, [("If-Match", "W/" + meta["etag"])]))


def test_head_if_match_other_etag_412(server, meta):
    resp = get(server, [("If-Match", '"x"')], method="HEAD")
    assert resp.status == 412 and resp.body == b""


def test_if_unmodified_since_older_412(server, meta):
    assert_412(get(server, [("If-Unmodified-Since", OLD_DATE)]))


@pytest.mark.parametrize("when", ["lm", "Fri, 01 Jan 2100 00:00:00 GMT", "not a date"])
def test_if_unmodified_since_not_failing_200(server, meta, when):
    resp = get(server, [("If-Unmodified-Since", meta["lm"] if when == "lm" else when)])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_unmodified_since_twice_ignored(server, meta):
    """Two fields make a list of dates, which is not a valid date (RFC 9110
    13.1.4): ignored, even though the first alone would fail."""
    resp = get(server, [("If-Unmodified-Since", OLD_DATE), ("If-Unmodified-Since", meta["lm"])])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_match_wins_over_if_unmodified_since(server, meta):
    """Step 2 only without If-Match: a matching If-Match makes a failing
    If-Unmodified-Since irrelevant."""
    resp = get(server, [("If-Match", meta["etag"]), ("If-Unmodified-Since", OLD_DATE)])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_if_match_failing_beats_if_none_match_304(server, meta):
    assert_412(get(server, [("If-Match", '"x"'), ("If-None-Match", meta["etag"])]))


def test_if_unmodified_since_failing_beats_if_modified_since_304(server, meta):
    assert_412(get(server, [("If-Unmodified-Since", OLD_DATE), ("If-Modified-Since", meta["lm"])]))


def test_if_match_passing_then_if_none_match_304(server, meta):
    assert_304(get(server, [("If-Match", meta["etag"]), ("If-None-Match", meta["etag"])]),
               meta["etag"])


def test_if_match_failing_beats_range(server, meta):
    assert_412(get(server, [("If-Match", '"x"'), ("Range", "bytes=0-9")]))


def test_if_match_passing_with_range_206(server, meta):
    assert_206(get(server, [("If-Match", meta["etag"]), ("Range", "bytes=0-9")]), 0, 9)


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


# bytes=-1 (a non-zero suffix) is satisfiable even on an empty file (RFC 9110
# 14.1.1): test_suffix_range_on_empty_file_is_not_416.
@pytest.mark.parametrize("spec", ["bytes=0-0", "bytes=0-"])
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


# A file long enough that ranges can lie further apart than a multipart part
# head costs (below that they are merged, see the amplification tests).
MULTI_DATA = bytes((i * 7 + i // 251) % 256 for i in range(8192))
MULTI_LEN = len(MULTI_DATA)


@pytest.fixture
def multi(docroot):
    """/multi.bin: MULTI_DATA, written into the shared root on first use."""
    p = docroot.path / "multi.bin"
    if not p.exists():
        p.write_bytes(MULTI_DATA)
        os.utime(p, (RANGE_MTIME, RANGE_MTIME))
    return "/multi.bin"


def check_multipart(resp, ranges, data=RANGE_DATA, ctype_of_part=None):
    size = len(data)
    assert resp.status == 206, resp
    assert resp.header("Content-Range") is None, "multipart response has a top-level Content-Range"
    ctype = resp.header("Content-Type")
    assert ctype and ctype.startswith("multipart/byteranges"), ctype
    assert resp.header("Content-Length") == str(len(resp.body))
    parts = util.parse_multipart_byteranges(ctype, resp.body)
    assert len(parts) == len(ranges), f"expected {len(ranges)} parts, got {len(parts)}"
    for (hdrs, part), (first, last) in zip(parts, ranges):
        assert hdrs.get("content-range") == f"bytes {first}-{last}/{size}", hdrs
        assert "content-type" in hdrs
        if ctype_of_part is not None:
            assert hdrs["content-type"] == ctype_of_part
        assert part == data[first:last + 1]


def assert_single_206(resp, first, last, data):
    assert resp.status == 206, resp
    assert resp.header("Content-Range") == f"bytes {first}-{last}/{len(data)}"
    assert resp.header("Content-Length") == str(last - first + 1)
    assert resp.body == data[first:last + 1]


def test_two_ranges_multipart(server, multi):
    check_multipart(get(server, [("Range", "bytes=0-9,2000-2009")], target=multi),
                    [(0, 9), (2000, 2009)], MULTI_DATA)


def test_three_ranges_with_suffix_multipart(server, multi):
    check_multipart(get(server, [("Range", "bytes=0-0, 3000-3009, -4")], target=multi),
                    [(0, 0), (3000, 3009), (MULTI_LEN - 4, MULTI_LEN - 1)], MULTI_DATA)


def test_multipart_with_one_unsatisfiable_range_dropped(server):
    resp = get(server, [("Range", f"bytes=0-4,{LEN + 10}-{LEN + 20}")])
    # one satisfiable range remains: either a single-part 206 or a 1-part multipart
    assert resp.status == 206
    if (resp.header("Content-Type") or "").startswith("multipart/byteranges"):
        check_multipart(resp, [(0, 4)])
    else:
        assert_206(resp, 0, 4)


def test_max_ranges_exactly_is_honoured(server, multi):
    ranges = [(i * 500, i * 500 + 1) for i in range(16)]
    spec = "bytes=" + ",".join(f"{a}-{b}" for a, b in ranges)
    check_multipart(get(server, [("Range", spec)], target=multi), ranges, MULTI_DATA)


def test_more_than_max_ranges_full_200(server):
    spec = "bytes=" + ",".join(f"{i * 4}-{i * 4 + 1}" for i in range(17))
    resp = get(server, [("Range", spec)])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


def test_max_ranges_configurable(servers, multi):
    srv = servers(max_ranges=2)
    resp = get(srv, [("Range", "bytes=0-1,4000-4001,6000-6001")], target=multi)
    assert (resp.status, resp.body) == (200, MULTI_DATA)
    check_multipart(get(srv, [("Range", "bytes=0-1,4000-4001")], target=multi),
                    [(0, 1), (4000, 4001)], MULTI_DATA)


# Range amplification: overlapping, adjacent and nearly adjacent
# ranges are merged, and a set adding up to more than the file gets it once.

def test_overlapping_ranges_merged_into_one(server, multi):
    assert_single_206(get(server, [("Range", "bytes=0-999,500-1499")], target=multi),
                      0, 1499, MULTI_DATA)


def test_adjacent_ranges_merged_into_one(server, multi):
    assert_single_206(get(server, [("Range", "bytes=100-199,200-299")], target=multi),
                      100, 299, MULTI_DATA)


def test_contained_range_merged(server, multi):
    assert_single_206(get(server, [("Range", "bytes=100-999,200-299")], target=multi),
                      100, 999, MULTI_DATA)


def test_out_of_order_ranges_keep_request_order(server, multi):
    """RFC 9110 15.3.7.2: parts SHOULD come in the order of their range-specs
    (nginx does so); they were sorted by offset."""
    check_multipart(get(server, [("Range", "bytes=5000-5009,0-9,2500-2509")], target=multi),
                    [(5000, 5009), (0, 9), (2500, 2509)], MULTI_DATA)


def test_overlapping_and_distant_ranges(server, multi):
    """A merged part stands where its earliest spec did."""
    check_multipart(get(server, [("Range", "bytes=6000-6099,0-99,50-149,6050-6199")], target=multi),
                    [(6000, 6199), (0, 149)], MULTI_DATA)


@pytest.mark.parametrize("spec", ["bytes=0-,0-", "bytes=" + ",".join(["0-"] * 16),
                                  "bytes=" + ",".join(["-8192"] * 16),
                                  "bytes=0-5000,3000-"])
def test_ranges_adding_up_to_more_than_file_200(server, multi, spec):
    """nginx's rule: ranges whose lengths add up to more than the file get
    the whole file once (200), never max_ranges copies of it."""
    resp = get(server, [("Range", spec)], target=multi)
    assert (resp.status, resp.body) == (200, MULTI_DATA), f"{spec!r}: {resp}"
    assert resp.header("Content-Range") is None


def test_many_small_ranges_with_tiny_gaps_merged(server, multi):
    """16 one-byte ranges two bytes apart: as parts, their heads would be
    ~60x the data (an amplification of its own); merged, the response is
    one range no longer than the span they cover."""
    ranges = [(i * 3, i * 3) for i in range(16)]
    spec = "bytes=" + ",".join(f"{a}-{b}" for a, b in ranges)
    resp = get(server, [("Range", spec)], target=multi)
    assert_single_206(resp, 0, 45, MULTI_DATA)


def test_multipart_response_bounded_by_covered_span(server, multi):
    """Ranges 40 bytes apart, closer than a part head costs, are merged
    rather than each given a head: the body stays within the span they
    cover plus one head, not 16 heads for 16 bytes."""
    ranges = [(i * 41, i * 41) for i in range(16)]
    spec = "bytes=" + ",".join(f"{a}-{b}" for a, b in ranges)
    resp = get(server, [("Range", spec)], target=multi)
    span = ranges[-1][1] - ranges[0][0] + 1
    assert resp.status == 206
    assert len(resp.body) <= span + 256, \
        f"{len(resp.body)} bytes sent for {len(ranges)} bytes asked, spread over {span}"


# Multipart with the longest types in the MIME table: part heads
# sized from the real type, not a fixed guess.
LONG_TYPES = {
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
LONG_DATA = bytes(range(256)) * (12_000_000 // 256)


@pytest.mark.parametrize("ext", sorted(LONG_TYPES))
def test_multipart_long_mime_type(servers, docroot, ext):
    """Many parts with 8-digit offsets: each part head is longer than the
    old fixed 160-byte guess (which answered 500)."""
    srv = servers(max_ranges=100)
    p = docroot.path / f"long.{ext}"
    if not p.exists():
        p.write_bytes(LONG_DATA)
    ranges = [(10_000_000 + i * 10_000, 10_000_000 + i * 10_000 + 9) for i in range(100)]
    spec = "bytes=" + ",".join(f"{a}-{b}" for a, b in ranges)
    resp = get(srv, [("Range", spec)], target=f"/long.{ext}")
    check_multipart(resp, ranges, LONG_DATA, ctype_of_part=LONG_TYPES[ext])


@pytest.mark.parametrize("ext", sorted(LONG_TYPES))
def test_multipart_long_mime_type_head(server, docroot, ext):
    p = docroot.path / f"long.{ext}"
    if not p.exists():
        p.write_bytes(LONG_DATA)
    resp = get(server, [("Range", "bytes=0-9,11000000-11000009")], method="HEAD",
               target=f"/long.{ext}")
    assert resp.status == 206, resp
    assert resp.header("Content-Type").startswith("multipart/byteranges")


def test_head_with_range_206_no_body(server):
    resp = get(server, [("Range", "bytes=0-9")], method="HEAD")
    assert resp.status == 206
    assert resp.header("Content-Range") == f"bytes 0-9/{LEN}"
    assert resp.header("Content-Length") == "10"
    assert resp.body == b""


@pytest.mark.per_model
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


# --------------------------------------------------------------------------
# Review findings (each failed before its fix)
# --------------------------------------------------------------------------

def test_if_match_on_two_field_lines_is_one_list(server, meta):
    """RFC 9110 5.3: field lines of a list field combine into one list. The
    current tag on the second line makes If-Match true (was 412: only the
    first line was read)."""
    resp = get(server, [("If-Match", '"nope"'), ("If-Match", meta["etag"])])
    assert (resp.status, resp.body) == (200, RANGE_DATA)
    resp = get(server, [("If-Match", '"nope"'), ("X-Between", meta["etag"]), ("If-Match", '"no2"')])
    assert_412(resp)


def test_if_none_match_on_two_field_lines_is_one_list(server, meta):
    assert_304(get(server, [("If-None-Match", '"nope"'), ("If-None-Match", meta["etag"])]),
               meta["etag"])
    resp = get(server, [("If-None-Match", '"nope"'), ("X-Between", meta["etag"]),
                        ("If-None-Match", '"no2"')])
    assert (resp.status, resp.body) == (200, RANGE_DATA)


@pytest.mark.parametrize("value", ["*junk", '*"x"', "**"])
def test_if_match_star_glued_to_junk_is_not_star(server, meta, value):
    """Only a lone "*" means any representation (RFC 9110 13.1.1); "*junk"
    matched before, so a broken precondition let the request through."""
    assert_412(get(server, [("If-Match", value)]))


def test_suffix_range_on_empty_file_is_not_416(server):
    """RFC 9110 14.1.1: on a zero-length representation a suffix-range with a
    non-zero length is satisfiable, so 416 is wrong; nothing can be sent as
    206 either: the whole (empty) representation, 200. nginx does the same."""
    for method in ("GET", "HEAD"):
        resp = get(server, [("Range", "bytes=-1")], method=method, target="/empty.txt")
        assert resp.status == 200, resp
        assert resp.header("Content-Length") == "0" and resp.body == b""
        assert resp.header("Content-Range") is None


def _reference_pieces(specs, size):
    """RFC 9110 14.1.1: the satisfiable (first, last) of each spec, clamped."""
    pieces = []
    for spec in specs:
        if spec.startswith("-"):
            n = int(spec[1:])
            if n > 0 and size > 0:
                pieces.append((max(0, size - n), size - 1))
        else:
            a, _, b = spec.partition("-")
            if int(a) < size:
                pieces.append((int(a), min(int(b), size - 1) if b else size - 1))
    return pieces


def test_random_range_sets_against_a_reference(server, multi, docroot):
    """Seeded random range sets (overlapping, past EOF, suffixes, unsorted)
    on one keep-alive connection, GET and HEAD, from memory and by sendfile:
    the status agrees with RFC 9110 14.1.1, Content-Length is exactly the body,
    multipart bodies parse with Python's email package without defects, and
    every requested byte is in the answer, from the right offset, and parts
    are disjoint and in the order of the earliest spec in each."""
    import email
    import email.policy
    import random

    rng = random.Random(9110)
    files = {multi: MULTI_DATA, "/range.txt": RANGE_DATA, "/big.bin": docroot.files["big.bin"]}
    with server.connect() as c:
        for _ in range(60):
            target = rng.choice(list(files))
            data = files[target]
            size = len(data)
            specs = []
            for _ in range(rng.choice([1, 2, 3, 5, 16])):
                a = rng.randint(0, size + 5)
                kind = rng.random()
                specs.append(f"{a}-{rng.randint(a, a + 3000)}" if kind < .5 else f"{a}-" if kind < .65
                             else f"-{rng.randint(0, 3000)}")
            spec = "bytes=" + ",".join(specs)
            method = rng.choice(["GET", "GET", "HEAD"])
            c.send(util.build_request(method, target, [("Range", spec)]))
            resp = c.read_response(method)
            pieces = _reference_pieces(specs, size)
            where = f"{method} {target} {spec}"
            if not pieces:
                assert resp.status == 416 and resp.header("Content-Range") == f"bytes */{size}", where
                continue
            if resp.status == 200:
                assert sum(b - a + 1 for a, b in pieces) > size, f"ranges ignored: {where}"
                assert resp.header("Content-Length") == str(size), where
                assert method == "HEAD" or resp.body == data, where
                continue
            assert resp.status == 206, where
            ctype = resp.header("Content-Type")
            if method == "HEAD":
                assert resp.body == b"" and int(resp.header("Content-Length")) > 0, where
                continue
            assert resp.header("Content-Length") == str(len(resp.body)), where
            covered = []
            if ctype.startswith("multipart/byteranges"):
                msg = email.message_from_bytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + resp.body,
                                               policy=email.policy.HTTP)
                assert msg.is_multipart() and not msg.defects, (where, msg.defects)
                for part in msg.iter_parts():
                    unit, _, rest = part["Content-Range"].partition(" ")
                    span, _, total = rest.partition("/")
                    a, b = map(int, span.split("-"))
                    assert (unit, int(total)) == ("bytes", size), where
                    assert part.get_payload(decode=True) == data[a:b + 1], where
                    assert all(b < x or y < a for x, y in covered), f"parts overlap: {where}"
                    covered.append((a, b))
                assert len(covered) >= 2, where
                order = []  # the part of each asked range, in request order
                for a, b in pieces:
                    p = next(k for k, (x, y) in enumerate(covered) if x <= a and b <= y)
                    if p not in order:
                        order.append(p)
                assert order == sorted(order), f"parts not in request order: {where}"
            else:
                a, b = map(int, resp.header("Content-Range").split()[1].split("/")[0].split("-"))
                assert resp.body == data[a:b + 1], where
                covered.append((a, b))
            for a, b in pieces:
                assert any(x <= a and b <= y for x, y in covered), f"{a}-{b} missing: {where}"


DATE_FORMATS = {  # RFC 9110 5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms
    "imf": "%a, %d %b %Y %H:%M:%S GMT",
    "rfc850": "%A, %d-%b-%y %H:%M:%S GMT",
    "asctime": "%a %b {day} %H:%M:%S %Y",
}


def _date_in(fmt: str, ts: float) -> str:
    import time
    t = time.gmtime(ts)
    return time.strftime(DATE_FORMATS[fmt].replace("{day}", f"{t.tm_mday:2d}"), t)


@pytest.mark.parametrize("fmt", list(DATE_FORMATS))
def test_preconditions_accept_all_three_date_formats(server, meta, fmt):
    """If-Unmodified-Since (412 when older, else 200) and If-Modified-Since
    (304 when not newer) read every date form a recipient must accept; the
    older date falls on a one-digit day (asctime pads it with a space)."""
    assert_412(get(server, [("If-Unmodified-Since", _date_in(fmt, RANGE_MTIME - 10 * 86400))]))
    resp = get(server, [("If-Unmodified-Since", _date_in(fmt, RANGE_MTIME))])
    assert (resp.status, resp.body) == (200, RANGE_DATA)
    assert_304(get(server, [("If-Modified-Since", _date_in(fmt, RANGE_MTIME))]), meta["etag"])
    resp = get(server, [("If-Modified-Since", _date_in(fmt, RANGE_MTIME - 1))])
    assert (resp.status, resp.body) == (200, RANGE_DATA)
