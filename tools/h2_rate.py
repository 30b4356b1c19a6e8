#!/usr/bin/env python3
"""h2_rate.py - curl's download rate of one URL over HTTP/2 against HTTP/1.1.

Runs curl (pinned to CPU 0: pin the server to another, `taskset -c 1
./spindle ...`) alternately over HTTP/1.1 and HTTP/2 (prior knowledge on
http://, ALPN on https://, certificates not checked), so that drift in a
shared machine's load hits both, and prints the two rates and the ratio of
their means with a 95% bootstrap interval.

    python3 tools/h2_rate.py URL [RUNS]      (RUNS of each, default 10)
"""
import random
import statistics
import subprocess
import sys


def rate(url: str, h2: bool) -> float:
    """MB/s of one download."""
    flag = ("--http2" if url.startswith("https") else "--http2-prior-knowledge") if h2 else "--http1.1"
    r = subprocess.run(["taskset", "-c", "0", "curl", "-sS", "-k", flag, "-o", "/dev/null", "-w",
                        "%{speed_download} %{http_version}", url], capture_output=True, text=True, check=True)
    speed, version = r.stdout.split()
    assert version == ("2" if h2 else "1.1"), version
    return float(speed) / 1e6


def main() -> None:
    url, runs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
    h1, h2 = [], []
    for i in range(runs):
        for proto in ((False, True) if i % 2 == 0 else (True, False)):
            (h2 if proto else h1).append(rate(url, proto))
    rnd = random.Random(1)
    boots = sorted(statistics.mean(rnd.choices(h2, k=len(h2))) / statistics.mean(rnd.choices(h1, k=len(h1)))
                   for _ in range(5000))
    print(f"HTTP/1.1 {statistics.median(h1):.0f} MB/s (median), HTTP/2 {statistics.median(h2):.0f} MB/s; "
          f"HTTP/2 / HTTP/1.1 = {statistics.mean(h2) / statistics.mean(h1):.2f} "
          f"[95% bootstrap {boots[125]:.2f}, {boots[4874]:.2f}] ({runs} runs each)")


if __name__ == "__main__":
    main()
