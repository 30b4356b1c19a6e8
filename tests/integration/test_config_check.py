"""`spindle --check` answers exactly as recorded in config_check.golden:
the effective configuration it prints, or the message naming file:line and
the problem, and the exit status. The cases set every key, every value of
every named choice (symlinks, log_level, bucket_lock, delay_kind, autoindex,
access_log_format) and each way a value is refused (unknown key or section,
a key in the wrong section, a bad name, a number out of bounds, a bad
duration or size), from a file and from --set.

The golden file was recorded before the key table was rewritten, so a
rewrite that changes what a user sees fails here. When a change of output
is intended (a new key, a better message), regenerate it and review the
diff:
    .venv/bin/python tests/integration/test_config_check.py --regenerate
"""
from __future__ import annotations

import difflib
from pathlib import Path

import pytest

import util

GOLDEN = Path(__file__).with_name("config_check.golden")

# Every key set away from its default (a file written as server.conf is).
EVERY_KEY = """\
# every key, none at its default
[server]
bind = 0.0.0.0
port = 9090
root = www
model = pool
workers = 3
threads = 7
max_connections = 500
reuseport = off
listen = 127.0.0.1:8081
listen = [::1]:8082 ipv6only=off
listen = *:8083
listen = 8084
listen = unix:sock mode=0660 owner=nobody group=nogroup
listen = 127.0.0.1:8085 proxy_protocol
real_ip_from = 10.0.0.2 fd00::/64 unix:
user = nobody
group = nogroup
landlock = off
overload = shed
overload_target = 150ms

[http]
keepalive_timeout = 500ms
header_timeout = 2m
send_timeout = 7
drain_timeout = 0
max_request_line = 1k
max_head = 32k
max_headers = 50
max_body = 1g
max_ranges = 3
index = home.htm
dotfiles = on
symlinks = all
server_tokens = off
sendfile_min = 0
http2 = off
health_path = /healthz
autoindex = html
fallback = /app/index.html
cors_origins = https://app.example http://localhost:3000

[cache]
cache_size = 0
cache_max_file = 1m
cache_revalidate = 1500ms

[stats]
stats = off
stats_name = inst-1.a_b
metrics = off
metrics_path = /m
status_path = /s
stats_allow = 10.0.0.0/8 unix:

[workload]
workload = on
workload_path = /w
work_unit = 250us
delay_kind = wall
buckets = 4
bucket_lock = global

[log]
access_log = access.log
access_log_format = json
error_log = error.log
log_level = debug

[tls]
tls = off
tls_certificate = /etc/spindle/fullchain.pem
tls_certificate_key = /etc/spindle/privkey.pem
hsts = max-age=63072000; includeSubDomains
redirect_https = on
redirect_https_port = 8443
acme_webroot = www

[content]
precompressed = zstd br gzip
types_file = mime.types
default_type = text/plain
cache_expires = on

[cache_control]
/assets/* = public, max-age=31536000, immutable
text/html = no-cache
*.js = max-age=60

[redirects]
/old.html = 301 /new.html
/blog/* = 308 /posts/$1
//www.example.com/* = 301 https://example.com/$1

[headers]
/ = Server: -
text/html = Content-Security-Policy: default-src 'self'; img-src *
/ = Strict-Transport-Security: max-age=31536000; includeSubDomains
"""


def conf(body: str) -> dict[str, str]:
    return {"t.conf": body}


