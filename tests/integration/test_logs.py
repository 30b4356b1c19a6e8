"""Access log (Combined Log Format, or JSON lines), access_log=off,
SIGUSR1 reopening."""
from __future__ import annotations

import calendar
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

import util
from conftest import A_TXT, ERROR_404

LOG_RE = re.compile(
    r'^(?P<host>127\.0\.0\.1) - - '
    r'\[(?P<day>\d{2})/(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)/(?P<year>\d{4})'
    r':(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2}) (?P<tz>[+-]\d{4})\] '
    r'"(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+|-) '
    r'"(?P<referer>[^"]*)" "(?P<ua>[^"]*)"$'
)


def log_lines(path) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read().decode("utf-8", errors="replace")
    return data.splitlines()


def wait_lines(path, n: int, timeout: float = 3.0) -> list[str]:
    util.wait_for(lambda: len(log_lines(path)) >= n, timeout)
    return log_lines(path)


def parse(line: str) -> dict:
    m = LOG_RE.match(line)
    assert m, f"not a Combined Log Format line: {line!r}"
    return m.groupdict()


def parse_any(line: str, fmt: str) -> dict:
    """The fields both formats share, as Combined Log Format strings."""
    if fmt == "combined":
        return parse(line)
    j = json.loads(line)
    return {"request": " ".join(x for x in (j["method"], j["target"], j["protocol"]) if x),
            "status": str(j["status"]), "bytes": str(j["bytes"]) if j["bytes"] else "-",
            "ua": j["user_agent"] if j["user_agent"] is not None else "-"}


JSON_KEYS = ["time", "client", "method", "target", "protocol", "status", "bytes", "duration_us",
             "queue_us", "service_us", "first_byte_us",
             "referer", "user_agent", "model", "worker"]
RFC3339_MS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def test_access_log_combined_format(fresh_server):
    srv = fresh_server()
    srv.get("/a.txt?x=1", headers=[("Referer", "http://ref.example/page"),
                                   ("User-Agent", "spindle-test/1.0")])
    srv.get("/missing.html")
    lines = wait_lines(srv.access_log, 2)
    assert len(lines) == 2, lines
    # A line is written when its response is complete, so requests on
    # different connections may be logged in either order (as in nginx).
    parsed = sorted((parse(ln) for ln in lines), key=lambda g: "missing" in g["request"])
    first, second = parsed
    assert first["request"] == "GET /a.txt?x=1 HTTP/1.1"
    assert first["status"] == "200" and first["bytes"] == str(len(A_TXT))
    assert first["referer"] == "http://ref.example/page"
    assert first["ua"] == "spindle-test/1.0"
    assert second["request"] == "GET /missing.html HTTP/1.1"
    assert second["status"] == "404" and second["bytes"] == str(len(ERROR_404))
    assert second["referer"] == "-" and second["ua"] == "-"
    # the timestamp is now (within a minute), whatever the zone
    ts = time.strptime(" ".join([f"{first['day']}/{first['mon']}/{first['year']}:"
                                 f"{first['h']}:{first['m']}:{first['s']}", first["tz"]]),
                       "%d/%b/%Y:%H:%M:%S %z")
    import calendar
    epoch = calendar.timegm(ts) - ts.tm_gmtoff
    assert abs(epoch - time.time()) < 60, f"log time {epoch} vs now {time.time()}"


def test_access_log_other_statuses(fresh_server):
    srv = fresh_server()
    srv.request("HEAD", "/a.txt")
    srv.request("DELETE", "/a.txt")
    srv.get("/range.txt", headers=[("Range", "bytes=0-9")])
    with srv.connect() as c:  # a 400 is logged too
        c.send(b"GET /a.txt HTTP/1.1\r\n\r\n")
        assert c.read_response().status == 400
    lines = wait_lines(srv.access_log, 4)
    got = [parse(ln) for ln in lines]
    # one connection each: the order of the lines is the order of completion
    assert sorted(g["status"] for g in got) == ["200", "206", "400", "405"], lines
    by_status = {g["status"]: g for g in got}
    assert by_status["200"]["request"] == "HEAD /a.txt HTTP/1.1"
    assert by_status["200"]["bytes"] in ("-", "0")
    assert by_status["206"]["bytes"] == "10"


