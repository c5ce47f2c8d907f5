# tests/cli/lib.sh - sourced by the tests of the `bagcache` command.
#
# Provides: $BAGCACHE (the program), $DATA (tests/cli/data), $tmp (a fresh
# directory removed on exit), and assertions that count failures instead of
# stopping, so one run reports every broken expectation:
#
#   t "what is being checked"     names the following assertions
#   bc ARGS...                    runs bagcache: stdout in $tmp/out, stderr
#                                 in $tmp/err, exit status in $rc
#   bc_in FILE ARGS...            the same with standard input from FILE
#   want_rc N                     exit status was N
#   want_out FORMAT [ARGS...]     stdout is exactly printf FORMAT ARGS
#   want_out_file FILE            stdout is byte-identical to FILE
#   want_err TEXT                 stderr contains TEXT (fixed string)
#   want_quiet_err                stderr is empty
#   check CONDITION...            a test(1)-style or command condition holds
#   finish                        exit 0 if nothing failed, else 1
#
# Plain POSIX sh: runs under dash.

BC_BUILDDIR=${BC_BUILDDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BC_SRCDIR=${BC_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BAGCACHE=$BC_BUILDDIR/bagcache
# shellcheck disable=SC2034 # used by the tests that source this file
DATA=$BC_SRCDIR/tests/cli/data

if [ ! -x "$BAGCACHE" ]; then
  echo "$0: $BAGCACHE not built" >&2
  exit 99 # automake: hard error
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bagcache-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

failures=0
checks=0
what="(start)"
rc=0

t() { what=$*; }

fail() {
  failures=$((failures + 1))
  printf 'FAIL: %s: %s\n' "$what" "$*" >&2
}

bc() {
  "$BAGCACHE" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

bc_in() {
  _in=$1
  shift
  "$BAGCACHE" "$@" <"$_in" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

want_rc() {
  checks=$((checks + 1))
  [ "$rc" -eq "$1" ] ||
    fail "exit status $rc, expected $1; stderr: $(head -c 400 "$tmp/err")"
}

# Shows a file's bytes for a failure message (first 256 bytes, as od -c).
show() { od -An -c "$1" | head -n 8; }

want_out() {
  checks=$((checks + 1))
  _fmt=$1
  shift
  # The format is deliberately a variable: callers pass printf escapes.
  # shellcheck disable=SC2059
  printf "$_fmt" "$@" >"$tmp/want"
  cmp -s "$tmp/out" "$tmp/want" ||
    fail "stdout differs; got:
$(show "$tmp/out")
expected:
$(show "$tmp/want")"
}

want_out_file() {
  checks=$((checks + 1))
  cmp -s "$tmp/out" "$1" ||
    fail "stdout differs from $1; got:
$(show "$tmp/out")"
}

want_err() {
  checks=$((checks + 1))
  grep -F -q -e "$1" "$tmp/err" ||
    fail "stderr lacks '$1'; stderr: $(head -c 400 "$tmp/err")"
}

want_quiet_err() {
  checks=$((checks + 1))
  [ ! -s "$tmp/err" ] || fail "unexpected stderr: $(head -c 400 "$tmp/err")"
}

check() {
  checks=$((checks + 1))
  "$@" || fail "condition failed: $*"
}

# sha256 of a file, hex only.
sha() { sha256sum "$1" | cut -d' ' -f1; }

# File size in bytes.
size() { wc -c <"$1" | tr -d ' '; }

# Lowercase hex of a file's bytes, no separators (like bagcache's --hex).
hexof() { od -An -v -tx1 "$1" | tr -d ' \n'; }

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$0: $failures of $checks checks failed" >&2
    exit 1
  fi
  echo "$0: all $checks checks passed"
  exit 0
}