# (name, arguments after --check, files written beside the run)
CASES: list[tuple[str, list[str], dict[str, str]]] = [
    ("defaults", [], {}),
    ("every-key", ["--config", "t.conf"], conf(EVERY_KEY)),
    ("every-key-then-flags", ["--config", "t.conf", "-p", "1", "-b", "::1", "-m", "epoll", "-w", "2",
                              "-t", "1", "--set", "log_level=error", "--set", "cache_control=/x = no-store",
                              "--set", "redirects=/y = 302 /z", "--set", "headers=/ = X-Frame-Options: DENY"],
     conf(EVERY_KEY)),
    # the enums' other values (the defaults and every-key show the rest)
    ("enums-1", ["--set", "symlinks=off", "--set", "log_level=warn", "--set", "delay_kind=sleep",
                 "--set", "autoindex=json", "--set", "access_log_format=combined", "--set", "bucket_lock=bucket"], {}),
    ("enums-2", ["--set", "symlinks=inside", "--set", "log_level=info", "--set", "delay_kind=cpu",
                 "--set", "autoindex=off"], {}),
    ("enums-3", ["--set", "log_level=error", "--set", "symlinks=all", "--set", "access_log_format=json"], {}),
    ("overload-queue", ["--set", "overload=queue", "--set", "overload_target=1s"], {}),
    ("overload-reject", ["--set", "overload=reject"], {}),
    ("overload-bad", ["--set", "overload=drop"], {}),
    # units, bounds exactly, booleans spelled every way, keys before any section
    ("units-and-bounds", ["--config", "t.conf"], conf("""\
port = 0
workers = 1024
threads = 4096
max_connections = 1000000
keepalive_timeout = 60m
header_timeout = 1ms
send_timeout = 3600s
drain_timeout = 1m
max_request_line = 64
max_head = 4M
max_headers = 10000
max_body = 1099511627776
max_ranges = 1000
sendfile_min = 1G
cache_size = 1024g
cache_max_file = 4194304k
cache_revalidate = 3600000ms
work_unit = 10s
buckets = 65536
redirect_https_port = 65535
reuseport = yes
dotfiles = true
server_tokens = 0
stats = 1
metrics = TRUE
landlock = No
cache_expires = False
workload = ON
"""
    )),
    ("units-lower", ["--config", "t.conf"], conf("""\
[http]
max_request_line = 64
max_head = 256
max_headers = 1
max_body = 0
max_ranges = 1
keepalive_timeout = 1
[cache]
cache_max_file = 0
cache_revalidate = 0
[workload]
work_unit = 1us
buckets = 1
[server]
threads = 1
max_connections = 1
[tls]
redirect_https_port = 1
"""
    )),
    ("work-unit-forms", ["--set", "work_unit=1500us", "--set", "keepalive_timeout=1500"], {}),
    ("work-unit-ms", ["--set", "work_unit=2ms", "--set", "send_timeout=90s"], {}),
    ("off-values", ["--set", "access_log=off", "--set", "health_path=off", "--set", "fallback=off",
                    "--set", "user=off", "--set", "group=off", "--set", "precompressed=off",
                    "--set", "types_file=off", "--set", "hsts=off", "--set", "tls_certificate=off"], {}),
    ("server-conf", ["--config", "server.conf"], {}),
    ("listen-only-unix", ["--set", "listen=unix:/tmp/x.sock"], {}),
    ("listen-http2-only", ["--set", "listen=127.0.0.1:8080 http2_only", "--set", "listen=unix:/tmp/h2.sock http2_only"],
     {}),
    ("set-overrides-file", ["--config", "t.conf", "--set", "port=7", "--port", "8"],
     conf("[server]\nport = 6\n")),
    ("cache-control-set", ["--set", "cache_control=image/* = max-age=5", "--set", "cache_control=/a = no-cache"], {}),
    ("empty-file", ["--config", "t.conf"], conf("")),
    ("comments-only", ["--config", "t.conf"], conf("# nothing\n; nothing\n\n[http]\n")),
]