@pytest.mark.parametrize("fmt", ["combined", "json"])
def test_access_log_concurrent_clients_exact_lines(model_name, fresh_server, fmt):
    srv = fresh_server(access_log_format=fmt)
    n_clients, per_client = 4, 25
    errors = []

    def client(ci: int):
        try:
            with srv.connect(timeout=20) as c:
                for ri in range(per_client):
                    c.send(util.build_request("GET", f"/a.txt?c={ci}&r={ri}",
                                              [("User-Agent", f"client-{ci}")]))
                    r = c.read_response(timeout=20)
                    if r.body != A_TXT:
                        errors.append(f"client {ci} request {ri}: {r}")
        except Exception as e:  # reported below
            errors.append(f"client {ci}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    total = n_clients * per_client
    lines = wait_lines(srv.access_log, total)
    assert len(lines) == total, f"{len(lines)} lines for {total} requests"
    seen = set()
    if fmt == "json" and model_name in ("fork", "thread"):
        # a process (thread) per connection: each client's lines name its own worker
        workers = {json.loads(ln)["user_agent"]: json.loads(ln)["worker"] for ln in lines}
        assert len(set(workers.values())) == n_clients, workers
    for ln in lines:
        p = parse_any(ln, fmt)
        m = re.fullmatch(r"GET /a\.txt\?c=(\d+)&r=(\d+) HTTP/1\.1", p["request"])
        assert m, ln
        assert p["ua"] == f"client-{m.group(1)}", f"fields of two requests mixed: {ln!r}"
        assert p["status"] == "200" and p["bytes"] == "13"
        seen.add((int(m.group(1)), int(m.group(2))))
    assert len(seen) == total


def test_access_log_off_writes_nothing(fresh_server):
    srv = fresh_server(access_log="off")
    for _ in range(3):
        assert srv.get("/a.txt").body == A_TXT
    time.sleep(0.3)
    assert not srv.access_log.exists() or srv.access_log.stat().st_size == 0
    assert not (srv.workdir / "off").exists(), "access_log=off created a file named 'off'"


@pytest.mark.parametrize("fmt", ["combined", "json"])
def test_sigusr1_reopens_logs(model, fresh_server, fmt):
    """README: SIGUSR1 reopens the logs in every process: once it is handled,
    no process of the instance (master, serving process, every prefork worker)
    still holds the renamed access or error log, and new lines land in the new
    files."""
    srv = (fresh_server(workers=3, access_log_format=fmt) if model == "prefork"
           else fresh_server(access_log_format=fmt))
    srv.get("/a.txt?before=1")
    assert len(wait_lines(srv.access_log, 1)) == 1
    procs = util.instance_processes(srv)
    rotated = srv.access_log.with_name("access.log.1")
    rotated_err = srv.error_log.with_name("error.log.1")
    os.rename(srv.access_log, rotated)
    os.rename(srv.error_log, rotated_err)
    assert util.open_by_instance(srv, rotated), "the server does not hold its access log open"
    srv.signal(signal.SIGUSR1)
    for old in (rotated, rotated_err):
        released = util.wait_for(lambda: not util.open_by_instance(srv, old), util.scaled(3))
        assert released, (f"{old.name} still open after SIGUSR1 in {util.open_by_instance(srv, old)} "
                         f"(instance: {procs})")
    assert util.wait_for(lambda: srv.error_log.exists(), util.scaled(3)), "no new error.log"
    # the operator sees that it happened, and where the logs now go
    assert util.wait_for(lambda: f"logs reopened ({srv.access_log}, {srv.error_log})" in srv.error_log.read_text(),
                         util.scaled(3)), srv.error_log.read_text()
    srv.assert_alive("on SIGUSR1 ")
    srv.get("/a.txt?after=1")
    new = wait_lines(srv.access_log, 1)
    assert len(new) == 1 and "after=1" in new[0], new
    old = log_lines(rotated)
    assert len(old) == 1 and "before=1" in old[0], old
    # and the new file keeps being used
    srv.get("/a.txt?later=1")
    assert len(wait_lines(srv.access_log, 2)) == 2
    for ln in log_lines(srv.access_log) + old:
        assert parse_any(ln, fmt)["status"] == "200", ln


def test_access_log_json_fields_and_escaping(model, fresh_server):
    """access_log_format = json: one JSON object per line with every field;
    quotes, backslashes, control bytes and invalid UTF-8 from the client are
    escaped (invalid bytes as U+FFFD), so each line parses."""
    srv = fresh_server(access_log_format="json")
    t0 = time.time()
    srv.get("/a.txt?x=1", headers=[("Referer", "http://ref.example/p"), ("User-Agent", "ua/1.0")])
    with srv.connect() as c:  # raw bytes a client may send in header values
        c.send(b"GET /a.txt?q=%22 HTTP/1.1\r\nHost: x\r\nUser-Agent: a\"b\\c\tx\xff\xc3\xa9\r\n"
               b"Referer: \xc0\xaf\r\nConnection: close\r\n\r\n")
        assert c.read_response().status == 200
    with srv.connect() as c:  # a request that cannot be parsed is logged too, control bytes and all
        c.send(b"GET /a\x01b\x7f HTTP/1.1\r\n\r\n")
        assert c.read_response().status == 400
    lines = wait_lines(srv.access_log, 3)
    assert len(lines) == 3, lines
    docs = [json.loads(ln) for ln in lines]
    for d in docs:
        assert list(d) == JSON_KEYS, d
        assert RFC3339_MS_RE.match(d["time"]), d["time"]
        when = calendar.timegm(time.strptime(d["time"][:19], "%Y-%m-%dT%H:%M:%S"))
        assert t0 - 60 < when < time.time() + 60, d["time"]
        assert d["client"] == "127.0.0.1" and d["model"] == model
        assert isinstance(d["worker"], int) and d["worker"] > 0
        assert isinstance(d["duration_us"], int) and 0 <= d["duration_us"] < util.scaled(10) * 1e6
    by_target = {d["target"]: d for d in docs}
    first = by_target["/a.txt?x=1"]
    assert (first["method"], first["protocol"], first["status"], first["bytes"]) == ("GET", "HTTP/1.1", 200, 13)
    assert first["referer"] == "http://ref.example/p" and first["user_agent"] == "ua/1.0"
    odd = by_target["/a.txt?q=%22"]
    assert odd["user_agent"] == "a\"b\\c\tx\ufffd\u00e9", odd
    assert odd["referer"] == "\ufffd\ufffd", odd
    raw = next(ln for ln in lines if "q=%22" in ln)
    assert '\\"b\\\\c\\u0009x\\ufffd' in raw, raw
    bad = by_target["/a\x01b\x7f"]
    assert '"target":"/a\\u0001b\\u007f"' in next(ln for ln in lines if '"status":400' in ln)
    assert bad["status"] == 400 and bad["referer"] is None and bad["user_agent"] is None


def test_reload_switches_the_access_log_format(model, docroot, tmp_path):
    """SIGHUP with access_log_format changed in the file: the next generation
    writes the new format to the same file."""
    conf = tmp_path / "spindle.conf"
    conf.write_text("[log]\naccess_log_format = combined\n")
    srv = util.Server(model, docroot.path, tmp_path / "srv", extra_args=["--config", str(conf)]).start()
    try:
        srv.get("/a.txt?gen=1")
        assert len(wait_lines(srv.access_log, 1)) == 1
        conf.write_text("[log]\naccess_log_format = json\n")
        srv.signal(signal.SIGHUP)
        gen2 = re.compile(r"generation 2: serving process \d+ runs")
        assert util.wait_for(lambda: gen2.search(srv.error_log.read_text(errors="replace")),
                             util.scaled(5)), srv.diagnostics()
        # the old generation may still be draining: ask until the new one answers
        assert util.wait_for(lambda: srv.get("/a.txt?gen=2").status == 200 and
                             any(ln.startswith("{") for ln in log_lines(srv.access_log)), util.scaled(5))
        lines = log_lines(srv.access_log)
        assert parse(lines[0])["request"] == "GET /a.txt?gen=1 HTTP/1.1"
        new = [json.loads(ln) for ln in lines if ln.startswith("{")]
        assert new and all(d["target"] == "/a.txt?gen=2" for d in new), lines
    finally:
        assert srv.stop() == 0


def test_reopen_with_no_log_file_says_so(docroot, tmp_path):
    """SIGUSR1 when the error log is standard error and access_log is off:
    a sentence, not an empty list of files."""
    port = util.free_port()
    err = tmp_path / "stderr"
    with open(err, "w") as out:
        proc = subprocess.Popen([str(util.spindle_bin()), "--root", str(docroot.path), "--port", str(port),
                                 "--set", "error_log=-"], stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        def serving() -> bool:
            try:
                socket.create_connection((util.HOST, port), timeout=1).close()
                return True
            except OSError:
                return False
        assert util.wait_for(serving, util.scaled(5)), err.read_text()
        proc.send_signal(signal.SIGUSR1)
        assert util.wait_for(lambda: "logs reopened" in err.read_text(), util.scaled(3)), err.read_text()
        text = err.read_text()
        assert "logs reopened: none to reopen (access_log is off, the error log is standard error)" in text, text
        assert "logs reopened ()" not in text, text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=util.scaled(15)) == 0, err.read_text()


# --------------------------------------------------------------------------
# Reopening under races: a serving process asks the master for the new
# descriptors from its SIGUSR1 handler, and so do its children and workers.
# --------------------------------------------------------------------------

def in_usr1_handler(pid: int) -> bool:
    """Whether pid (single-threaded: a fork or prefork serving process) runs
    its SIGUSR1 handler now: the signal is blocked while it does."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    blocked = next(ln for ln in status.splitlines() if ln.startswith("SigBlk:"))
    return bool(int(blocked.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)


def rotate_and_check(srv: util.Server, n: int = 1) -> None:
    """Moves the access log away, SIGUSR1 to the master: every process of the
    instance lets go of the moved file, and the next line lands in a new one."""
    rotated = srv.access_log.with_name(f"access.log.{n}")
    os.rename(srv.access_log, rotated)
    srv.signal(signal.SIGUSR1)
    released = util.wait_for(lambda: not util.open_by_instance(srv, rotated), util.scaled(3))
    assert released, f"{rotated.name} still open in {util.open_by_instance(srv, rotated)} after SIGUSR1"
    srv.get(f"/a.txt?after={n}")
    assert any(f"after={n}" in ln for ln in wait_lines(srv.access_log, 1)), log_lines(srv.access_log)


@pytest.mark.parametrize("kind", ["fork", "prefork"])
def test_a_reply_too_late_for_its_ask_is_not_taken_at_the_next_rotation(kind, docroot, tmp_path):
    """A serving process that gave up waiting for the master (2 s; the master
    is stopped here, as a loaded machine may hold it up) keeps its files; the
    master's late reply must not be what the next rotation takes: it carries
    the files of the rotation before, the ones logrotate has just moved."""
    settings = {"workers": 2} if kind == "prefork" else {}
    srv = util.Server(kind, docroot.path, tmp_path / "srv", settings).start()
    try:
        srv.get("/a.txt?before=1")
        serving = util.serving_pids(srv.proc.pid)[0]
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            os.kill(serving, signal.SIGUSR1)  # it asks a master that cannot answer
            assert util.wait_for(lambda: in_usr1_handler(serving), util.scaled(2), 0.01), "SIGUSR1 not handled"
            assert util.wait_for(lambda: not in_usr1_handler(serving), util.scaled(5), 0.01), "still waiting"
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)  # and now it answers that ask, too late
        time.sleep(0.3)
        rotate_and_check(srv)
    finally:
        assert srv.stop() == 0, srv.diagnostics()


def test_a_child_exiting_does_not_cut_the_wait_for_the_master_short(docroot, tmp_path):
    """fork: a connection's child that exits while the serving process waits
    for the master's reply (its SIGCHLD interrupts the wait) must not end
    that wait empty-handed: the serving process kept the moved file, and
    the reply then sat unread until the next rotation took it. The look must
    come well within the 2 s the serving process waits; a loaded machine
    that delays it past that says nothing, and it is tried again."""
    srv = util.Server("fork", docroot.path, tmp_path / "srv").start()
    try:
        serving = util.serving_pids(srv.proc.pid)[0]
        children = lambda: [p for p in util.proc_children(serving) if util.proc_live(p)]
        for _ in range(3):  # until one look in time
            with srv.connect() as c:
                c.send(util.build_request("GET", "/a.txt?before=1"))
                assert c.read_response().status == 200
                # this connection's child alone (an earlier one may still be exiting)
                assert util.wait_for(lambda: len(children()) == 1, util.scaled(2)), children()
                child = children()
                os.kill(srv.proc.pid, signal.SIGSTOP)
                try:
                    t0 = time.monotonic()
                    os.kill(serving, signal.SIGUSR1)
                    assert util.wait_for(lambda: in_usr1_handler(serving), util.scaled(2), 0.01), "not handled"
                    c.close()  # the child sees the end of its connection and exits
                    assert util.wait_for(lambda: util.proc_state(child[0]) in (None, "Z"), util.scaled(2), 0.01)
                    time.sleep(0.1)
                    waiting = in_usr1_handler(serving)
                    in_time = time.monotonic() - t0 < 1.5
                finally:
                    os.kill(srv.proc.pid, signal.SIGCONT)
            assert util.wait_for(lambda: not in_usr1_handler(serving), util.scaled(3), 0.01)
            if in_time:
                break
        assert in_time, "the machine was too loaded to look within 1.5 s of the signal, 3 times"
        assert waiting, "the serving process stopped waiting for the master when its child exited"
        rotate_and_check(srv)
    finally:
        assert srv.stop() == 0, srv.diagnostics()


@pytest.mark.parametrize("kind", ["fork", "prefork"])
def test_rotations_while_connections_come_and_go(kind, docroot, tmp_path):
    """Rotation after rotation while keep-alive connections (fork: a child
    each) are open and closing around the SIGUSR1, every process of the
    instance on one CPU as on a loaded machine: each rotation's moved file
    is let go of by every process."""
    srv = util.Server(kind, docroot.path, tmp_path / "srv", {"workers": 2} if kind == "prefork" else {}).start()
    cpu = {min(os.sched_getaffinity(0))}
    try:
        for n in range(1, 13):
            conns = [srv.connect() for _ in range(8)]
            for c in conns:
                c.send(util.build_request("GET", f"/a.txt?n={n}"))
            for c in conns:
                assert c.read_response().status == 200
            for pid in util.instance_processes(srv):  # taskset: children inherit it
                try:
                    os.sched_setaffinity(pid, cpu)
                except OSError:
                    pass  # gone already
            rotated = srv.access_log.with_name(f"access.log.{n}")
            os.rename(srv.access_log, rotated)
            for c in conns[:4]:  # children exit as the signal goes round
                c.close()
            srv.signal(signal.SIGUSR1)
            for c in conns[4:]:
                c.close()
            released = util.wait_for(lambda: not util.open_by_instance(srv, rotated), util.scaled(3))
            assert released, f"rotation {n}: {rotated.name} still open in {util.open_by_instance(srv, rotated)}"
    finally:
        assert srv.stop() == 0, srv.diagnostics()
