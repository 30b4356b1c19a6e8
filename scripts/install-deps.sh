#!/usr/bin/env bash
# Install the Debian packages spindle's build and tests need, only when missing.
#   scripts/install-deps.sh         build + test dependencies
#   scripts/install-deps.sh build   only what building spindle needs (make run)
#   scripts/install-deps.sh man     only what building the man pages needs (make man)
#   scripts/install-deps.sh bench   also the benchmark lab tools (ab; nginx, lighttpd, h2o as peers; wrk and
#                                   nghttp2-client (h2load, the h2 experiment's generator) are test dependencies;
#                                   linux-perf: the manifest asks perf whether hardware counters exist)
#                                   and vegeta (open-loop load), built with the machine's Go into build/go/bin
# The tests also need Pebble (Let's Encrypt's test ACME server, for the certbot round trip) and h2spec
# (the HTTP/2 conformance suite), built the same way into build/go/bin.
#   scripts/install-deps.sh packages  the build + test Debian packages only, not those Go tools
#   scripts/install-deps.sh tools   those Go tools only (after packages: make test builds them beside
#                                   the build, which needs the packages alone)
# Idempotent; prints one line when everything is already installed.
set -euo pipefail

build_packages=(build-essential libinih-dev liburing-dev libssl-dev libnghttp2-dev pkg-config)
packages=(
  "${build_packages[@]}" clang libcriterion-dev openssl
  libclang-rt-14-dev valgrind curl python3-venv python3-pip wrk
  # man pages (scdoc builds them, man and groff check them), unit verification
  # (systemd-analyze), the scale-out test (haproxy)
  scdoc man-db groff-base systemd haproxy
  strace  # holds the master in a syscall so a test can race it (test_listen.py)
  # the Debian package: make deb builds it from a copy of the checkout's files (git),
  # lintian checks it, test_deb.py installs it (logrotate checks its rotation file)
  debhelper lintian git logrotate
  certbot  # the ACME round trip (test_acme.py), against Pebble (below)
  # nghttp: several HTTP/2 streams on one connection (test_http2.py; curl 7.88
  # fails a second stream on a prior-knowledge connection, against any server)
  nghttp2-client
  # headless Chromium loads a page of 100 images over HTTP/2 (test_http2.py): Debian's own build
  chromium
)

for arg in "$@"; do
  case "$arg" in
    build) packages=("${build_packages[@]}") ;;
    man) packages=(scdoc) ;;
    bench) packages+=(apache2-utils nginx-light lighttpd h2o linux-perf) ;;
    packages|tools) ;;
    -h|--help) echo "usage: $0 [build|man|bench|packages|tools]"; exit 0 ;;
    *) echo "install-deps: unknown argument: $arg (expected: build, man, bench, packages or tools)" >&2; exit 2 ;;
  esac
done

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

want_vegeta=false
want_pebble=true  # test dependencies: not for build or man alone
want_packages=true
for arg in "$@"; do
  case "$arg" in
    bench) want_vegeta=true ;;
    build|man|packages) want_pebble=false ;;
    tools) want_packages=false ;;
  esac
done

# The machine's Go toolchain, or nothing (then say what is missing).
find_go() {
  if command -v go >/dev/null 2>&1; then echo go
  elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go
  fi
}

# vegeta: a constant-rate (open-loop) generator for the lab's latency-vs-offered-load
# curves. Pinned version, built from the Go module proxy with the Go toolchain
# already on the machine, into the repository (never system-wide).
VEGETA_VERSION=v12.13.0
install_vegeta() {
  local bin dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/build/go/bin"
  bin="$dir/vegeta"
  if [ -x "$bin" ] && "$bin" -version 2>/dev/null | grep -q "${VEGETA_VERSION#v}"; then
    return 0
  fi
  local go
  go=$(find_go)
  if [ -z "$go" ]; then
    echo "install-deps: vegeta needs a Go toolchain (go); install one or put vegeta in $dir" >&2
    return 1
  fi
  mkdir -p "$dir"
  echo "deps: building vegeta $VEGETA_VERSION into $dir"
  GOBIN="$dir" GOFLAGS=-modcacherw "$go" install \
    -ldflags "-X main.Version=${VEGETA_VERSION#v}" "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
}

# Pebble: Let's Encrypt's ACME test server, and its DNS companion
# pebble-challtestsrv (it answers every name with 127.0.0.1, so Pebble
# validates against the spindle under test). Pinned, built from the Go module
# proxy into the repository like vegeta; a binary counts as installed when its
# embedded module version is the pinned one.
PEBBLE_VERSION=v2.10.1
install_pebble() {
  local dir go cmd ok=true
  dir="$(cd "$(dirname "$0")/.." && pwd)/build/go/bin"
  go=$(find_go)
  for cmd in pebble pebble-challtestsrv; do
    if [ -z "$go" ] || ! [ -x "$dir/$cmd" ] ||
       ! "$go" version -m "$dir/$cmd" 2>/dev/null | grep -q "mod[[:space:]]*github.com/letsencrypt/pebble/v2[[:space:]]*$PEBBLE_VERSION"; then
      ok=false
    fi
  done
  $ok && return 0
  if [ -z "$go" ]; then
    echo "install-deps: Pebble needs a Go toolchain (go); install one or put pebble and pebble-challtestsrv in $dir" >&2
    return 1
  fi
  mkdir -p "$dir"
  echo "deps: building pebble $PEBBLE_VERSION into $dir"
  GOBIN="$dir" GOFLAGS=-modcacherw "$go" install \
    -ldflags "-X main.version=$PEBBLE_VERSION" \
    "github.com/letsencrypt/pebble/v2/cmd/pebble@$PEBBLE_VERSION" \
    "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$PEBBLE_VERSION"
}

# h2spec: HTTP/2 conformance (RFC 7540/9113, HPACK) over h2c and TLS
# (test_http2.py). Pinned and built like Pebble; the tag predates Go modules,
# hence +incompatible.
H2SPEC_VERSION=v2.2.1+incompatible
install_h2spec() {
  local dir go
  dir="$(cd "$(dirname "$0")/.." && pwd)/build/go/bin"
  go=$(find_go)
  if [ -n "$go" ] && [ -x "$dir/h2spec" ] &&
     "$go" version -m "$dir/h2spec" 2>/dev/null | grep -q "mod[[:space:]]*github.com/summerwind/h2spec[[:space:]]*$H2SPEC_VERSION"; then
    return 0
  fi
  if [ -z "$go" ]; then
    echo "install-deps: h2spec needs a Go toolchain (go); install one or put h2spec in $dir" >&2
    return 1
  fi
  mkdir -p "$dir"
  echo "deps: building h2spec $H2SPEC_VERSION into $dir"
  GOBIN="$dir" GOFLAGS=-modcacherw "$go" install "github.com/summerwind/h2spec/cmd/h2spec@$H2SPEC_VERSION"
}

if ! $want_packages; then
  if $want_vegeta; then install_vegeta; fi
  if $want_pebble; then install_pebble; install_h2spec; fi
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "$p" >/dev/null 2>&1 || ! is_installed "$p"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "deps: all present"
  if $want_vegeta; then install_vegeta; fi
  if $want_pebble; then install_pebble; install_h2spec; fi
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  "${missing[@]}" >/dev/null
echo "deps: installed ${#missing[@]} package(s)"
if $want_vegeta; then install_vegeta; fi
if $want_pebble; then install_pebble; install_h2spec; fi
