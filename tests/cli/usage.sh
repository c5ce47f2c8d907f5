#!/bin/sh
# bagcache: --help and --version at every level, and usage errors (exit 2,
# message and hint on stderr, nothing on stdout, nothing written).
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

abc=$DATA/abc_tail.bag

t "bagcache --help"
bc --help
want_rc 0
want_quiet_err
check grep -q '^Usage: bagcache ' "$tmp/out"
check grep -q '^  bag  ' "$tmp/out"

t "bagcache -h"
bc -h
want_rc 0
check grep -q '^Usage: bagcache ' "$tmp/out"

t "bagcache --version"
bc --version
want_rc 0
want_quiet_err
want_out 'bagcache 0.1.0 (library 0.1.0)\n'

t "bagcache bag --help lists every command"
bc bag --help
want_rc 0
want_quiet_err
check grep -q '^Usage: bagcache bag COMMAND' "$tmp/out"
for cmd in info count get dump write verify; do
  check grep -q "^  $cmd " "$tmp/out"
done

for cmd in info count get dump write verify; do
  t "bagcache bag $cmd --help"
  bc bag "$cmd" --help
  want_rc 0
  want_quiet_err
  check grep -q "^Usage: bagcache bag $cmd " "$tmp/out"
  t "bagcache bag $cmd -h"
  bc bag "$cmd" -h
  want_rc 0
  check grep -q "^Usage: bagcache bag $cmd " "$tmp/out"
done

t "reading commands document the reader options"
for cmd in info count get dump verify; do
  bc bag "$cmd" --help
  for opt in --separate-limits --interleaved --compression --dictionary \
    --limits-in-memory --cache-policy --access --threads; do
    check grep -q -e "$opt" "$tmp/out"
  done
done

t "--help after operands still prints help (no file is opened)"
bc bag get "$tmp/missing.bag" 0 --help
want_rc 0
check grep -q '^Usage: bagcache bag get ' "$tmp/out"

# A usage error: exit 2, MESSAGE on stderr with a hint, stdout empty.
usage_error() {
  _hint=$1
  _msg=$2
  want_rc 2
  want_err "$_msg"
  want_err "Try '$_hint --help' for more information."
  check [ ! -s "$tmp/out" ]
}

t "no arguments"
bc
usage_error bagcache "bagcache: missing command"

t "unknown group"
bc nosuch
usage_error bagcache "bagcache: unknown command 'nosuch'"

t "unknown top-level option"
bc --bogus
usage_error bagcache "bagcache: unrecognized option '--bogus'"

t "--version with an argument"
bc --version x
usage_error bagcache "--version takes no arguments"

t "bag without a command"
bc bag
usage_error "bagcache bag" "bagcache bag: missing command"

t "unknown bag command"
bc bag frobnicate
usage_error "bagcache bag" "bagcache bag: unknown command 'frobnicate'"

t "unknown long option"
bc bag count --bogus "$abc"
usage_error "bagcache bag count" \
  "bagcache bag count: unrecognized option '--bogus'"

t "unknown long option after the operand"
bc bag dump "$abc" --bogus
usage_error "bagcache bag dump" "unrecognized option '--bogus'"

t "unknown short option"
bc bag count -x "$abc"
usage_error "bagcache bag count" "unrecognized option '-x'"

t "ambiguous abbreviation (--c: --compression, --cache-policy)"
bc bag count --c none "$abc"
usage_error "bagcache bag count" "option '--c' is ambiguous"

t "argument to an option that takes none"
bc bag dump --hex=1 "$abc"
usage_error "bagcache bag dump" "option '--hex' doesn't allow an argument"

t "missing option argument at the end"
bc bag dump "$abc" --threads
usage_error "bagcache bag dump" "option '--threads' requires an argument"

t "missing SPEC"
bc bag count
usage_error "bagcache bag count" "missing SPEC"

t "two SPECs"
bc bag info "$abc" "$abc"
usage_error "bagcache bag info" "unexpected argument"

t "verify: two SPECs"
bc bag verify "$abc" x
usage_error "bagcache bag verify" "unexpected argument 'x'"

t "dump: extra operand"
bc bag dump "$abc" 1
usage_error "bagcache bag dump" "unexpected argument '1'"

t "dump: negative number is an option there"
bc bag dump "$abc" -1
usage_error "bagcache bag dump" "unrecognized option '-1'"

t "get: missing INDEX"
bc bag get "$abc"
usage_error "bagcache bag get" "missing INDEX"

t "get: index not a number"
bc bag get "$abc" 1x
usage_error "bagcache bag get" "invalid index '1x'"

t "get: index with a plus sign"
bc bag get "$abc" +1
usage_error "bagcache bag get" "invalid index '+1'"

t "get: index beyond 64 bits"
bc bag get "$abc" 99999999999999999999
usage_error "bagcache bag get" "invalid index '99999999999999999999'"

t "get: empty index"
bc bag get "$abc" ''
usage_error "bagcache bag get" "invalid index ''"

t "bad --threads"
for n in abc -1 4097 1.5 ''; do
  bc bag dump --threads "$n" "$abc"
  usage_error "bagcache bag dump" "invalid thread count '$n'"
done

t "bad --compression"
bc bag count --compression gzip "$abc"
usage_error "bagcache bag count" "invalid compression 'gzip'"

t "bad --cache-policy"
bc bag count --cache-policy never "$abc"
usage_error "bagcache bag count" "invalid cache policy 'never'"

t "bad --access"
bc bag count --access later "$abc"
usage_error "bagcache bag count" "invalid access pattern 'later'"

cd "$tmp" || exit 99

t "write: missing OUT"
bc_in /dev/null bag write
usage_error "bagcache bag write" "missing OUT"

t "write: two OUTs"
bc_in /dev/null bag write a.bag b.bag
usage_error "bagcache bag write" "unexpected argument 'b.bag'"
check [ ! -e a.bag ]

for level in 23 -131073 abc 3x ''; do
  t "write: bad --level '$level'"
  bc_in /dev/null bag write --level "$level" o.bag
  usage_error "bagcache bag write" "invalid level '$level'"
  check [ ! -e o.bag ]
done

t "write: bad --from"
bc_in /dev/null bag write --from csv o.bag
usage_error "bagcache bag write" "invalid input format 'csv'"

t "write: bad --compression"
bc_in /dev/null bag write --compression lz4 o.bag
usage_error "bagcache bag write" "invalid compression 'lz4'"

t "write: --compression none with --level"
bc_in /dev/null bag write --compression none --level 3 o.bag
usage_error "bagcache bag write" "--level needs zstd compression"

t "write: --compression none with --dictionary"
bc_in /dev/null bag write --dictionary "$abc" --compression none o.bag
usage_error "bagcache bag write" "--dictionary needs zstd compression"

t "write: reader options are not write options"
bc_in /dev/null bag write --interleaved o.bag
usage_error "bagcache bag write" "unrecognized option '--interleaved'"
check [ ! -e o.bag ]

t "abbreviated long option is accepted"
bc bag count --limits-in "$abc"
want_rc 0
want_out '3\n'

t "-- ends the options"
bc bag get "$abc" -- -1
want_rc 0
want_out 'catcat'

finish
