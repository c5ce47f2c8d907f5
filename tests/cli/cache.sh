#!/bin/sh
# bagcache cache fill/count/get/info/verify/export/clear on a cache of
# `seq 1 1000` in shards of 64 records: exact lengths, shard listings and
# bytes, records read back (negative indices too), an export read back with
# `bag dump`, checksums that catch a changed byte, and clear.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
seq 1 1000 >input

# Bytes of a shard file holding lines $1..$2 of `input` (uncompressed, tail
# limits): the records without their newlines plus 8 bytes of limit each.
shard_bytes() {
  sed -n "$1,$2p" input | awk '{ n += length($0) + 8 } END { print n }'
}

t "fill from seq 1 1000 in shards of 64 records"
bc cache fill c --shard-records 64 -- seq 1 1000
want_rc 0
want_out ''
want_quiet_err
check [ -f c/metadata.json ]
check [ -f c/shards/0.64.bag ]
check [ -f c/shards/960.1000.bag ]

t "count"
bc cache count c
want_rc 0
want_out '1000\n'
want_quiet_err

t "get: raw, in the order given, repeats allowed"
bc cache get c 0 1 0 999
want_rc 0
want_out '1211000'
want_quiet_err

t "get: negative indices count from the end"
bc cache get --text c -1 -1000 -64 -65 63 64
want_rc 0
want_out '1000\n1\n937\n936\n64\n65\n'
bc cache get c -2 --hex
want_rc 0
want_out '393939\n'
bc cache get c 500 --base64
want_out 'NTAx\n'

t "get: out of range, nothing printed"
bc cache get c 0 1000
want_rc 1
want_out ''
want_err 'bagcache: index out of range: '
bc cache get c -1001
want_rc 1
want_out ''
want_err 'bagcache: index out of range: '

t "every shard file is a Bagz file of its records"
for s in 0 1 14 15; do
  start=$((s * 64))
  end=$((start + 64))
  [ $end -gt 1000 ] && end=1000
  bc bag dump --text "c/shards/$start.$end.bag"
  want_rc 0
  sed -n "$((start + 1)),${end}p" input >want_shard
  want_out_file want_shard
done

t "info: one field per line"
total=$(shard_bytes 1 1000)
check [ "$total" -eq 10893 ]
bc cache info c
want_rc 0
want_quiet_err
want_out 'length: 1000\nlength final: yes\nshard records: 64\nshards present: 16\nbytes on disk: 10893\ndisk limit: none\nmisses: 16\nfills: 16\nregenerations: 0\nevictions: 0\nrecords generated: 1000\nbytes written: 10893\nshards kept: 0\ninfo: null\n'

t "info --json: the same fields and every shard"
bc cache info --json c
want_rc 0
want_quiet_err
# The access clock is shared state whose values only order the shards:
# check that each is a number, then compare everything else exactly.
check [ "$(grep -c '^      "last_access": [0-9][0-9]*$' out)" -eq 16 ]
sed 's/^\(      "last_access": \)[0-9][0-9]*$/\1T/' out >got.json
{
  printf '{\n  "length": 1000,\n  "length_final": true,\n'
  printf '  "shard_records": 64,\n  "shards_present": 16,\n'
  printf '  "bytes_on_disk": 10893,\n  "disk_limit": 0,\n'
  printf '  "counters": {\n    "misses": 16,\n    "fills": 16,\n'
  printf '    "regenerations": 0,\n    "evictions": 0,\n'
  printf '    "records_generated": 1000,\n'
  printf '    "bytes_written": 10893,\n    "shards_kept": 0\n  },\n  "info": null,\n  "shards": [\n'
  s=0
  while [ $s -lt 16 ]; do
    start=$((s * 64))
    end=$((start + 64))
    [ $end -gt 1000 ] && end=1000
    printf '    {\n      "start": %d,\n      "end": %d,\n' $start $end
    printf '      "path": "c/shards/%d.%d.bag",\n' $start $end
    printf '      "bytes": %d,\n      "last_access": T\n    }' \
      "$(shard_bytes $((start + 1)) $end)"
    s=$((s + 1))
    [ $s -lt 16 ] && printf ','
    printf '\n'
  done
  printf '  ]\n}\n'
} >want.json
check cmp -s got.json want.json
cmp -s got.json want.json || diff want.json got.json | head -20 >&2

t "info: the source's fingerprint and a length hint, when metadata.json has them"
cp -R c cfp
# As LoadIt(..., fingerprint=..., length=...) stores them (any JSON; the
# hint only until the length is final, which cache info shows anyway).
sed -i '1a\
  "fingerprint": {"config": "a1b2", "version": 3},\
  "length_hint": 1500,' cfp/metadata.json
