#!/bin/sh
# bagcache with zstd: .bagz by suffix, --level, --dictionary, explicit
# --compression on both sides; the golden .bagz vectors decode to their
# records.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
zstd_magic=28b52ffd

t "golden abc_tail.bagz decodes"
bc bag dump --text "$DATA/abc_tail.bagz"
want_rc 0
want_quiet_err
want_out 'abcdef\n123\ncatcat\n'
bc bag info "$DATA/abc_tail.bagz"
want_out 'records: 3\nshards: 1\nrecords bytes: 42\nfile bytes: 66\ncompression: zstd\nlimits: tail\nlayout: concatenated\n'

t "golden mixed.bagz: 8 records with the manifest's lengths and hashes"
m=$DATA/mixed.bagz
bc bag count "$m"
want_out '8\n'
bc bag get "$m" 1
want_out 'hello bagz'
for i in 0 3 7; do
  bc bag get "$m" $i
  want_rc 0
  want_out ''
done
bc bag get "$m" 2
check [ "$(size "$tmp/out")" -eq 102400 ]
check [ "$(sha "$tmp/out")" = 006094c81525d1540893ce95d14d5e1db7ce7240be701528c3e8f303cfebda94 ]
bc bag get "$m" 4
check [ "$(sha "$tmp/out")" = 41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3 ]
bc bag get "$m" -3
check [ "$(sha "$tmp/out")" = 8e7914593d896dc191a00c6c634b175c61b5c39f719a4a1545d974d3247c0376 ]
bc bag get "$m" 6 --threads 2
check [ "$(size "$tmp/out")" -eq 204800 ]
check [ "$(sha "$tmp/out")" = 8c6627e25bfbdef2bba5abc03123ea8e9b60d892f7f180a8b9b5079fb3233c54 ]
bc bag verify "$m"
want_rc 0
want_out 'ok: 8 records in 1 shard verified\n'

t "golden mixed.bagz read with --compression none gives the raw frames"
bc bag get --compression none --hex "$m" 1
want_rc 0
check [ "$(cut -c1-8 "$tmp/out")" = $zstd_magic ]
bc bag get --compression none "$m" 0
want_out ''

t "golden dict_raw.bagz needs its dictionary"
dict=$DATA/dict_raw.dict
check [ "$(size "$dict")" -eq 56 ]
bc bag count "$DATA/dict_raw.bagz"
want_out '6\n'
bc bag get --dictionary "$dict" "$DATA/dict_raw.bagz" 1
want_rc 0
want_out 'hello bagz'
bc bag get --dictionary "$dict" "$DATA/dict_raw.bagz" 2
check [ "$(sha "$tmp/out")" = 006094c81525d1540893ce95d14d5e1db7ce7240be701528c3e8f303cfebda94 ]
bc bag verify --dictionary "$dict" "$DATA/dict_raw.bagz"
want_rc 0
want_out 'ok: 6 records in 1 shard verified\n'
# Record 2 (text100k) starts with "the quick brown fox" from the dictionary.
bc bag get "$DATA/dict_raw.bagz" 2
want_rc 1
want_err 'bagcache: corrupt data: '
want_out ''
bc bag verify "$DATA/dict_raw.bagz"
want_rc 1
want_err 'bagcache: verify failed at record 2: corrupt data: '
want_out ''

printf 'abcdef\n123\ncatcat\n' >abc
awk 'BEGIN { for (i = 0; i < 500; i++) printf "the quick brown fox %d jumps over the lazy dog %d\n", i, i * i }' >fox

t "write x.bagz: zstd by suffix, round trip"
bc_in abc bag write x.bagz
want_rc 0
want_quiet_err
bc bag info x.bagz
want_out 'records: 3\nshards: 1\nrecords bytes: 42\nfile bytes: 66\ncompression: zstd\nlimits: tail\nlayout: concatenated\n'
bc bag dump --text x.bagz
want_out 'abcdef\n123\ncatcat\n'
bc bag get --compression none --hex x.bagz 0
check [ "$(cut -c1-8 "$tmp/out")" = $zstd_magic ]
bc bag get --compression none x.bagz 0 1 2
check [ "$(size "$tmp/out")" -eq 42 ]

