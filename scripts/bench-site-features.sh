#!/bin/sh
# Cost of the site features on the hot path (docs/lab.md, "Site features on
# the hot path"; the features: docs/configuration.md): wrk on a cached 13-byte file,
# features off (autoindex off, no fallback, combined access log) against on
# (autoindex = html, fallback = /index.html, JSON access log), alternated in
# the same run, server pinned to CPU 1 and wrk to CPU 0.
# Usage: scripts/bench-site-features.sh [repeats=3] [seconds=5] [connections=32]
set -eu
REPEATS=${1:-3}
SECS=${2:-5}
CONNS=${3:-32}
BIN=${SPINDLE_BIN:-./spindle}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/www"
printf 'Hello, world!' > "$WORK/www/a.txt"
printf '<p>app</p>\n' > "$WORK/www/index.html"

# user+system ticks of a process and every descendant
cpu_ticks() {
	total=0
	for p in $1 $(cat /proc/$1/task/*/children 2>/dev/null); do
		t=$(awk '{print $14 + $15}' /proc/$p/stat 2>/dev/null || echo 0)
		total=$((total + t))
		for c in $(cat /proc/$p/task/*/children 2>/dev/null); do
			t=$(awk '{print $14 + $15}' /proc/$c/stat 2>/dev/null || echo 0)
			total=$((total + t))
		done
	done
	echo $total
}

run() { # name, then --set arguments
	name=$1
	shift
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	taskset -c 1 "$BIN" --bind 127.0.0.1 --port "$port" --root "$WORK/www" --model epoll --workers 1 \
		--set access_log="$WORK/access-$name.log" --set error_log="$WORK/error.log" --set stats=off "$@" &
	pid=$!
	for _ in $(seq 50); do
		curl -s -o /dev/null "http://127.0.0.1:$port/a.txt" && break
		sleep 0.1
	done
	taskset -c 0 wrk -t1 -c"$CONNS" -d1s "http://127.0.0.1:$port/a.txt" > /dev/null # warm-up
	t0=$(cpu_ticks $pid)
	out=$(taskset -c 0 wrk -t1 -c"$CONNS" -d"${SECS}s" "http://127.0.0.1:$port/a.txt")
	t1=$(cpu_ticks $pid)
	kill -TERM $pid
	wait $pid || true
	reqs=$(echo "$out" | awk '/requests in/ {print $1}')
	rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
	hz=$(getconf CLK_TCK)
	us=$(awk -v t=$((t1 - t0)) -v n="$reqs" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
	echo "$name rps=$rps requests=$reqs server_cpu_us_per_req=$us"
}

for i in $(seq "$REPEATS"); do
	run off --set access_log_format=combined
	run on --set autoindex=html --set fallback=/index.html --set access_log_format=json
done
