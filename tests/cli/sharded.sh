#!/bin/sh
# bagcache with sharded sets: @N and @* specs built by writing one file per
# shard, comma lists, the concatenated and interleaved layouts, per-shard
# info lines, separate limits per shard.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99

# Four shards of sizes 8, 4, 0, 5; record r of shard s is "s<s>-r<r>".
sizes="8 4 0 5"
s=0
: >all
for n in $sizes; do
  : >in
  r=0
  while [ $r -lt "$n" ]; do
    echo "s$s-r$r" >>in
    r=$((r + 1))
  done
  cat in >>all
  name=$(printf 'shard-%05d-of-00004.bag' $s)
  bc_in in bag write "$name"
  t "write shard $s"
  want_rc 0
  s=$((s + 1))
done

t "@4: count, dump, get across shards"
bc bag count shard@4.bag
want_rc 0
want_out '17\n'
bc bag dump --text shard@4.bag
want_rc 0
want_out_file all
bc bag get --text shard@4.bag 0 7 8 11 12 16 -1 -5 -6
want_rc 0
want_out 's0-r0\ns0-r7\ns1-r0\ns1-r3\ns3-r0\ns3-r4\ns3-r4\ns3-r0\ns1-r3\n'
bc bag get shard@4.bag 17
want_rc 1
want_err 'index 17 is out of range for 17 records'

t "@04 is the same as @4"
bc bag dump --text shard@04.bag
want_out_file all

t "@*: the shard count comes from the files"
bc bag dump --text 'shard@*.bag'
want_rc 0
want_out_file all

t "a comma list in order, empty elements skipped"
bc bag dump --text shard-00003-of-00004.bag,,shard-00000-of-00004.bag,
want_rc 0
{
  sed -n '13,17p' all
  sed -n '1,8p' all
} >want
want_out_file want

t "posix: prefix"
bc bag count "posix:$tmp/shard@4.bag"
want_out '17\n'

t "info: one line per shard"
bc bag info shard@4.bag
want_rc 0
want_quiet_err
want_out '%s\n' \
  'records: 17' 'shards: 4' 'records bytes: 85' 'file bytes: 221' \
  'compression: none' 'limits: tail' 'layout: concatenated' \
  'shard 0: records=8 records_bytes=40 file_bytes=104 compression=none path=shard-00000-of-00004.bag' \
  'shard 1: records=4 records_bytes=20 file_bytes=52 compression=none path=shard-00001-of-00004.bag' \
  'shard 2: records=0 records_bytes=0 file_bytes=0 compression=none path=shard-00002-of-00004.bag' \
  'shard 3: records=5 records_bytes=25 file_bytes=65 compression=none path=shard-00003-of-00004.bag'

t "verify a sharded set"
bc bag verify shard@4.bag --threads 2
want_rc 0
want_out 'ok: 17 records in 4 shards verified\n'

t "a missing shard"
bc bag count shard@5.bag
want_rc 1
want_err 'bagcache: not found: '
want_err 'shard-00000-of-00005.bag'
rm shard-00002-of-00004.bag
bc bag count shard@4.bag
want_rc 1
want_err 'shard-00002-of-00004.bag'

t "interleaved sizes rule: 8,4,_,5 cannot be interleaved"
printf '' | "$BAGCACHE" bag write shard-00002-of-00004.bag
bc bag count --interleaved shard@4.bag
want_rc 1
want_err 'bagcache: corrupt data: '

# Three shards written round-robin: global record g is "g<g>" in shard g%3.
for s in 0 1 2; do
  awk -v s=$s 'BEGIN { for (g = s; g < 17; g += 3) printf "g%02d\n", g }' >in
  bc_in in bag write "$(printf 'inter-%05d-of-00003.bag' $s)"
done
awk 'BEGIN { for (g = 0; g < 17; g++) printf "g%02d\n", g }' >inter_all

t "--interleaved reads the round-robin order"
bc bag dump --text --interleaved inter@3.bag
want_rc 0
want_out_file inter_all
bc bag get --text --interleaved inter@3.bag 16 14 -1 0
want_out 'g16\ng14\ng16\ng00\n'
bc bag info --interleaved inter@3.bag
check grep -q '^layout: interleaved$' "$tmp/out"
check grep -q '^shard 2: records=5 ' "$tmp/out"

t "without --interleaved the same files are concatenated"
bc bag get --text inter@3.bag 0 1 6 -1
want_out 'g00\ng03\ng01\ng14\n'

t "sharded + separate limits + zstd, including @*"
for s in 0 1; do
  awk -v s=$s 'BEGIN { for (i = 0; i < 3 - s; i++) printf "sepz shard %d record %d\n", s, i }' >in
  bc_in in bag write --separate-limits "$(printf 'sepz-%05d-of-00002.bagz' $s)"
  want_rc 0
  check [ -f "$(printf 'limits.sepz-%05d-of-00002.bagz' $s)" ]
done
for spec in sepz@2.bagz 'sepz@*.bagz' sepz-00000-of-00002.bagz,sepz-00001-of-00002.bagz; do
  bc bag dump --text --separate-limits "$spec"
  want_rc 0
  want_out '%s\n' 'sepz shard 0 record 0' 'sepz shard 0 record 1' \
    'sepz shard 0 record 2' 'sepz shard 1 record 0' 'sepz shard 1 record 1'
done
bc bag info --separate-limits sepz@2.bagz
want_rc 0
check grep -q '^limits: separate$' "$tmp/out"
check grep -q '^compression: zstd$' "$tmp/out"
check grep -q '^shard 1: records=2 .* compression=zstd path=sepz-00001-of-00002.bagz limits_path=limits.sepz-00001-of-00002.bagz$' "$tmp/out"

t "a list of a .bag and a .bagz: compression decided per file"
printf 'plain\n' | "$BAGCACHE" bag write p.bag
printf 'packed\n' | "$BAGCACHE" bag write z.bagz
bc bag dump --text p.bag,z.bagz
want_rc 0
want_out 'plain\npacked\n'
bc bag info p.bag,z.bagz
check grep -q '^compression: mixed$' "$tmp/out"
check grep -q '^shard 0: .* compression=none path=p.bag$' "$tmp/out"
check grep -q '^shard 1: .* compression=zstd path=z.bagz$' "$tmp/out"

finish