t "zstd frames decode with the system's zstd(1) when it is there"
if command -v zstd >/dev/null 2>&1; then
  bc bag get --compression none x.bagz 2
  check [ "$(zstd -dc <"$tmp/out")" = catcat ]
fi

t "empty records stay empty in a .bagz (24 zero bytes for three)"
printf '\n\n\n' >in
bc_in in bag write e.bagz
head -c 24 /dev/zero >zeros24
check cmp -s e.bagz zeros24

t "--level: different levels, same records"
bc_in fox bag write l1.bagz --level 1
want_rc 0
bc_in fox bag write l19.bagz --level 19
want_rc 0
bc_in fox bag write lneg.bagz --level -5
want_rc 0
bc_in fox bag write l0.bagz --level 0
bc_in fox bag write l3.bagz --level 3
bc_in fox bag write auto.bagz
check cmp -s l0.bagz l3.bagz
check cmp -s l0.bagz auto.bagz
for f in l1 l19 lneg l0; do
  bc bag dump --text $f.bagz
  want_rc 0
  want_out_file fox
done

t "--level on a .bag name means zstd"
bc_in fox bag write lv.bag --level 5
want_rc 0
bc bag info --compression zstd lv.bag
check grep -q '^compression: zstd$' "$tmp/out"
bc bag dump --text --compression zstd lv.bag
want_out_file fox
bc bag get --hex lv.bag 0
check [ "$(cut -c1-8 "$tmp/out")" = $zstd_magic ]

t "--compression zstd on a .bag name"
bc_in abc bag write cz.bag --compression zstd
want_rc 0
check cmp -s cz.bag x.bagz
bc bag dump --text cz.bag --compression zstd
want_out 'abcdef\n123\ncatcat\n'

t "--compression auto with --level on a .bag name is refused"
bc_in abc bag write ca.bag --compression auto --level 9
want_rc 1
want_err 'bagcache: invalid argument: ca.bag: '
check [ ! -e ca.bag ]
bc_in abc bag write ca.bagz --compression auto --level 1
want_rc 0
bc bag dump --text ca.bagz
want_out 'abcdef\n123\ncatcat\n'

t "--dictionary: written and read with the same file"
printf 'the quick brown fox jumps over the lazy dog ' >my.dict
bc_in fox bag write d.bagz --dictionary my.dict
want_rc 0
want_quiet_err
bc bag dump --text --dictionary my.dict d.bagz
want_rc 0
want_out_file fox
bc bag verify --dictionary my.dict d.bagz
want_rc 0
want_out 'ok: 500 records in 1 shard verified\n'
check [ "$(size d.bagz)" -lt "$(size auto.bagz)" ]

t "--dictionary implies zstd on a .bag name, for writing and reading"
bc_in fox bag write d.bag --dictionary my.dict
want_rc 0
check cmp -s d.bag d.bagz
bc bag dump --text --dictionary my.dict d.bag
want_rc 0
want_out_file fox
bc bag info --dictionary my.dict d.bag
check grep -q '^compression: zstd$' "$tmp/out"

t "reading a dictionary file without the dictionary fails"
bc bag verify d.bagz
want_rc 1
want_err 'bagcache: verify failed at record 0: corrupt data: '

t "--dictionary with --level"
bc_in fox bag write d9.bagz --dictionary my.dict --level 9
want_rc 0
bc bag dump --text --dictionary my.dict d9.bagz
want_out_file fox

t "separate limits with zstd"
bc_in abc bag write --separate-limits s.bagz
want_rc 0
check [ "$(size s.bagz)" -eq 42 ]
check [ "$(size limits.s.bagz)" -eq 24 ]
bc bag dump --text --separate-limits s.bagz
want_out 'abcdef\n123\ncatcat\n'
bc bag info --separate-limits s.bagz
want_out 'records: 3\nshards: 1\nrecords bytes: 42\nfile bytes: 66\ncompression: zstd\nlimits: separate\nlayout: concatenated\n'

t "a missing dictionary file for reading"
bc bag dump --dictionary nosuch.dict d.bagz
want_rc 1
want_err 'bagcache: cannot open file: nosuch.dict: '

finish
