#!/bin/sh
# bagcache bag verify on good files (exit 0, summary) and on the corrupt
# golden vectors (exit 1, the first bad record and the problem); reading
# the corrupt vectors record by record.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
c=$DATA/corrupt

t "verify a good file"
bc bag verify "$DATA/abc_tail.bag"
want_rc 0
want_quiet_err
want_out 'ok: 3 records in 1 shard verified\n'

t "verify with every reader option"
bc bag verify --limits-in-memory --threads 1 --cache-policy drop \
  --access sequential "$DATA/abc_tail.bag"
want_rc 0
want_out 'ok: 3 records in 1 shard verified\n'

t "verify an empty bag and a one-record bag"
: >empty.bag
bc bag verify empty.bag
want_rc 0
want_out 'ok: 0 records in 1 shard verified\n'
printf 'x\n' | "$BAGCACHE" bag write one.bag
bc bag verify one.bag
want_out 'ok: 1 record in 1 shard verified\n'

t "verify a large written file"
awk 'BEGIN { for (i = 0; i < 5000; i++) print "line " i }' >in
bc_in in bag write big.bagz
bc bag verify big.bagz
want_rc 0
want_out 'ok: 5000 records in 1 shard verified\n'

# Files whose tail is malformed fail at open, before any record.
for f in too_short tail_past_eof tail_misaligned; do
  t "verify corrupt/$f.bag"
  bc bag verify "$c/$f.bag"
  want_rc 1
  want_out ''
  want_err "bagcache: corrupt data: $c/$f.bag: "
  bc bag count "$c/$f.bag"
  want_rc 1
done

t "verify corrupt/non_monotonic.bag: limits [6,3,15]"
bc bag verify "$c/non_monotonic.bag"
want_rc 1
want_out ''
want_err 'bagcache: verify failed at record 1: corrupt data: '
bc bag get "$c/non_monotonic.bag" 0
want_rc 0
want_out 'abcdef'
bc bag get "$c/non_monotonic.bag" 1
want_rc 1
want_err 'bagcache: corrupt data: '
bc bag count "$c/non_monotonic.bag"
want_out '3\n'
bc bag dump "$c/non_monotonic.bag"
want_rc 1
bc bag dump --limits-in-memory "$c/non_monotonic.bag"
want_rc 1
want_err 'bagcache: corrupt data: '
bc bag verify --limits-in-memory "$c/non_monotonic.bag"
want_rc 1
want_err 'bagcache: verify failed at record 1: corrupt data: '

t "verify corrupt/bad_frame.bagz: record 0 is garbage"
bc bag verify "$c/bad_frame.bagz"
want_rc 1
want_out ''
want_err 'bagcache: verify failed at record 0: corrupt data: '
bc bag get "$c/bad_frame.bagz" 1
want_rc 0
want_out 'hello world'
bc bag get "$c/bad_frame.bagz" 0
want_rc 1
bc bag dump --text "$c/bad_frame.bagz"
want_rc 1
want_out ''

t "verify corrupt/truncated_frame.bagz"
bc bag verify "$c/truncated_frame.bagz"
want_rc 1
want_err 'bagcache: verify failed at record 0: corrupt data: '

t "verify corrupt/separate_past_eof.bag with --separate-limits"
bc bag verify --separate-limits "$c/separate_past_eof.bag"
want_rc 1
want_err 'bagcache: verify failed at record 1: corrupt data: '
bc bag get --separate-limits "$c/separate_past_eof.bag" 0
want_rc 0
want_out 'abcdef'

t "verify a sharded set with a corrupt second shard: global index"
printf 'a\nb\nc\n' | "$BAGCACHE" bag write set-00000-of-00002.bag
cp "$c/non_monotonic.bag" set-00001-of-00002.bag
bc bag verify set@2.bag
want_rc 1
want_err 'bagcache: verify failed at record 4: corrupt data: '

t "verify a truncated copy of a good file"
head -c 30 "$DATA/abc_tail.bag" >cut.bag
bc bag verify cut.bag
want_rc 1
want_err 'bagcache: corrupt data: '

finish
