#!/bin/sh
# bagcache bag info/count/get/dump: exact output for a known bag, every
# output format, negative indices, out-of-range errors, every reader option,
# separate limits, and a closed pipe.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
abc=$DATA/abc_tail.bag

t "count"
bc bag count "$abc"
want_rc 0
want_out '3\n'
want_quiet_err

t "info of a single tail-limits file"
bc bag info "$abc"
want_rc 0
want_quiet_err
want_out 'records: 3\nshards: 1\nrecords bytes: 15\nfile bytes: 39\ncompression: none\nlimits: tail\nlayout: concatenated\n'

t "get: raw bytes, concatenated, in the order given"
bc bag get "$abc" 0
want_rc 0
want_out 'abcdef'
want_quiet_err
bc bag get "$abc" 0 2 1
want_out 'abcdefcatcat123'
bc bag get "$abc" 1 1 1
want_out '123123123'

t "get: negative indices count from the end"
bc bag get "$abc" -1
want_rc 0
want_out 'catcat'
bc bag get "$abc" -3 -2
want_rc 0
want_out 'abcdef123'
bc bag get "$abc" -1 0 -0
want_out 'catcatabcdefabcdef'

t "get --hex / --base64 / --text: one record per line"
bc bag get --hex "$abc" 0 -2
want_rc 0
want_out '616263646566\n313233\n'
bc bag get "$abc" 2 --base64
want_out 'Y2F0Y2F0\n'
bc bag get "$abc" 0 -1 --text
want_out 'abcdef\ncatcat\n'
bc bag get "$abc" 0 --text --raw
want_out 'abcdef'
bc bag get "$abc" 0 --hex --base64
want_out 'YWJjZGVm\n'

t "get: index out of range"
bc bag get "$abc" 3
want_rc 1
want_out ''
want_err 'bagcache: index out of range: index 3 is out of range for 3 records'
bc bag get "$abc" -4
want_rc 1
want_err 'bagcache: index out of range: index -4 is out of range for 3 records'
bc bag get "$abc" 9223372036854775807
want_rc 1
want_err 'index 9223372036854775807 is out of range'

t "get: all indices are checked before anything is printed"
bc bag get "$abc" 0 1 3
want_rc 1
want_out ''

t "dump: hex by default"
bc bag dump "$abc"
want_rc 0
want_quiet_err
want_out '616263646566\n313233\n636174636174\n'

t "dump --base64 and --text"
bc bag dump --base64 "$abc"
want_rc 0
want_out 'YWJjZGVm\nMTIz\nY2F0Y2F0\n'
bc bag dump "$abc" --text
want_rc 0
want_out 'abcdef\n123\ncatcat\n'

t "dump --raw concatenates"
bc bag dump --raw "$abc"
want_out 'abcdef123catcat'

t "--text refuses a record with a newline (after printing those before)"
printf '78\n610a62\n7a\n' >in
bc_in in bag write --from hex nl.bag
want_rc 0
bc bag dump --text nl.bag
want_rc 1
want_out 'x\n'
want_err 'bagcache: cannot print as text: record 1 contains a newline'
bc bag get --text nl.bag 2 1
want_rc 1
want_out 'z\n'
want_err 'record 1 contains a newline'
bc bag get nl.bag 1
want_rc 0
want_out 'a\nb'
bc bag dump --base64 nl.bag
want_out 'eA==\nYQpi\neg==\n'

# A larger bag: 3000 numbered text lines, records of 0..~30 bytes.
awk 'BEGIN { for (i = 0; i < 3000; i++) {
  if (i % 7 == 3) print ""; else printf "record %d %s\n", i, substr("abcdefghijklmnopqrstuvwxyz", 1, i % 27) } }' >lines
bc_in lines bag write big.bag
t "a 3000-record bag: count, text round trip"
want_rc 0
bc bag count big.bag
want_out '3000\n'
bc bag dump --text big.bag
want_rc 0
want_out_file lines

t "dump --base64 agrees with base64(1) record by record"
bc bag dump --base64 big.bag
cp "$tmp/out" dump64
n=0
ok=yes
while IFS= read -r line && [ $n -lt 60 ]; do
  enc=$(printf '%s' "$line" | base64 -w0)
  got=$(sed -n "$((n + 1))p" dump64)
  [ "$enc" = "$got" ] || ok="no: record $n: '$got' != '$enc'"
  n=$((n + 1))
done <lines
check [ "$ok" = yes ]
check [ "$(wc -l <dump64)" -eq 3000 ]

