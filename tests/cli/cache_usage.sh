#!/bin/sh
# bagcache cache: --help at every level, and usage errors (exit 2, message
# and hint on stderr, nothing on stdout, no cache created).
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
commands="info count get fill verify export clear"

t "bagcache --help lists the cache group"
bc --help
want_rc 0
check grep -q '^  cache  ' out

t "bagcache cache --help lists every command"
bc cache --help
want_rc 0
want_quiet_err
check grep -q '^Usage: bagcache cache COMMAND' out
for cmd in $commands; do
  check grep -q "^  $cmd " out
done

for cmd in $commands; do
  t "bagcache cache $cmd --help"
  bc cache "$cmd" --help
  want_rc 0
  want_quiet_err
  check grep -q "^Usage: bagcache cache $cmd " out
  bc cache "$cmd" -h
  want_rc 0
  check grep -q "^Usage: bagcache cache $cmd " out
done

t "fill --help documents every option and the frame format"
bc cache fill --help
for opt in --from --shard-records --shard-size --limit --level --info \
  --progress --no-progress --verbose; do
  check grep -q -e "$opt" out
done
check grep -q 'little-endian' out

# usage ARGS...: exit 2, nothing on stdout, the hint on stderr, no root.
usage() {
  bc "$@"
  want_rc 2
  want_out ''
  want_err "Try 'bagcache cache"
  check [ ! -e r ]
}

t "missing or unknown command"
usage cache
want_err 'bagcache cache: missing command'
usage cache frob r
want_err "bagcache cache: unknown command 'frob'"

t "missing operands"
for cmd in info count verify clear export; do
  usage cache "$cmd"
  want_err 'missing ROOT'
done
usage cache export r
want_err 'missing OUT'
usage cache get r
want_err 'missing INDEX'
usage cache fill
want_err 'missing ROOT'

t "unexpected operands and unknown options"
usage cache info r s
want_err "unexpected argument 's'"
usage cache verify r --json
want_err "unrecognized option '--json'"
usage cache get r 1x
want_err "invalid index '1x'"
usage cache get r 0 --frob
want_err "unrecognized option '--frob'"

t "fill: the command must follow --"
usage cache fill r
want_err "missing '-- COMMAND'"
usage cache fill r --
want_err "missing COMMAND after '--'"
usage cache fill r seq 1 3
want_err "unexpected argument 'seq' (the command goes after '--')"

t "fill: bad option values"
usage cache fill r --shard-records 0 -- true
want_err "invalid record count '0'"
usage cache fill r --shard-records -5 -- true
usage cache fill r --shard-size 0 -- true
want_err "invalid shard size '0'"
# (1.5M and 64MB are sizes now: bc_parse_size, cache_fill.sh.)
for bad in 1.5.2M 64MBB 10X M '' -1 1e3 18446744073709551616 16777216T; do
  usage cache fill r --shard-size "$bad" -- true
  want_err 'invalid shard size'
  usage cache fill r --limit "$bad" -- true
  want_err 'invalid limit'
done
usage cache fill r --level 23 -- true
want_err "invalid level '23' (expected -131072 to 22)"
usage cache fill r --from csv -- true
want_err "invalid input format 'csv' (expected lines or frames)"
usage cache fill r --info '{"a":' -- true
want_err 'invalid JSON for --info'
usage cache fill r --shard-records 5 --shard-size 1K -- true
want_err '--shard-records and --shard-size cannot be used together'
usage cache fill r --limit
want_err "option '--limit' requires an argument"

t "sizes with suffixes are accepted (K, M, G, T, also KB, KiB, ...; any case)"
bc cache fill k --shard-size 1k --limit 1T -v -- seq 1 3
want_rc 0
check grep -q ', limit 1099511627776); ' out
bc cache fill k2 --shard-records 10 --limit 3g -v -- seq 1 3
want_rc 0
check grep -q ', limit 3221225472); ' out
bc cache fill k3 --shard-records 10 --limit 7m -v -- seq 1 3
check grep -q ', limit 7340032); ' out

t "options after the command are the command's"
bc cache fill a --shard-records 2 -- printf '%s\n' --limit -v
want_rc 0
want_out ''
bc cache get --text a 0 1
want_out '%s\n%s\n' --limit -v

finish
