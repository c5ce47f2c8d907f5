#!/usr/bin/env bash
# Makes a fresh Debian/Ubuntu clone ready to build, then builds.
#
#   ./bootstrap.sh          install missing build dependencies, autoreconf,
#                           configure (in build/) and make
#   ./bootstrap.sh check    ... then run every test (make check)
#   ./bootstrap.sh demo     ... then run the demos: a slow iterator cached
#                           under a disk limit (Python), then a bag written
#                           and read back (C)
#
# Extra arguments after the mode go to ./configure, e.g.
#   ./bootstrap.sh check PYTHON=/usr/bin/python3
# Environment: BUILD_DIR (default build), JOBS (default: number of CPUs).
set -euo pipefail

mode=build
case "${1:-}" in
  check|demo|build) mode=$1; shift ;;
  -h|--help)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
esac

top=$(cd "$(dirname "$0")" && pwd)
cd "$top"
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# Debian packages the build and the tests need.
packages=(gcc make autoconf automake libtool pkg-config
          libzstd-dev liblmdb-dev libjansson-dev libcmocka-dev libsqlite3-dev
          python3-dev python3-pytest python3-numpy)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
    || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x configure ] || [ configure.ac -nt configure ]; then
  echo "bootstrap: autoreconf"
  autoreconf --install --force
fi

mkdir -p "$build_dir"
cd "$build_dir"
if [ ! -f Makefile ] || [ "$#" -gt 0 ]; then
  echo "bootstrap: configure $*"
  "$top/configure" "$@"
fi
make -j"$jobs"

case "$mode" in
  check)
    # (make check itself names the Python tests it skipped, and why.)
    make -j"$jobs" check ;;
  demo)
    make -j"$jobs" demo ;;
esac
