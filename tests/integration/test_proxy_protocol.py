"""The PROXY protocol (`listen = ADDR proxy_protocol`, `real_ip_from`): raw
sockets send version 1 and 2 headers as HAProxy's `send-proxy` and
`send-proxy-v2` do, and the access log, stats_allow and /status see the
client the header names; a v2 LOCAL header (a balancer's health check) keeps
the balancer's own address; a peer outside real_ip_from, a request without a
header, a malformed header and one that does not come in time are refused
(closed, with a warning naming the peer and why). A TLS listener takes the
header before the ClientHello. Then HAProxy itself, with send-proxy-v2 and
send-proxy, in front of two instances: their access logs show the client
(127.0.0.2, ::1), not HAProxy (127.0.0.1). The raw-socket tests run under
every model, the HAProxy one under one (every one with
SPINDLE_TEST_ALL_MODELS=1). Connections go to 127.0.0.x and ::1 only."""
from __future__ import annotations

import http.client
import re
import signal
import socket
import ssl
import struct
import subprocess
import time

import pytest

import util
from conftest import A_TXT

HAPROXY = "/usr/sbin/haproxy"
V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"
REQ = b"GET /a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
HEADER_TIMEOUT_MS = 600


def v1(src: str, sport: int = 41234, dst: str | None = None, dport: int = 8080) -> bytes:
    fam = "TCP6" if ":" in src else "TCP4"
    dst = dst or ("::1" if fam == "TCP6" else "127.0.0.1")
    return f"PROXY {fam} {src} {dst} {sport} {dport}\r\n".encode()


def v2(src: str | None, sport: int = 41234, dst: str | None = None, dport: int = 8080, tlvs: bytes = b"") -> bytes:
    """A PROXY command for src, or LOCAL when src is None."""
    if src is None:
        return V2_SIG + b"\x20\x00" + struct.pack(">H", len(tlvs)) + tlvs
    fam = socket.AF_INET6 if ":" in src else socket.AF_INET
    dst = dst or ("::1" if fam == socket.AF_INET6 else "127.0.0.1")
    block = (socket.inet_pton(fam, src) + socket.inet_pton(fam, dst) + struct.pack(">HH", sport, dport) + tlvs)
    return V2_SIG + bytes([0x21, 0x21 if fam == socket.AF_INET6 else 0x11]) + struct.pack(">H", len(block)) + block


def connect(port: int, host: str = "127.0.0.1", source: str | None = None, timeout: float = 5) -> util.Conn:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return util.Conn(s, timeout)


def get_through(port: int, header: bytes, target: str = "/a.txt", split: bool = False, **kw) -> util.Response:
    """One request after a PROXY header (in one segment, or the header cut in
    two and sent apart)."""
    req = REQ.replace(b"/a.txt", target.encode())
    with connect(port, **kw) as c:
        if split:
            c.send(header[:7])
            time.sleep(0.05)
            c.send(header[7:] + req)
        else:
            c.send(header + req)
        return c.read_response(timeout=5)


def refused(port: int, data: bytes, **kw) -> bool:
    """Sends data; true when the server closes (or resets) without a byte back."""
    with connect(port, **kw) as c:
        try:
            c.send(data)
        except OSError:
            return True  # reset while sending: refused before reading
        try:
            return c.read_all(timeout=util.scaled(5)) == b""
        except (ConnectionResetError, ConnectionAbortedError):
            return True


def clients(srv: util.Server, target: str = "/a.txt") -> list[str]:
    """The client field of the access log's lines for target."""
    text = srv.access_log.read_text() if srv.access_log.exists() else ""
    return [ln.split(" ", 1)[0] for ln in text.splitlines() if f'"GET {target} ' in ln]


def wait_clients(srv: util.Server, n: int, target: str = "/a.txt") -> list[str]:
    util.wait_for(lambda: len(clients(srv, target)) >= n, util.scaled(5))
    return clients(srv, target)


def errors(srv: util.Server) -> str:
    return srv.error_log.read_text(errors="replace") if srv.error_log.exists() else ""


class ProxyServer(util.Server):
    """A server on `listen = 127.0.0.1:{port} proxy_protocol` (the harness's
    readiness check connects there and closes: no header, no warning), plus
    `more` lines, where {port} is that port."""

    def __init__(self, model, root, workdir, more: list[str] = (), settings=None):
        base = {"real_ip_from": "127.0.0.1 ::1", "header_timeout": f"{HEADER_TIMEOUT_MS}ms"}
        super().__init__(model, root, workdir, {**base, **(settings or {})})
        self.more = list(more)

    def argv(self) -> list[str]:
        a = super().argv()
        for line in [f"127.0.0.1:{self.port} proxy_protocol"] + self.more:
            a += ["--set", "listen=" + line.format(port=self.port)]
        return a