# Refusals: a line each, from a file (file:line) or from --set.
BAD_LINES = [
    ("unknown-key", "[server]\nthread = 4\n"),
    ("unknown-key-unknown-section", "[nope]\nthread = 4\n"),
    ("unknown-section", "[nope]\nport = 4\n"),
    ("wrong-section", "[http]\nport = 4\n"),
    ("wrong-section-from-tls", "[tls]\nport = 4\n"),
    ("wrong-section-to-tls", "[server]\ntls = on\n"),
    ("wrong-section-content", "[content]\nindex = a.html\n"),
    ("syntax", "[server]\nport\n"),
    ("indented", "[server]\nport = 1\n  root = www\n"),
    ("bad-section-line", "[server\n"),
    ("bad-symlinks", "symlinks = some\n"),
    ("bad-symlinks-case", "symlinks = Inside\n"),
    ("bad-log-level", "log_level = verbose\n"),
    ("bad-bucket-lock", "bucket_lock = none\n"),
    ("bad-delay-kind", "delay_kind = io\n"),
    ("bad-autoindex", "autoindex = on\n"),
    ("bad-access-log-format", "access_log_format = common\n"),
    ("bad-bool", "reuseport = maybe\n"),
    ("bad-int", "port = 80a\n"),
    ("bad-int-sign", "port = +80\n"),
    ("bad-int-negative", "workers = -1\n"),
    ("bad-int-empty", "port =\n"),
    ("int-too-big", "port = 65536\n"),
    ("int-too-small", "threads = 0\n"),
    ("int-overflow", "port = 99999999999999999999\n"),
    ("bad-size", "max_head = 16kb\n"),
    ("bad-size-unit", "cache_size = 1t\n"),
    ("size-too-big", "max_body = 1099511627777\n"),
    ("size-too-small", "max_head = 255\n"),
    ("size-overflow", "cache_size = 99999999999g\n"),
    ("bad-duration", "keepalive_timeout = 1h\n"),
    ("bad-duration-us", "keepalive_timeout = 250us\n"),
    ("bad-duration-frac", "send_timeout = 1.5s\n"),
    ("duration-too-small", "keepalive_timeout = 0\n"),
    ("duration-too-big", "drain_timeout = 61m\n"),
    ("duration-overflow", "drain_timeout = 9999999999999999999m\n"),
    ("bad-duration-us-unit", "work_unit = 1h\n"),
    ("duration-us-too-small", "work_unit = 0us\n"),
    ("duration-us-too-big", "work_unit = 11s\n"),
    ("string-too-long", "bind = " + "1" * 64 + "\n"),
    ("string-empty", "index =\n"),
    ("string-reads-back", "index =;x\n"),
    ("bad-model", "model = threads\n"),
    ("bad-fallback", "fallback = /app/\n"),
    ("bad-fallback-relative", "fallback = index.html\n"),
    ("bad-fallback-query", "fallback = /a?b\n"),
    ("bad-user", "user = a b\n"),
    ("bad-group", "group = x/y\n"),
    ("bad-listen", "listen = localhost:80\n"),
    ("bad-listen-option", "listen = 80 fast\n"),
    ("bad-listen-v6", "listen = ::1:80\n"),
    ("listen-twice", "listen = 80\nlisten = *:80\n"),
    ("listen-too-many", "".join(f"listen = {8000 + i}\n" for i in range(17))),
    ("bad-real-ip-from", "real_ip_from = 10.0.0.0/33\n"),
    ("bad-listen-proxy-value", "listen = 80 proxy_protocol=on\n"),
    ("bad-listen-http2-only-value", "listen = 80 http2_only=on\n"),
    ("bad-codings", "precompressed = lzma\n"),
    ("bad-cache-control", "[cache_control]\n/a =\n"),
    ("bad-cache-control-pattern", "[cache_control]\n[a = b\n"),
    ("bad-redirect-status", "[redirects]\n/a = 303 /b\n"),
    ("bad-redirect-capture", "[redirects]\n/a/* = 301 /b/$2\n"),
    ("bad-redirect-host-port", "[redirects]\n//www.example.com:8080/* = 301 /b\n"),
    ("bad-header-name", "[headers]\n/ = Content-Length: 1\n"),
    ("bad-header-line", "[headers]\n/ = nocolon\n"),
    ("bad-cors-origins", "cors_origins = app.example\n"),
    # checks across keys (config_validate)
    ("root-missing", "root = nowhere\n"),
    ("index-path", "index = a/b.html\n"),
    ("metrics-needs-stats", "stats = off\nmetrics = on\n"),
    ("request-line-over-head", "max_request_line = 64k\nmax_head = 16k\n"),
    ("bad-stats-allow", "stats_allow = 10.0.0.0/33\n"),
    ("bad-stats-name", "stats_name = a/b\n"),
    ("bad-metrics-path", "metrics_path = metrics\n"),
    ("bad-health-path", "health_path = healthz\n"),
    ("proxy-needs-real-ip-from", "listen = 80\nlisten = 81 proxy_protocol\n"),
    ("http2-only-needs-http2", "listen = 80\nlisten = 81 http2_only\nhttp2 = off\n"),
    ("bad-default-type", "default_type = text\n"),
    ("missing-types-file", "types_file = no.types\n"),
    ("missing-acme-webroot", "[tls]\nacme_webroot = nowhere\n"),
    ("acme-webroot-not-a-directory", "[tls]\nacme_webroot = mime.types\n"),
]

