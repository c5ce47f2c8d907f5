#!/bin/sh
# bagcache bag write: records from lines, hex and base64 give the exact
# Bagz bytes (the golden abc_tail.bag among them); separate limits; bad
# input publishes nothing.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
golden=$DATA/abc_tail.bag
golden_sha=8c5886a44a468f25157481974a2b2fa723b1148ac3df1f9af1f3c0a6551bde84

t "golden file is intact"
check [ "$(sha "$golden")" = "$golden_sha" ]
check [ "$(size "$golden")" -eq 39 ]

t "write lines: abcdef,123,catcat is the 39-byte golden abc_tail.bag"
printf 'abcdef\n123\ncatcat\n' >in
bc_in in bag write x.bag
want_rc 0
want_out ''
want_quiet_err
check cmp -s x.bag "$golden"
check [ "$(sha x.bag)" = "$golden_sha" ]

t "a final line without a newline is a record"
printf 'abcdef\n123\ncatcat' >in
bc_in in bag write y.bag
want_rc 0
check cmp -s y.bag "$golden"

t "write --from hex (lower and upper case)"
printf '616263646566\n313233\n636174636174\n' >in
bc_in in bag write --from hex h.bag
want_rc 0
want_quiet_err
check cmp -s h.bag "$golden"
printf '616263646566\n313233\n636174636174' | tr a-f A-F >in
bc_in in bag write h2.bag --from hex
want_rc 0
check cmp -s h2.bag "$golden"

t "write --from base64"
printf 'YWJjZGVm\nMTIz\nY2F0Y2F0\n' >in
bc_in in bag write --from base64 b.bag
want_rc 0
want_quiet_err
check cmp -s b.bag "$golden"

t "write --compression none on a .bagz name stores raw records"
printf 'abcdef\n123\ncatcat\n' >in
bc_in in bag write --compression none raw.bagz
want_rc 0
check cmp -s raw.bagz "$golden"

t "-v prints a summary"
bc_in in bag write -v v.bag
want_rc 0
want_out 'wrote 3 records (15 bytes of records) to v.bag\n'
want_quiet_err
check cmp -s v.bag "$golden"

t "--verbose after the operand"
bc_in in bag write v2.bag --verbose
want_rc 0
want_out 'wrote 3 records (15 bytes of records) to v2.bag\n'

t "empty input: zero records, an empty file"
bc_in /dev/null bag write empty.bag
want_rc 0
check [ -f empty.bag ]
check [ "$(size empty.bag)" -eq 0 ]
bc bag count empty.bag
want_out '0\n'

t "empty lines are empty records: three of them are 24 zero bytes"
printf '\n\n\n' >in
bc_in in bag write e3.bag
want_rc 0
head -c 24 /dev/zero >zeros24
check cmp -s e3.bag zeros24
printf '\n\n\n' >in
bc_in in bag write --from hex e3h.bag
check cmp -s e3h.bag zeros24
bc_in in bag write --from base64 e3b.bag
check cmp -s e3b.bag zeros24

t "lines keep NUL bytes and carriage returns"
printf 'a\000b\r\n\r\n' >in
bc_in in bag write nul.bag
want_rc 0
# records: 61 00 62 0d | 0d ; limits 4, 5
printf 'a\000b\r\r\004\000\000\000\000\000\000\000\005\000\000\000\000\000\000\000' >want
check cmp -s nul.bag want

t "write --separate-limits: records file and limits.NAME"
printf 'abcdef\n123\ncatcat\n' >in
bc_in in bag write --separate-limits s.bag
want_rc 0
want_quiet_err
printf 'abcdef123catcat' >want
check cmp -s s.bag want
printf '\006\000\000\000\000\000\000\000\011\000\000\000\000\000\000\000\017\000\000\000\000\000\000\000' >want
check cmp -s limits.s.bag want

t "separate limits in a subdirectory go beside the records file"
mkdir sub
bc_in in bag write --separate-limits sub/s.bag
want_rc 0
check cmp -s sub/limits.s.bag limits.s.bag
check [ ! -e limits.sub ]

t "overwriting an existing file replaces it"
printf 'zzz\n' >in2
bc_in in2 bag write x.bag
want_rc 0
bc bag dump --text x.bag
want_out 'zzz\n'

# Bad input: exit 1, the line number named, nothing published (an existing
# file keeps its contents), no temporary files left behind.
cp "$golden" keep.bag
bad_input() {
  _from=$1
  _line=$2
  _msg=$3
  t "bad $_from input: $_msg"
  bc_in in bag write --from "$_from" new.bag
  want_rc 1
  want_out ''
  want_err "bagcache: invalid input: line $_line: $_msg"
  check [ ! -e new.bag ]
  bc_in in bag write --from "$_from" keep.bag
  want_rc 1
  check cmp -s keep.bag "$golden"
}

printf '6162\nzz\n' >in
bad_input hex 2 "invalid hex digit 'z' at column 1"
printf '6162\n\n616\n' >in
bad_input hex 3 "odd number of hex digits (3)"
printf '61 62\n' >in
bad_input hex 1 "invalid hex digit ' ' at column 3"
printf '6162\r\n' >in
bad_input hex 1 "invalid hex digit byte 0x0d at column 5"
printf 'YWJj\nYWJ\n' >in
bad_input base64 2 "base64 length 3 is not a multiple of 4"
printf 'YW*j\n' >in
bad_input base64 1 "invalid base64 character '*' at column 3"
printf 'YQ=a\n' >in
bad_input base64 1 "invalid base64 character '=' at column 3"
printf 'YR==\n' >in
bad_input base64 1 "non-zero unused bits before the base64 padding"
printf 'YWJjZGVm\nYWJjZGVm====\n' >in
bad_input base64 2 "invalid base64 character '=' at column 9"
printf 'YWJjZGVm\nYWJj\n-_8=\n' >in
bad_input base64 3 "invalid base64 character '-' at column 1"

t "base64 padding variants decode exactly"
printf 'YQ==\nYWI=\nYWJj\n\n' >in
bc_in in bag write --from base64 pad.bag
want_rc 0
bc bag dump --hex pad.bag
want_out '61\n6162\n616263\n\n'

t "no temporary files are left after failures"
ls -A >listing
check [ -z "$(grep '^\.' listing)" ]

t "write into a missing directory fails and says so"
bc_in in bag write nodir/x.bag
want_rc 1
want_err "bagcache: "
want_err "nodir/x.bag"
check [ ! -e nodir ]

t "a missing dictionary file fails before anything is written"
bc_in in bag write --dictionary nosuch.dict d.bagz
want_rc 1
want_err "bagcache: cannot open file: nosuch.dict: No such file or directory"
check [ ! -e d.bagz ]

t "big binary record round trip (all 256 byte values, hex input)"
i=0
: >bytes
while [ $i -lt 256 ]; do
  # shellcheck disable=SC2059
  printf "\\$(printf %03o $i)" >>bytes
  i=$((i + 1))
done
check [ "$(size bytes)" -eq 256 ]
hexof bytes >in
echo >>in
hexof bytes >>in
bc_in in bag write --from hex all.bag
want_rc 0
check [ "$(size all.bag)" -eq $((512 + 16)) ]
bc bag get all.bag 1
want_out_file bytes

finish