bc cache info cfp
want_rc 0
want_quiet_err
check grep -q '^info: null$' out
check grep -q '^fingerprint: {"config":"a1b2","version":3}$' out
check grep -q '^length hint: 1500$' out
check [ "$(tail -n 2 out | head -n 1)" = 'fingerprint: {"config":"a1b2","version":3}' ]
bc cache info --json cfp
want_rc 0
check grep -q '^  "fingerprint": {$' out
check grep -q '^    "config": "a1b2",$' out
check grep -q '^  "length_hint": 1500,$' out
bc cache info c
check sh -c '! grep -q "fingerprint\|length hint" out'

t "verify"
bc cache verify c
want_rc 0
want_out 'ok: 16 shards verified\n'
want_quiet_err

t "export to 3 shards, read back exactly"
bc cache export c out@3.bag
want_rc 0
want_out ''
want_quiet_err
for i in 0 1 2; do
  check [ -f "out-0000$i-of-00003.bag" ]
done
bc bag dump --text out@3.bag
want_rc 0
want_out_file input
# As even as possible: 333 or 334 records each (the sum is checked above).
for i in 0 1 2; do
  bc bag count "out-0000$i-of-00003.bag"
  check grep -q '^33[34]$' out
done

t "export to one plain file, and to zstd"
bc cache export c one.bag
want_rc 0
bc bag dump --text one.bag
want_rc 0
want_out_file input
bc cache export c z@2.bagz
want_rc 0
bc bag dump --text z@2.bagz
want_out_file input
bc bag info z@2.bagz
check grep -q '^compression: zstd$' out

t "a second fill of a complete cache runs nothing"
bc cache fill c --shard-records 64 -v -- false
want_rc 0
want_quiet_err
want_out 'c: 1000 records, 16 shards present (10893 bytes); this run: 0 filled, 0 regenerated, 0 evicted, 0 passes\n'

t "verify finds a changed byte (same size)"
cp -R c bad
# "5" of record 4 ("5") becomes "6": byte 4 of the first shard.
printf '6' | dd of=bad/shards/0.64.bag bs=1 seek=4 conv=notrunc 2>/dev/null
bc bag get --text bad/shards/0.64.bag 4
want_out '6\n'
bc cache verify bad
want_rc 1
want_out ''
want_err 'bagcache: verify failed in the shard starting at record 0: corrupt data: '

t "verify finds a missing and a truncated shard"
cp -R c bad2
rm bad2/shards/64.128.bag
bc cache verify bad2
want_rc 1
want_err 'bagcache: verify failed in the shard starting at record 64: not found: '
cp -R c bad3
: >bad3/shards/128.192.bag
bc cache verify bad3
want_rc 1
want_err 'bagcache: verify failed in the shard starting at record 128: corrupt data: '

t "clear deletes the cache, and ROOT when nothing else is in it"
echo mine >c/notes.txt
bc cache clear c
want_rc 0
want_out ''
want_quiet_err
for gone in metadata.json shards locks scratch; do
  check [ ! -e "c/$gone" ]
done
check [ "$(cat c/notes.txt)" = mine ]
bc cache info c
want_rc 1
want_err 'not a cache'
bc cache clear bad2
want_rc 0
check [ ! -e bad2 ]

t "clear refuses a directory that is not a cache"
mkdir plain
echo keep >plain/file
bc cache clear plain
want_rc 1
want_err 'not a bagcache cache (no metadata.json); refusing to delete anything'
check [ "$(cat plain/file)" = keep ]
bc cache clear nosuch
want_rc 1
want_err 'bagcache: not found: nosuch'

t "a corrupt metadata.json is an error, and the directory is left alone"
mkdir cm
echo garbage >cm/metadata.json
bc cache info cm
want_rc 1
want_out ''
want_err 'bagcache: corrupt data: '
check [ "$(ls cm)" = metadata.json ]

t "a metadata.json of another format version is refused"
bc cache fill v9 --shard-records 4 -- seq 1 10
want_rc 0
sed 's/"version": 2,/"version": 99,/' v9/metadata.json >v9/meta.tmp
mv v9/meta.tmp v9/metadata.json
check grep -q '"version": 99,' v9/metadata.json
bc cache count v9
want_rc 1
want_err 'bagcache: unsupported format version: '

t "reading commands never create a cache"
for cmd in info count verify; do
  bc cache "$cmd" nosuch
  want_rc 1
  want_out ''
  want_err 'bagcache: not found: nosuch: not a cache'
  check [ ! -e nosuch ]
done
bc cache get nosuch 0
want_rc 1
check [ ! -e nosuch ]
bc cache export nosuch x.bag
want_rc 1
check [ ! -e nosuch ]

finish