BAD_SETS = [
    ("set-unknown-key", ["--set", "thread=4"]),
    ("set-no-equals", ["--set", "port"]),
    ("set-bad-enum", ["--set", "autoindex=yes"]),
    ("set-out-of-bounds", ["--set", "max_ranges=1001"]),
    ("set-bad-duration", ["--set", "header_timeout=ten"]),
    ("set-bad-size", ["--set", "sendfile_min=1.5k"]),
    ("set-reads-back", ["--set", "index=a ;b"]),
    ("set-control-char", ["--set", "hsts=a\rb"]),
    ("set-trailing-space", ["--set", "default_type=text/plain "]),
    ("set-bad-listen-ctl", ["--set", "listen=80\r"]),
    ("set-proxy-needs-real-ip-from", ["--set", "listen=80 proxy_protocol"]),
    ("set-http2-only-needs-http2", ["--set", "listen=80 http2_only", "--set", "http2=off"]),
    ("set-bad-cache-control", ["--set", "cache_control=nopattern"]),
    ("set-bad-redirect", ["--set", "redirects=/a = 301"]),
    ("set-bad-header", ["--set", "headers=/a: b = X-A: c"]),
    ("flag-bad-port", ["--port", "x"]),
    ("flag-bad-model", ["-m", "nope"]),
    ("missing-config", ["--config", "absent.conf"]),
]

# [site NAME] sections: every key a site takes, its rule sections, and what it
# inherits from the top level (index, [headers]) printed in full
SITES = """\
[server]
default_site = reject
[http]
index = home.html
[headers]
/ = X-Top: 1
[site blog]
names = blog.example.com *.blog.example.com
root = www
autoindex = json
fallback = /index.html
cors_origins = https://app.example.com
[site blog redirects]
/old = 301 /new
[site blog cache_control]
/assets/* = max-age=60
[site shop]
names = shop.example.com
root = www
index = index.htm
[site shop headers]
/ = X-Shop: yes
"""
CASES += [("sites", ["--config", "t.conf"], conf(SITES))]

CASES += [(f"file-{name}", ["--config", "t.conf"], conf(body)) for name, body in BAD_LINES]
CASES += [(name, args, {}) for name, args in BAD_SETS]

MIME_TYPES = "text/x-test tst\n"


def run_case(tmp: Path, args: list[str], files: dict[str, str]) -> str:
    """One case's record: the command, its exit status, stdout and stderr."""
    (tmp / "www").mkdir(exist_ok=True)
    (tmp / "mime.types").write_text(MIME_TYPES)
    (tmp / "server.conf").write_text((util.REPO_ROOT / "server.conf").read_text())
    for name, body in files.items():
        (tmp / name).write_text(body)
    r = util.run_spindle("--check", *args, cwd=tmp)
    for name in files:
        (tmp / name).unlink()
    shown = " ".join(repr(a) if (not a or any(c in a for c in " \r;*=[")) else a for a in args)
    return (f"$ spindle --check {shown}\n--- exit {r.returncode}\n--- stdout\n{r.stdout}"
            f"--- stderr\n{r.stderr}")


def load_golden() -> dict[str, str]:
    out, name, lines = {}, None, []
    for line in GOLDEN.read_text().splitlines(keepends=True):
        if line.startswith("=== "):
            if name is not None:
                out[name] = "".join(lines)
            name, lines = line[4:].rstrip("\n"), []
        else:
            lines.append(line)
    if name is not None:
        out[name] = "".join(lines)
    return out


def test_case_names_are_unique():
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name,args,files", CASES, ids=[c[0] for c in CASES])
def test_check_answers_as_recorded(name, args, files, tmp_path):
    golden = load_golden()
    assert name in golden, f"{name} is not in {GOLDEN.name}: regenerate it (see this file's docstring)"
    got = run_case(tmp_path, args, files)
    want = golden[name]
    assert got == want, "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                     "recorded", "now"))


def regenerate() -> None:
    """Writes config_check.golden from the current binary ($SPINDLE_BIN or ./spindle)."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text("".join(f"=== {name}\n{run_case(Path(d), args, files)}" for name, args, files in CASES))


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: {sys.argv[0]} --regenerate")
    regenerate()