@pytest.fixture(scope="module")
def tls_port():
    return util.free_port()


@pytest.fixture(scope="module")
def proxied(model_name, docroot, certs, tls_port, tmp_path_factory):
    """One server per model: plain and TLS proxy_protocol listeners, the
    balancers 127.0.0.1 and ::1, and /status for the 192.0.2.0/24 clients."""
    srv = ProxyServer(model_name, docroot.path, tmp_path_factory.mktemp(f"proxy-{model_name}"),
                      more=[f"127.0.0.1:{tls_port} tls proxy_protocol", "[::1]:{port} proxy_protocol"],
                      settings={"workers": 2, "metrics": "on", "stats_allow": "192.0.2.0/24",
                                "tls_certificate": str(certs.chain), "tls_certificate_key": str(certs.key)})
    srv.start()
    yield srv
    assert srv.stop() == 0, srv.diagnostics()


def test_headers_name_the_client(model, proxied):
    """v1 and v2, IPv4 and IPv6 clients, over IPv4 and IPv6 balancers, the
    header in one segment with the request or cut in two: the access log
    shows the client each header names."""
    before = len(clients(proxied))
    p = proxied.port
    assert get_through(p, v1("192.0.2.1")).body == A_TXT
    assert get_through(p, v1("2001:db8::1"), split=True).body == A_TXT
    assert get_through(p, v2("192.0.2.2")).body == A_TXT
    assert get_through(p, v2("2001:db8::2", tlvs=b"\x02\x00\x09localhost"), split=True).body == A_TXT
    assert get_through(p, v1("192.0.2.3"), host="::1").body == A_TXT
    assert get_through(p, v2("192.0.2.4"), host="::1").body == A_TXT
    got = wait_clients(proxied, before + 6)[before:]
    assert sorted(got) == sorted(["192.0.2.1", "2001:db8::1", "192.0.2.2", "2001:db8::2", "192.0.2.3",
                                  "192.0.2.4"]), got


