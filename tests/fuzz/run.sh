#!/bin/sh
# run.sh - runs libFuzzer targets for CI: for each target, replay its
# committed corpus (tests/fuzz/corpus-<name>/) and hand-written seeds, then
# fuzz for FUZZ_SECONDS. Any crash, sanitizer report (UB included: the build
# has -fno-sanitize-recover=all), leak, or input slower than FUZZ_TIMEOUT
# seconds fails the run; the offending input is kept under build/fuzz/
# artifacts/, shown as a hexdump, with the command that reproduces it.
#
# FUZZ_JOBS targets (default 2) run at once: each fuzzer is one process on
# one core, so on two cores two of them get as many executions in their
# FUZZ_SECONDS as one alone. Each target's report is printed when its batch ends.
#
# usage: tests/fuzz/run.sh fuzz_parse fuzz_path ...   (from the repository root)
set -u
seconds=${FUZZ_SECONDS:-22}
timeout=${FUZZ_TIMEOUT:-10}
jobs=${FUZZ_JOBS:-2}
out=build/fuzz
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# run_target TARGET: replays and fuzzes one target; its report goes to
# stdout, and its failure to the file $out/artifacts/TARGET/failed.
run_target() {
	target=$1
	name=${target#fuzz_}
	bin=$out/$target
	work=$out/corpus-$name             # new inputs of this run (scratch)
	art=$out/artifacts/$target
	mkdir -p "$work" "$art"
	rm -f "$art"/*
	set --
	for dir in tests/fuzz/corpus-$name tests/fuzz/seeds-$name; do
		[ -d "$dir" ] && set -- "$@" "$dir"
	done
	dict=""
	[ -f tests/fuzz/$name.dict ] && dict="-dict=tests/fuzz/$name.dict"
	[ "$name" = parse ] && dict="-dict=tests/fuzz/http.dict"

	echo "== $target: replaying $* =="
	# -runs=0: run every input once, mutate nothing
	if ! "$bin" -runs=0 -timeout="$timeout" -artifact_prefix="$art/" "$@" >"$art/replay.log" 2>&1; then
		echo "$target(replay)" >"$art/failed"
	else
		echo "== $target: fuzzing for ${seconds}s =="
		# shellcheck disable=SC2086
		if ! "$bin" -max_total_time="$seconds" -timeout="$timeout" -print_final_stats=1 $dict \
			-artifact_prefix="$art/" "$work" "$@" >"$art/fuzz.log" 2>&1; then
			echo "$target" >"$art/failed"
		fi
		grep -E '^#[0-9]+' "$art/fuzz.log" | tail -n 1
	fi
	for a in "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-* "$art"/slow-unit-*; do
		[ -f "$a" ] || continue
		log=$art/fuzz.log
		grep -q "$a" "$art/replay.log" 2>/dev/null && log=$art/replay.log
		echo "---- $target: $a (log: $log)"
		grep -E 'ERROR|runtime error|SUMMARY|ALARM|deadly signal|Timeout' "$log" | head -n 5
		head -c 512 "$a" | od -A d -c | head -n 24
		echo "reproduce: $bin -timeout=$timeout $a"
	done
}

# Batches of $jobs targets; each writes its report to a file, shown in order.
targets="$*"
set --
for target in $targets; do
	set -- "$@" "$target"
	[ $# -lt "$jobs" ] && continue
	for t in "$@"; do run_target "$t" >"$out/$t.report" 2>&1 & done
	wait
	for t in "$@"; do cat "$out/$t.report"; done
	set --
done
for t in "$@"; do run_target "$t" >"$out/$t.report" 2>&1 & done
wait
for t in "$@"; do cat "$out/$t.report"; done

failed=""
for target in $targets; do
	[ -f "$out/artifacts/$target/failed" ] && failed="$failed $(cat "$out/artifacts/$target/failed")"
done
if [ -n "$failed" ]; then
	echo "fuzz-run FAILED:$failed" >&2
	exit 1
fi
echo "fuzz-run: all targets clean"
