#!/usr/bin/env python3
"""h2_rate.py - a client's download rate of one URL over HTTP/2 against HTTP/1.1.

Runs the client (curl, or with --h2load nghttp2's h2load, whose HTTP/2
receive path costs less than curl 7.88's; pinned to CPU 0: pin the server to
another, `taskset -c 1 ./spindle ...`) alternately over HTTP/1.1 and HTTP/2
(prior knowledge on http://, ALPN on https://, certificates not checked), so
that drift in a shared machine's load hits both, and prints the two rates and
the ratio of their means with a 95% bootstrap interval. With --server-pid,
also the CPU that process (all its threads) spent per download of each
protocol, from /proc/PID/task/*/stat (clock ticks, so a mean over the runs).

With --peer URL2 (another server's copy of the file, e.g. h2o's), both
servers and both protocols are measured in one shuffled order, RUNS
downloads each, and three ratios printed: each server's HTTP/2 rate over its
own HTTP/1.1 rate, and the first's HTTP/2 rate over the peer's.

    python3 tools/h2_rate.py [--h2load] [--server-pid PID] URL [RUNS]   (RUNS of each, default 10)
    python3 tools/h2_rate.py [--h2load] --peer URL2 URL [RUNS]
"""
import os
import random
import re
import statistics
import subprocess
import sys


def rate_h2load(url: str, h2: bool) -> float:
    """MB/s (10^6 bytes) of one download by h2load: body bytes / its time."""
    r = subprocess.run(["taskset", "-c", "0", "h2load", "-c", "1", "-m", "1", "-n", "1",
                        *([] if h2 else ["--h1"]), url], capture_output=True, text=True, check=True)
    proto = re.search(r"^Application protocol: (\S+)", r.stdout, re.M)
    assert proto and proto.group(1) in (("h2", "h2c") if h2 else ("http/1.1",)), r.stdout[-300:]
    fin = re.search(r"^finished in ([\d.]+)(us|ms|s),", r.stdout, re.M)
    data = re.search(r"^traffic: .* \((\d+)\) data", r.stdout, re.M)
    assert fin and data and "1 succeeded" in r.stdout, r.stdout[-300:]
    seconds = float(fin.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[fin.group(2)]
    return int(data.group(1)) / seconds / 1e6


def rate(url: str, h2: bool) -> float:
    """MB/s of one download."""
    flag = ("--http2" if url.startswith("https") else "--http2-prior-knowledge") if h2 else "--http1.1"
    r = subprocess.run(["taskset", "-c", "0", "curl", "-sS", "-k", flag, "-o", "/dev/null", "-w",
                        "%{speed_download} %{http_version}", url], capture_output=True, text=True, check=True)
    speed, version = r.stdout.split()
    assert version == ("2" if h2 else "1.1"), version
    return float(speed) / 1e6


def process_cpu(pid: int) -> float:
    """Seconds of user and system CPU of every thread of process pid so far."""
    ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def take_option(args: list[str], name: str) -> str | None:
    """The value after name in args, both taken out; None without it."""
    if name not in args:
        return None
    i = args.index(name)
    value = args[i + 1]
    del args[i:i + 2]
    return value


def ratio(a: list[float], b: list[float], rnd: random.Random) -> str:
    """mean(a) / mean(b) with a 95% bootstrap interval."""
    boots = sorted(statistics.mean(rnd.choices(a, k=len(a))) / statistics.mean(rnd.choices(b, k=len(b)))
                   for _ in range(5000))
    return f"{statistics.mean(a) / statistics.mean(b):.2f} [95% bootstrap {boots[125]:.2f}, {boots[4874]:.2f}]"


def against_peer(measure, url: str, peer: str, runs: int) -> None:
    """Both servers, both protocols, in one shuffled order: drift hits all four alike."""
    rnd = random.Random(1)
    got = {(u, h2): [] for u in (url, peer) for h2 in (False, True)}
    order = [k for k in got for _ in range(runs)]
    rnd.shuffle(order)
    for u, h2 in order:
        got[(u, h2)].append(measure(u, h2))
    for u in (url, peer):
        print(f"{u}: HTTP/1.1 {statistics.median(got[(u, False)]):.0f} MB/s (median), "
              f"HTTP/2 {statistics.median(got[(u, True)]):.0f} MB/s; "
              f"HTTP/2 / HTTP/1.1 = {ratio(got[(u, True)], got[(u, False)], rnd)}")
    print(f"HTTP/2, the first / the peer = {ratio(got[(url, True)], got[(peer, True)], rnd)} "
          f"({runs} runs each, {'h2load' if measure is rate_h2load else 'curl'})")


def main() -> None:
    args = sys.argv[1:]
    measure = rate_h2load if "--h2load" in args else rate
    args = [a for a in args if a != "--h2load"]
    peer = take_option(args, "--peer")
    pid = take_option(args, "--server-pid")
    pid = int(pid) if pid else None
    url, runs = args[0], int(args[1]) if len(args) > 1 else 10
    if peer:
        against_peer(measure, url, peer, runs)
        return
    h1, h2 = [], []
    cpu = {False: 0.0, True: 0.0}
    for i in range(runs):
        for proto in ((False, True) if i % 2 == 0 else (True, False)):
            before = process_cpu(pid) if pid else 0.0
            (h2 if proto else h1).append(measure(url, proto))
            cpu[proto] += process_cpu(pid) - before if pid else 0.0
    print(f"HTTP/1.1 {statistics.median(h1):.0f} MB/s (median), HTTP/2 {statistics.median(h2):.0f} MB/s; "
          f"HTTP/2 / HTTP/1.1 = {ratio(h2, h1, random.Random(1))} ({runs} runs each, "
          f"{'h2load' if measure is rate_h2load else 'curl'})")
    if pid:
        print(f"server CPU per download: HTTP/1.1 {cpu[False] / runs * 1e3:.1f} ms, "
              f"HTTP/2 {cpu[True] / runs * 1e3:.1f} ms (process {pid}, mean of {runs})")


if __name__ == "__main__":
    main()