def test_keep_alive_requests_keep_the_client(model, proxied):
    """The header comes once per connection; every request on it is the
    client's."""
    before = len(clients(proxied))
    with connect(proxied.port) as c:
        c.send(v2("192.0.2.9") + b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        assert c.read_response(timeout=5).body == A_TXT
        c.send(REQ)
        assert c.read_response(timeout=5).body == A_TXT
    assert wait_clients(proxied, before + 2)[before:] == ["192.0.2.9", "192.0.2.9"]


def test_local_keeps_the_balancer(model, proxied):
    """v2 LOCAL (HAProxy's health checks) and v1 UNKNOWN: the connection's own
    peer is the client."""
    before = len(clients(proxied))
    assert get_through(proxied.port, v2(None)).body == A_TXT
    assert get_through(proxied.port, b"PROXY UNKNOWN\r\n", host="::1").body == A_TXT
    assert sorted(wait_clients(proxied, before + 2)[before:]) == ["127.0.0.1", "::1"]


def test_status_and_stats_allow_see_the_client(model, proxied):
    """stats_allow = 192.0.2.0/24 lets in a client the header places there,
    and not the balancer itself (a LOCAL header) nor another client."""
    assert get_through(proxied.port, v2("192.0.2.77"), target="/status").status == 200
    assert get_through(proxied.port, v1("198.51.100.7"), target="/status").status == 403
    assert get_through(proxied.port, v2(None), target="/metrics").status == 403


def test_tls_after_the_header(model, proxied, certs, tls_port):
    """On a TLS listener the header comes first, then the ClientHello, as
    HAProxy in TCP mode sends them."""
    before = len(clients(proxied))
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    for header in (v2("192.0.2.21"), v1("2001:db8::21")):
        raw = socket.create_connection(("127.0.0.1", tls_port), timeout=5)
        raw.sendall(header)
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(REQ)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(A_TXT), data[:200]
    assert sorted(wait_clients(proxied, before + 2)[before:]) == ["192.0.2.21", "2001:db8::21"]


def test_refusals(model, proxied):
    """Closed without an answer, each with a warning naming the peer and why:
    a peer outside real_ip_from (even with a good header), a request without
    a header, a malformed header, a v2 header longer than 536 bytes."""
    p = proxied.port
    assert refused(p, v2("192.0.2.1") + REQ, source="127.0.0.3")
    assert refused(p, REQ)
    assert refused(p, b"PROXY TCP4 192.0.2.1 127.0.0.1 01 80\r\n" + REQ)
    assert refused(p, V2_SIG + b"\x21\x11\x02\x09" + b"\0" * 521 + REQ)
    want = [r"refused 127\.0\.0\.3:\d+: not in real_ip_from",
            r"refused 127\.0\.0\.1:\d+: no PROXY protocol header",
            r"refused 127\.0\.0\.1:\d+: a version 1 line with bad ports",
            r"refused 127\.0\.0\.1:\d+: a version 2 header longer than 536 bytes"]
    for w in want:
        assert util.wait_for(lambda: re.search(r"\[warn\].*proxy_protocol: " + w, errors(proxied)),
                             util.scaled(5)), f"no warning /{w}/ in:\n{errors(proxied)[-2000:]}"


def test_header_must_come_in_time(model, proxied):
    """Half a header, then nothing: closed at header_timeout, with a warning."""
    with connect(proxied.port) as c:
        c.send(v1("192.0.2.1")[:20])
        t0 = time.monotonic()
        assert c.wait_closed(util.scaled(5)), "still open past header_timeout"
        took = time.monotonic() - t0
    assert took >= HEADER_TIMEOUT_MS / 1000 * 0.8, took
    assert util.wait_for(lambda: "no complete PROXY header within header_timeout" in errors(proxied),
                         util.scaled(5)), errors(proxied)[-2000:]


@pytest.mark.parametrize("kind", ["fork", "prefork"])
def test_refusal_lines_are_limited_for_the_whole_instance(kind, docroot, tmp_path):
    """Ten refusal lines a second for the instance, however its processes are
    made: the fork model refuses in a child per connection and prefork in
    each worker, and a count of each process's own let a client connecting
    in a loop write a line per connection."""
    srv = ProxyServer(kind, docroot.path, tmp_path / "srv", settings={"workers": 2} if kind == "prefork" else {})
    srv.start()
    try:
        t0 = time.monotonic()
        for _ in range(100):
            with connect(srv.port, source="127.0.0.3") as c:
                c.send(REQ)
        seconds = int(time.monotonic() - t0) + 2  # the burst may straddle a second's turn, or a few
        lines = lambda: len(re.findall(r"proxy_protocol: refused 127\.0\.0\.3", errors(srv)))
        util.wait_for(lambda: lines() >= 10, util.scaled(5))
        time.sleep(0.5)  # the children's last lines
        assert 10 <= lines() <= 10 * seconds, f"{lines()} refusal lines for 100 connections in < {seconds} s"
    finally:
        assert srv.stop() == 0, srv.diagnostics()


# ---- configuration --------------------------------------------------------

def test_config_errors_name_the_line(tmp_path, docroot, certs):
    conf = tmp_path / "p.conf"
    conf.write_text(f"[server]\nroot = {docroot.path}\n\nlisten = 127.0.0.1:8080 proxy_protocol\n")
    r = util.run_spindle("--check", "--config", str(conf))
    assert r.returncode != 0
    assert f"{conf}:4: listen: 127.0.0.1:8080 proxy_protocol takes the PROXY protocol, but real_ip_from " \
           "names no balancer" in r.stderr, r.stderr
    conf.write_text(f"[server]\nroot = {docroot.path}\nreal_ip_from = 10.0.0.0/33\n")
    r = util.run_spindle("--check", "--config", str(conf))
    assert r.returncode != 0 and f"{conf}:3: real_ip_from: '10.0.0.0/33'" in r.stderr, r.stderr
    conf.write_text(f"[server]\nroot = {docroot.path}\nlisten = 127.0.0.1:8080 proxy_protocol=on\n")
    r = util.run_spindle("--check", "--config", str(conf))
    assert r.returncode != 0 and f"{conf}:3: listen: unknown option 'proxy_protocol=on'" in r.stderr, r.stderr
    # the address and the list may come in any order; --check prints both back
    conf.write_text(f"[server]\nroot = {docroot.path}\nlisten = [::1]:8080 tls proxy_protocol\n"
                    "real_ip_from = 10.0.0.2 unix:\n")
    r = util.run_spindle("--check", "--config", str(conf), "--set", f"tls_certificate={certs.chain}",
                         "--set", f"tls_certificate_key={certs.key}")
    assert r.returncode == 0, r.stderr
    assert "listen = [::1]:8080 tls proxy_protocol\n" in r.stdout and "real_ip_from = 10.0.0.2 unix:\n" in r.stdout


# ---- HAProxy in front -----------------------------------------------------

def deploy_md_haproxy_config(tmp_path, front: int, ports: list[int]) -> str:
    """docs/deploy.md's HAProxy configuration on loopback: bound to 127.0.0.1
    and ::1, its two servers these instances' ports (send-proxy-v2, as the
    guide has them) and a third with send-proxy (version 1), a maxconn that
    fits the test machine's descriptors."""
    text = (util.REPO_ROOT / "docs/deploy.md").read_text()
    start = text.index("    global\n")
    end = text.index("\n\n", text.index("server web2"))
    cfg = "\n".join(ln[4:] for ln in text[start:end].splitlines()) + "\n"
    assert "server web1 10.0.0.11:8080 send-proxy-v2 check" in cfg, cfg
    return (cfg.replace("bind :80", f"bind 127.0.0.1:{front}\n    bind [::1]:{front}")
            .replace("maxconn 20000", "maxconn 256")
            .replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock"))
            .replace("10.0.0.11:8080", f"127.0.0.1:{ports[0]}")
            .replace("10.0.0.12:8080", f"127.0.0.1:{ports[1]}")
            + f"    server web3 127.0.0.1:{ports[2]} send-proxy check\n")


def http_get(host: str, port: int, source: str | None = None) -> int:
    c = http.client.HTTPConnection(host, port, timeout=5, source_address=(source, 0) if source else None)
    try:
        c.request("GET", "/a.txt")
        r = c.getresponse()
        r.read()
        return r.status
    except OSError:
        return 0
    finally:
        c.close()


# HAProxy adds nothing a model could change beyond what the raw-socket tests
# above cover under every model: one model here, every one with
# SPINDLE_TEST_ALL_MODELS=1 (conftest.py). No skip when it is missing:
# scripts/install-deps.sh installs it. HAProxy holds connections to each
# instance open between requests (http-reuse, its checks), which the iterative
# model, one connection at a time, cannot serve beside others.
@pytest.mark.semantics
@pytest.mark.concurrent
def test_behind_haproxy(model, docroot, tmp_path):
    """HAProxy with docs/deploy.md's configuration (send-proxy-v2 to two
    instances; send-proxy to a third; health checks, which carry LOCAL
    headers) in front: each instance logs the clients,
    127.0.0.2 and ::1, never HAProxy's 127.0.0.1 for their requests; the
    checks pass and are logged as HAProxy's. A header from 127.0.0.3, outside
    real_ip_from, is refused."""
    insts = []
    for name in ("a", "b", "c"):
        insts.append(ProxyServer(model, docroot.path, tmp_path / name,
                                 settings={"real_ip_from": "127.0.0.1", "health_path": "/healthz",
                                           "stats": "off"}).start())
    front = util.free_port()
    d = tmp_path / "haproxy"
    d.mkdir()
    (d / "haproxy.cfg").write_text(deploy_md_haproxy_config(d, front, [s.port for s in insts]))
    out = open(d / "haproxy.out", "wb")
    lb = subprocess.Popen([HAPROXY, "-db", "-f", str(d / "haproxy.cfg")], stdin=subprocess.DEVNULL,
                          stdout=out, stderr=subprocess.STDOUT)
    try:
        # ready once every instance has passed its checks (rise 2, every 500 ms)
        assert util.wait_for(lambda: all(len(clients(s, "/healthz")) >= 2 for s in insts) or lb.poll() is not None,
                             util.scaled(10)), (d / "haproxy.out").read_text()
        assert lb.poll() is None, (d / "haproxy.out").read_text()
        statuses = [http_get("127.0.0.1", front, source="127.0.0.2") for _ in range(6)]
        statuses += [http_get("::1", front) for _ in range(6)]
        assert statuses == [200] * 12, statuses
        for s in insts:
            got = wait_clients(s, 4)
            assert sorted(set(got)) == ["127.0.0.2", "::1"], (s.workdir, got)
            assert set(clients(s, "/healthz")) == {"127.0.0.1"}, clients(s, "/healthz")
        # what HAProxy's send-proxy-v2 carries, from a peer not in real_ip_from
        assert refused(insts[0].port, v2("127.0.0.2") + REQ, source="127.0.0.3")
        assert util.wait_for(lambda: re.search(r"proxy_protocol: refused 127\.0\.0\.3:\d+: not in real_ip_from",
                                               errors(insts[0])), util.scaled(5)), errors(insts[0])[-2000:]
    finally:
        if lb.poll() is None:
            lb.send_signal(signal.SIGTERM)
            try:
                lb.wait(10)
            except subprocess.TimeoutExpired:
                lb.kill()
                lb.wait(5)
        out.close()
        for s in insts:
            assert s.stop() == 0, s.diagnostics()
