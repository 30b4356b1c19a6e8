# spindle - one Makefile. `make run` serves www/ on :8080; `make test` installs
# what the tests need, builds, and runs every test.

CC       ?= cc
CSTD     := -std=c17 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith
VERSION  := 0.1.0
# OPT: optimisation and instrumentation (the sanitizer targets set it);
# CFLAGS, CPPFLAGS and LDFLAGS stay free for the user (and dpkg-buildflags).
OPT      ?= -O2 -g
ALL_CFLAGS = $(CSTD) $(WARN) $(OPT) $(CFLAGS) -pthread -MMD -MP -DSPINDLE_VERSION='"$(VERSION)"'
ifeq ($(CI),true)
ALL_CFLAGS += -Werror
endif
LDLIBS   := -pthread -linih -luring -lnghttp2 $(shell pkg-config --libs openssl)

PORT     ?= 8080
MODEL    ?=
BUILD    ?= build

CORE_SRC := $(filter-out src/main.c,$(wildcard src/*.c src/http/*.c src/http1/*.c src/http2/*.c src/site/*.c src/fs/*.c src/log/*.c src/stats/*.c src/models/*.c src/workload/*.c src/tls/*.c src/net/*.c))
MAIN_SRC := src/main.c
UNIT_SRC := $(wildcard tests/unit/*.c)

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
MAIN_OBJ := $(MAIN_SRC:%.c=$(BUILD)/%.o)
UNIT_OBJ := $(UNIT_SRC:%.c=$(BUILD)/%.o)

VENV     := .venv
PY       := $(VENV)/bin/python

.PHONY: all run test deps deps-packages deps-tools unit integration asan asan-test tsan tsan-test fuzz fuzz-run valgrind bench bench-smoke bench-view clean \
	man man-deps install uninstall

TSAN_MODELS ?= epoll or pool

all: spindle spindle-stat

spindle: $(CORE_OBJ) $(MAIN_OBJ)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The statistics viewer reads the shared segment only: libc, no libinih/liburing.
STAT_SRC := tools/spindle-stat.c src/stats/snapshot.c
spindle-stat: $(STAT_SRC:%.c=$(BUILD)/%.o)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/unit_tests: $(UNIT_OBJ) $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS) -lcriterion

# The CPU spindle's HTTP/2 session and site spend per request, without sockets (docs/http.md).
$(BUILD)/h2_session_cpu: $(BUILD)/tools/h2_session_cpu.o $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

# A fresh machine gets the compiler and libraries first (a no-op when present).
run:
	@./scripts/install-deps.sh build
	$(MAKE) all
	./spindle --config server.conf --port $(PORT) $(if $(MODEL),--model $(MODEL))

# Test dependencies: Debian packages when missing, then the Go tools the tests
# run (Pebble, h2spec: built into build/go/bin) and Python packages in a local
# venv. The build needs the packages alone, so `make test` builds beside
# deps-tools.
deps: deps-packages
	@$(MAKE) --no-print-directory deps-tools

deps-packages:
	@./scripts/install-deps.sh packages

deps-tools:
	@./scripts/install-deps.sh tools
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q -r tests/requirements.txt

unit: $(BUILD)/unit_tests
	$(BUILD)/unit_tests --jobs 2

# The integration suite runs on PYTEST_JOBS pytest-xdist workers: most tests
# wait on timers and sockets, not on the CPU. A worker takes one (module,
# model) group at a time (conftest.py), so shared servers start once per group
# as in a serial run. The few tests marked `solo` need the CPU to themselves
# (busy work, threads that must stop spinning in time) and run afterwards,
# alone. PYTEST_JOBS=0 runs everything serially, in one process.
# (`make test` runs the suites in parts, side by side: see below.)
PYTEST_JOBS ?= 2
# $(call suite,REPORT,MARK EXPRESSION or empty,MORE PYTEST ARGUMENTS,ENVIRONMENT)
suite = $(4) $(PY) -m pytest -q -n $(PYTEST_JOBS) --dist loadgroup $(call junit,$(1)) \
	  -m '$(if $(2),($(2)) and )not solo' $(3) tests/integration && \
	$(4) $(PY) -m pytest -q $(call junit,$(1)-solo) -m '$(if $(2),($(2)) and )solo' $(3) tests/integration

integration: spindle
	$(call suite,integration)

# Every pytest run of `make test` writes a JUnit report here, every unit-test
# run a JSON one; the last step lists every skip with its reason, so none
# passes unread.
REPORTS  := build/test-reports
junit     = --junitxml=$(REPORTS)/$(1).xml

# ---- make test ----------------------------------------------------------
# scripts/test-stages.py runs the stages below: phases one after another, the
# lanes of a phase (separated by spaces) side by side, the stages of a lane
# (joined by +) in order. Each stage's output is printed whole when it ends,
# under a header naming it; a table at the end gives each stage's wall and CPU
# time and each phase's CPU share, ours and the machine's. Why this order:
# - packages: the Debian packages (a no-op when present).
# - prepare: everything the stages run, built by one make -j2 (spindle, the
#   unit tests, the ASan and TSan builds, the fuzz targets, the man pages):
#   the stages then build nothing, side by side. Beside it the Go tools and
#   the venv, then one collection of the integration suite (test-pycache).
# - crowd: what waits on timers and sockets, or tolerates a busy machine. The
#   plain, ASan and TSan suites without their `timing`, `quiet` and `solo`
#   tests, each on its own xdist workers (the sanitizer suites stretch their
#   bounds by SPINDLE_TIME_SCALE), then valgrind and the lab's report tests
#   after TSan. They keep both cores busy: every CPU-second added here adds
#   half a second.
# - timing: the tests whose subject is a duration or a CPU share over a
#   wall-clock window (`timing`), or that a busy machine fails otherwise
#   (`quiet`: a window the sanitizer time scale does not stretch), of the
#   three suites, with nothing CPU-bound beside them at their priority; the
#   CPU-bound stages (unit tests, the Debian package, fuzzing) run in the
#   idle scheduling class (IDLE, below) in the CPU time these tests leave.
#   Not the lab's report tests: one drives a real open-loop generator at a
#   rate against a server with answers 600 ms late, and starved by the idle
#   class it lost the last request of its second.
# - solo: the `solo` tests of each suite, then the benchmark lab's tests that
#   measure, one at a time on an otherwise idle machine.
# Every test of the former serial order runs, in the same build, once; the
# Makefile's `part`s of a suite (the mark expressions below) add up to all of it.
TEST_BUILD_JOBS ?= 2
CROWD_JOBS      ?= 3
TIMING_JOBS     ?= 2
# The CPU-bound stages beside the timing tests run in the idle scheduling
# class (SCHED_IDLE): they get only the CPU time no other process wants, and a
# process of a timing test that wakes takes its core from them at once. So
# they fill what the timing phase leaves idle (about 60% of both cores)
# instead of adding their CPU time to the crowd's, and the timing tests keep
# the machine as if they were alone on it.
IDLE            := chrt --idle 0
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	SPINDLE_TIME_SCALE=3 SPINDLE_BIN=./spindle-asan
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:exitcode=66 SPINDLE_TIME_SCALE=5 SPINDLE_BIN=./spindle-tsan
ASAN_MARKS := not campaign
TSAN_MARKS := not campaign and not not_under_tsan
# $(call part,REPORT,JOBS (0: serially),MARK EXPRESSION,MORE PYTEST ARGUMENTS,ENVIRONMENT)
part = $(5) $(PY) -m pytest -q $(if $(filter 0,$(2)),,-n $(2) --dist loadgroup) $(call junit,$(1)) \
	-m '$(3)' $(4) tests/integration

.PHONY: test-build test-pycache build-asan-all stage-unit stage-fuzz stage-valgrind stage-package stage-bench stage-bench-quiet \
	stage-plain stage-asan stage-tsan stage-plain-timing stage-asan-timing stage-tsan-timing \
	stage-plain-solo stage-asan-solo stage-tsan-solo

test:
	rm -rf $(REPORTS) && mkdir -p $(REPORTS)
	python3 scripts/test-stages.py --reports $(REPORTS) --make "$(MAKE)" \
	  'packages: deps-packages' \
	  'prepare: test-build deps-tools+test-pycache' \
	  'crowd: stage-plain stage-asan stage-tsan+stage-valgrind+stage-bench' \
	  'timing: stage-plain-timing stage-asan-timing+stage-tsan-timing stage-unit stage-package stage-fuzz' \
	  'solo: stage-plain-solo+stage-asan-solo+stage-tsan-solo+stage-bench-quiet'
	@$(PY) scripts/skip-summary.py $(REPORTS)

test-build:
	$(MAKE) -j$(TEST_BUILD_JOBS) all $(BUILD)/unit_tests build/parse_json man fuzz build-asan-all tsan \
	  build/tsan/cache_stress

# pytest rewrites the asserts of each test module it imports; kept in
# __pycache__ (ignored by git), the rewritten modules are read by the next
# process instead of made again (2.5 of the 3.8 CPU-s a collection of the
# integration suite takes). The crowd's nine workers start at once, so one
# collection beside the build writes them first (a spindle not yet built lists
# no models; the suites say so if it never is). An environment that forbids
# bytecode files (PYTHONDONTWRITEBYTECODE) would have every process make them.
unexport PYTHONDONTWRITEBYTECODE
test-pycache:
	$(PY) -m pytest -q --collect-only tests/integration >/dev/null

build-asan-all:
	$(MAKE) BUILD=build/asan CC=clang OPT="$(ASAN_OPT)" spindle-asan build/asan/unit_tests

# The stages: each expects test-build's results (they build nothing, so two
# side by side never write the same file).
stage-unit:
	$(IDLE) $(BUILD)/unit_tests --jobs 2 --json=$(REPORTS)/unit.json
	$(IDLE) build/asan/unit_tests --jobs 2 --json=$(REPORTS)/asan-unit.json
	TSAN_OPTIONS=halt_on_error=1:exitcode=66 $(IDLE) build/tsan/cache_stress

# A fuzzer's executions in its TEST_FUZZ_SECONDS are what it proves: in the
# idle class beside the timing tests it gets most of a core (in the crowd of
# the suites, at nice 0, fuzz_tls ran 482 inputs in its 8 s, fuzz_config 3,265);
# 8 s, not the 5 it had alone, since it shares the cores.
stage-fuzz:
	FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) FUZZ_TIMEOUT=$(FUZZ_TIMEOUT) $(IDLE) tests/fuzz/run.sh $(FUZZ_TARGETS)

stage-valgrind:
	./scripts/valgrind-check.sh

# tests/package builds the Debian package (make deb, in a copy of the
# checkout), installs it on this machine, serves with it and purges it.
stage-package:
	$(IDLE) $(PY) -m pytest -q $(call junit,package) tests/package

# The lab's tests that measure (latency percentiles, CPU and kernel counters
# of live processes) run alone; the rest (parsers, reports, plots) in the crowd.
BENCH_QUIET := test_openloop.py test_cpumeter.py test_kcounters.py test_floor.py
stage-bench:
	$(PY) -m pytest -q $(call junit,bench) $(BENCH_QUIET:%=--ignore=tests/bench/%) tests/bench
stage-bench-quiet:
	$(PY) -m pytest -q $(call junit,bench-quiet) $(BENCH_QUIET:%=tests/bench/%)

stage-plain:
	$(call part,integration,$(CROWD_JOBS),not timing and not quiet and not solo)
stage-asan:
	$(call part,asan,$(CROWD_JOBS),$(ASAN_MARKS) and not timing and not quiet and not solo,-x,$(ASAN_ENV))
stage-tsan:
	$(call part,tsan,$(CROWD_JOBS),$(TSAN_MARKS) and not timing and not quiet and not solo,-x -k "$(TSAN_MODELS)",$(TSAN_ENV))
stage-plain-timing:
	$(call part,integration-timing,$(TIMING_JOBS),(timing or quiet) and not solo)
stage-asan-timing:
	$(call part,asan-timing,$(TIMING_JOBS),$(ASAN_MARKS) and (timing or quiet) and not solo,-x,$(ASAN_ENV))
stage-tsan-timing:
	$(call part,tsan-timing,$(TIMING_JOBS),$(TSAN_MARKS) and (timing or quiet) and not solo,-x -k "$(TSAN_MODELS)",$(TSAN_ENV))
stage-plain-solo:
	$(call part,integration-solo,0,solo)
stage-asan-solo:
	$(call part,asan-solo,0,$(ASAN_MARKS) and solo,-x,$(ASAN_ENV))
stage-tsan-solo:
	$(call part,tsan-solo,0,$(TSAN_MARKS) and solo,-x -k "$(TSAN_MODELS)",$(TSAN_ENV))

# AddressSanitizer + UndefinedBehaviorSanitizer build, running the integration suite.
ASAN_OPT := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
asan:
	$(MAKE) BUILD=build/asan CC=clang OPT="$(ASAN_OPT)" spindle-asan

# Named by the sanitizer builds above: without their BUILD these would link
# the plain objects under a sanitizer's name, and tests would run unchecked.
spindle-asan: $(CORE_OBJ) $(MAIN_OBJ)
	$(if $(filter build/asan,$(BUILD)),,$(error spindle-asan is built by `make asan`, with BUILD=build/asan))
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

asan-test: asan
	$(call suite,asan,$(ASAN_MARKS),-x,$(ASAN_ENV))
	$(MAKE) BUILD=build/asan CC=clang OPT="$(ASAN_OPT)" build/asan/unit_tests
	@mkdir -p $(REPORTS)
	build/asan/unit_tests --jobs 2 --json=$(REPORTS)/asan-unit.json

TSAN_CFLAGS := -O1 -g -fsanitize=thread
tsan:
	$(MAKE) BUILD=build/tsan CC=clang OPT="$(TSAN_CFLAGS)" spindle-tsan

# ThreadSanitizer: the cache under concurrent stress, then the integration
# suite against the threaded models' TSan build.
tsan-test: tsan build/tsan/cache_stress
	TSAN_OPTIONS=halt_on_error=1:exitcode=66 build/tsan/cache_stress
	$(call suite,tsan,$(TSAN_MARKS),-x -k "$(TSAN_MODELS)",$(TSAN_ENV))

build/tsan/cache_stress: tests/tsan/cache_stress.c src/fs/cache.c src/http/date.c src/http/response.c src/http/parse.c
	@mkdir -p build/tsan
	clang $(CSTD) $(TSAN_CFLAGS) -pthread -o $@ $^

spindle-tsan: $(CORE_OBJ) $(MAIN_OBJ)
	$(if $(filter build/tsan,$(BUILD)),,$(error spindle-tsan is built by `make tsan`, with BUILD=build/tsan))
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

# libFuzzer targets (tests/fuzz/): the parser and path code alone, and the
# connection core, Range responses and the configuration over the whole core.
# UB aborts like any crash (-fno-sanitize-recover=all); see tests/fuzz/run.sh.
FUZZ_TARGETS := fuzz_parse fuzz_path fuzz_conn fuzz_range fuzz_config fuzz_tls fuzz_proxy fuzz_rules fuzz_h2
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS := $(CSTD) $(WARN) -O1 -g $(FUZZ_SAN) -DSPINDLE_VERSION='"$(VERSION)"'
FUZZ_SRC    := src/http/parse.c src/fs/path.c src/http/range.c src/http/date.c src/site/acme_challenge.c src/fs/file.c
FUZZ_OBJ    := $(CORE_SRC:%.c=build/fuzz/obj/%.o)
fuzz: $(FUZZ_TARGETS:%=build/fuzz/%)

build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -pthread -MMD -MP -c -o $@ $<

build/fuzz/fuzz_parse build/fuzz/fuzz_path: build/fuzz/%: tests/fuzz/%.c $(FUZZ_SRC)
	@mkdir -p build/fuzz
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^

# conn_driver.c includes src/http1/session.c, so the core's own session.o stays out.
build/fuzz/fuzz_conn build/fuzz/fuzz_range build/fuzz/fuzz_h2: build/fuzz/%: tests/fuzz/%.c tests/fuzz/conn_driver.c \
		tests/fuzz/fuzz_conn.h src/http1/session.c $(filter-out build/fuzz/obj/src/http1/session.o,$(FUZZ_OBJ))
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -pthread -o $@ $(filter-out %.h src/http1/session.c,$^) $(LDLIBS)

# The TLS wire's harness includes src/tls/wire.c as conn_driver.c does session.c.
build/fuzz/fuzz_tls: tests/fuzz/fuzz_tls.c tests/fuzz/tls_driver.c tests/fuzz/conn_driver.c tests/fuzz/fuzz_tls.h \
		tests/fuzz/fuzz_conn.h src/http1/session.c src/tls/wire.c \
		$(filter-out build/fuzz/obj/src/http1/session.o build/fuzz/obj/src/tls/wire.o,$(FUZZ_OBJ))
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -pthread -o $@ $(filter-out %.h src/http1/session.c src/tls/wire.c,$^) $(LDLIBS)

# The PROXY header parser alone: pure, so no core around it.
build/fuzz/fuzz_proxy: tests/fuzz/fuzz_proxy.c src/net/proxy_protocol.c
	@mkdir -p build/fuzz
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^

# Redirect rules over a client's path and Host (the steps link the core).
build/fuzz/fuzz_rules: tests/fuzz/fuzz_rules.c $(FUZZ_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -pthread -o $@ $^ $(LDLIBS)

build/fuzz/fuzz_config: tests/fuzz/fuzz_config.c $(FUZZ_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -pthread -o $@ $^ $(LDLIBS)

# The parser as JSON, for tests/integration/test_differential.py (against h11).
build/parse_json: tests/fuzz/parse_json.c src/http/parse.c
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ $^

# Every target for FUZZ_SECONDS after replaying its committed corpus; a
# crash, UB report, leak or an input slower than FUZZ_TIMEOUT fails the run
# and prints the input and how to reproduce it. `make test` replays every
# corpus in full (the regression check) but fuzzes each target for
# TEST_FUZZ_SECONDS only; `make fuzz-run` is the longer campaign.
FUZZ_SECONDS ?= 22
TEST_FUZZ_SECONDS ?= 8
FUZZ_TIMEOUT ?= 10
fuzz-run: fuzz
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TIMEOUT=$(FUZZ_TIMEOUT) tests/fuzz/run.sh $(FUZZ_TARGETS)

valgrind: spindle
	./scripts/valgrind-check.sh

# The benchmark lab: ab, nginx-light, lighttpd and h2o from Debian, vegeta built with
# Go into build/go/bin, matplotlib into the venv. `make bench` is the default run (about
# 26 min on 2 cores, at most 27 of the 30-minute budget: tests/bench/test_plan.py; `python -m bench --plan` prints
# the estimate, `BENCH_ARGS=--full` adds what the default leaves out): results in
# bench/results/<timestamp>/ (gitignored), published to docs/bench/.
# `make bench-smoke` checks the whole pipeline with tiny durations.
bench: spindle
	@./scripts/install-deps.sh bench
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) -m bench --publish docs/bench $(BENCH_ARGS)

bench-smoke: spindle
	@./scripts/install-deps.sh bench
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) -m bench --smoke $(BENCH_ARGS)

# The published report (docs/bench/index.html, with report.md and the data beside
# it) served by spindle itself, in the foreground until Ctrl-C.
BENCH_VIEW_PORT ?= 8081
bench-view: spindle
	@test -f docs/bench/index.html || { echo "docs/bench/index.html missing: make bench writes it" >&2; exit 1; }
	@echo "spindle lab report: http://127.0.0.1:$(BENCH_VIEW_PORT)/ (Ctrl-C stops the server)"
	./spindle --config server.conf --bind 127.0.0.1 --port $(BENCH_VIEW_PORT) --root docs/bench

clean:
	rm -rf build spindle spindle-asan spindle-tsan spindle-stat

# ---- man pages and installation -----------------------------------------
# Layout as Debian's packaging of daemons, under PREFIX: the server in sbin
# (a section-8 daemon), the viewer in bin, pages in share/man, the sample
# configuration in $(SYSCONFDIR)/spindle (/usr/local/etc for /usr/local, /etc
# for PREFIX=/usr), units where systemd looks for local ones. DESTDIR stages
# it all elsewhere (packaging, the test).
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(PREFIX)/lib/systemd/system
DOCROOT    ?= /var/www/html
MAN_PAGES  := build/man/spindle.8 build/man/spindle.conf.5 build/man/spindle-stat.1

# scdoc renders the pages: installed first on a fresh machine, as `make run`
# installs the compiler (a no-op when present).
man: man-deps $(MAN_PAGES)

man-deps:
	@./scripts/install-deps.sh man

$(MAN_PAGES): | man-deps

# The sources (pages, units) name the default paths; install writes the real ones.
PATHS_SED = sed -e 's|/usr/local/sbin|$(SBINDIR)|g' -e 's|/usr/local/etc|$(SYSCONFDIR)|g'

build/man/spindle.8 build/man/spindle-stat.1: build/man/%: docs/man/%.scd
	@mkdir -p $(dir $@)
	scdoc < $< > $@

# spindle.conf(5)'s key reference is generated from server.conf's comments:
# a key added there appears in the page, with its default.
build/man/spindle.conf.5: docs/man/spindle.conf.5.scd server.conf scripts/conf-keys.awk
	@mkdir -p $(dir $@)
	awk -f scripts/conf-keys.awk server.conf > $@.keys
	awk 'FNR == NR { keys = keys $$0 "\n"; next } /^@KEYS@$$/ { printf "%s", keys; next } { print }' \
	  $@.keys $< | scdoc > $@
	rm -f $@.keys

# The sample configuration is server.conf with the root Debian serves from;
# an existing one is the operator's and is left alone.
install: all man
	install -d "$(DESTDIR)$(SBINDIR)" "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(MANDIR)/man8" "$(DESTDIR)$(MANDIR)/man5" \
	  "$(DESTDIR)$(MANDIR)/man1" \
	  "$(DESTDIR)$(SYSCONFDIR)/spindle" "$(DESTDIR)$(UNITDIR)"
	install -m 755 spindle "$(DESTDIR)$(SBINDIR)/spindle"
	install -m 755 spindle-stat "$(DESTDIR)$(BINDIR)/spindle-stat"
	$(PATHS_SED) build/man/spindle.8 > build/man/spindle.8.installed
	$(PATHS_SED) build/man/spindle.conf.5 > build/man/spindle.conf.5.installed
	install -m 644 build/man/spindle.8.installed "$(DESTDIR)$(MANDIR)/man8/spindle.8"
	install -m 644 build/man/spindle.conf.5.installed "$(DESTDIR)$(MANDIR)/man5/spindle.conf.5"
	install -m 644 build/man/spindle-stat.1 "$(DESTDIR)$(MANDIR)/man1/spindle-stat.1"
	sed 's|^root = www$$|root = $(DOCROOT)|' server.conf > build/spindle.conf.sample
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/spindle/spindle.conf" ]; then \
	  echo "keeping $(DESTDIR)$(SYSCONFDIR)/spindle/spindle.conf (the sample is build/spindle.conf.sample)"; \
	else install -m 644 build/spindle.conf.sample "$(DESTDIR)$(SYSCONFDIR)/spindle/spindle.conf"; fi
	$(PATHS_SED) contrib/spindle.service > build/spindle.service
	install -m 644 build/spindle.service "$(DESTDIR)$(UNITDIR)/spindle.service"
	install -m 644 contrib/spindle.socket "$(DESTDIR)$(UNITDIR)/spindle.socket"

# Removes what install put there; a configuration the operator changed stays
# (as Debian keeps a changed conffile), and so do directories others use.
uninstall:
	rm -f "$(DESTDIR)$(SBINDIR)/spindle" "$(DESTDIR)$(BINDIR)/spindle-stat" \
	  "$(DESTDIR)$(MANDIR)/man8/spindle.8" "$(DESTDIR)$(MANDIR)/man5/spindle.conf.5" \
	  "$(DESTDIR)$(MANDIR)/man1/spindle-stat.1" \
	  "$(DESTDIR)$(UNITDIR)/spindle.service" "$(DESTDIR)$(UNITDIR)/spindle.socket"
	@conf="$(DESTDIR)$(SYSCONFDIR)/spindle/spindle.conf"; \
	if [ -e "$$conf" ]; then \
	  sed 's|^root = www$$|root = $(DOCROOT)|' server.conf | cmp -s - "$$conf" && rm -f "$$conf" \
	    || echo "keeping $$conf: it was changed after installation"; fi
	@rmdir "$(DESTDIR)$(SYSCONFDIR)/spindle" 2>/dev/null || true # not empty (a kept configuration), or gone

# ---- Debian package -----------------------------------------------------
# `make deb` builds $(DEB) with debhelper (debian/) from a copy of the
# checkout's files (tracked and new, not ignored ones), so the build leaves
# nothing in the checkout and the package lands beside the copy. lintian
# must find no error and no warning (debian/spindle.lintian-overrides says
# why each overridden tag is right for this package).
.PHONY: deb
DEB_DIR  := build/deb
DEB_ARCH  = $(shell dpkg --print-architecture)
DEB       = $(DEB_DIR)/spindle_$(VERSION)_$(DEB_ARCH).deb
deb:
	@v=$$(dpkg-parsechangelog -S Version); [ "$$v" = "$(VERSION)" ] || \
	  { echo "make deb: debian/changelog is at $$v, the Makefile at $(VERSION): add a changelog entry (dch -v $(VERSION))" >&2; exit 1; }
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/spindle-$(VERSION)
	git ls-files -z --cached --others --exclude-standard -- . ':!.venv' | \
	  tar --null -T - --ignore-failed-read -cf - | tar -xf - -C $(DEB_DIR)/spindle-$(VERSION)
	cd $(DEB_DIR)/spindle-$(VERSION) && DEB_BUILD_OPTIONS="parallel=$$(nproc) $$DEB_BUILD_OPTIONS" \
	  dpkg-buildpackage -us -uc -b
	lintian --fail-on error,warning $(DEB)
	@echo "make deb: $(DEB)"

-include $(CORE_OBJ:.o=.d) $(wildcard build/fuzz/obj/src/*.d build/fuzz/obj/src/*/*.d) $(MAIN_OBJ:.o=.d) $(UNIT_OBJ:.o=.d) $(BUILD)/tools/spindle-stat.d

# Micro-benchmark: CPU per 16 KiB request head arriving one byte per read.
$(BUILD)/parse_trickle: bench/parse_trickle.c src/http/parse.c
	@mkdir -p $(BUILD)
	$(CC) $(CSTD) $(WARN) -O2 $(CFLAGS) -o $@ $^