t "dump --hex agrees with od(1)"
bc bag get --hex big.bag 1234
printf '%s' "$(sed -n 1235p lines)" >rec
check [ "$(cat "$tmp/out")" = "$(hexof rec)" ]
bc bag get big.bag 1234
want_out_file rec

t "get -1 on the big bag"
bc bag get --text big.bag -1 -3000
want_out '%s\n%s\n' "$(sed -n 3000p lines)" "$(sed -n 1p lines)"

# Every reader option must leave the records unchanged.
for opts in "--threads 1" "--threads 2" "--threads 0" "--limits-in-memory" \
  "--cache-policy system" "--cache-policy drop" "--cache-policy direct" \
  "--access random" "--access sequential" "--access system" \
  "--compression none" "--compression auto" \
  "--threads=2 --access=random --cache-policy=drop --limits-in-memory"; do
  t "dump with $opts"
  # shellcheck disable=SC2086
  bc bag dump --text big.bag $opts
  want_rc 0
  want_out_file lines
  # shellcheck disable=SC2086
  bc bag get $opts big.bag 7 -1 2999 0
  want_rc 0
  want_out '%s%s%s%s' "$(sed -n 8p lines)" "$(sed -n 3000p lines)" \
    "$(sed -n 3000p lines)" "$(sed -n 1p lines)"
done

t "separate limits: read with --separate-limits"
printf 'abcdef\n123\ncatcat\n' >in
bc_in in bag write --separate-limits sep.bag
want_rc 0
bc bag dump --text --separate-limits sep.bag
want_rc 0
want_out 'abcdef\n123\ncatcat\n'
bc bag get sep.bag -1 --separate-limits
want_out 'catcat'
bc bag count --separate-limits --limits-in-memory sep.bag
want_out '3\n'
bc bag info --separate-limits sep.bag
want_out 'records: 3\nshards: 1\nrecords bytes: 15\nfile bytes: 39\ncompression: none\nlimits: separate\nlayout: concatenated\n'

t "separate-limits file read as tail limits is corrupt"
bc bag count sep.bag
want_rc 1
want_err 'bagcache: corrupt data: '
want_out ''

t "tail file read with --separate-limits: no limits file"
bc bag count --separate-limits "$abc"
want_rc 1
want_err 'bagcache: not found: '
want_err 'limits.abc_tail.bag'

t "missing file"
bc bag count nosuch.bag
want_rc 1
want_out ''
want_err 'bagcache: not found: '
want_err 'nosuch.bag'
bc bag dump nosuch.bag
want_rc 1
bc bag info nosuch.bag
want_rc 1

t "a directory is not a bag"
mkdir adir
bc bag count adir
want_rc 1
want_err 'bagcache: '

t "an empty spec is an empty bag"
bc bag count ''
want_rc 0
want_out '0\n'
bc bag info ''
want_rc 0
want_out 'records: 0\nshards: 0\nrecords bytes: 0\nfile bytes: 0\ncompression: n/a\nlimits: tail\nlayout: concatenated\n'
bc bag dump ''
want_rc 0
want_out ''
bc bag get '' 0
want_rc 1
want_err 'index 0 is out of range for 0 records'
bc bag get '' -1
want_rc 1

t "empty file: zero records"
: >empty.bag
bc bag info empty.bag
want_rc 0
want_out 'records: 0\nshards: 1\nrecords bytes: 0\nfile bytes: 0\ncompression: none\nlimits: tail\nlayout: concatenated\n'

t "empty records print as empty lines"
printf '\n\nx\n\n' >in
bc_in in bag write holes.bag
bc bag dump holes.bag
want_out '\n\n78\n\n'
bc bag dump --base64 holes.bag
want_out '\n\neA==\n\n'
bc bag get holes.bag 0 1 3
want_out ''
want_rc 0

t "a closed pipe ends the command quietly with status 1"
awk 'BEGIN { for (i = 0; i < 40000; i++) print "record number " i }' >many
bc_in many bag write many.bag
{
  "$BAGCACHE" bag dump --text many.bag 2>"$tmp/pipe.err"
  echo $? >"$tmp/pipe.rc"
} | head -n 1 >"$tmp/pipe.out"
check [ "$(cat "$tmp/pipe.rc")" = 1 ]
check [ ! -s "$tmp/pipe.err" ]
check [ "$(cat "$tmp/pipe.out")" = "record number 0" ]

t "a write error on stdout is reported"
if [ -w /dev/full ]; then
  "$BAGCACHE" bag dump "$abc" >/dev/full 2>"$tmp/err"
  rc=$?
  want_rc 1
  want_err 'bagcache: write error: standard output: No space left on device'
fi

finish
