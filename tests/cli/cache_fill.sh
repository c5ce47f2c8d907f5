#!/bin/sh
# bagcache cache fill: how a command's output becomes records (lines, the
# last line without a newline, empty records, frames with binary records),
# failing commands (exit status, signal, missing program, truncated frame),
# a disk limit, zstd shards, --shard-size, user info, the progress line and
# the -v summary.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
seq 1 1000 >input

# The value of "KEY: VALUE" in the last `cache info` output.
field() { sed -n "s/^$1: //p" out; }

t "lines: empty lines are empty records, a last line without newline counts"
bc cache fill l1 -- printf 'a\n\nb'
want_rc 0
want_quiet_err
bc cache count l1
want_out '3\n'
bc cache get --hex l1 0 1 2
want_rc 0
want_out '61\n\n62\n'

t "lines: carriage returns and NUL bytes are kept"
printf 'x\r\n\000y\n' >crnul
bc cache fill l2 -- cat crnul
want_rc 0
bc cache get --hex l2 0 1
want_out '780d\n0079\n'
bc cache count l2
want_out '2\n'

t "an empty output is an empty cache"
bc cache fill e -- true
want_rc 0
want_quiet_err
bc cache count e
want_rc 0
want_out '0\n'
bc cache info e
check grep -q '^length: 0$' out
check grep -q '^length final: yes$' out
bc cache get e 0
want_rc 1
want_err 'index out of range'

t "frames: 4-byte little-endian lengths, binary and empty records"
{
  printf '\003\000\000\000abc'           # "abc"
  printf '\000\000\000\000'              # ""
  printf '\003\000\000\000a\nb'          # "a\nb"
  printf '\002\000\000\000\000\377'      # 00 ff
  printf '\054\001\000\000'              # 300 bytes of '0'
  printf '%0300d' 0
} >frames
bc cache fill f --from frames --shard-records 2 -- cat frames
want_rc 0
want_quiet_err
bc cache count f
want_out '5\n'
bc cache get --hex f 0 1 2 3
want_out '616263\n\n610a62\n00ff\n'
bc cache get f 4
printf '%0300d' 0 >want300
want_out_file want300
bc cache get --text f 2
want_rc 1
want_out ''
want_err 'record 2 contains a newline'

t "frames: output ending inside a frame"
printf '\005\000\000\000ab' >short
bc cache fill f2 --from frames -- cat short
want_rc 1
want_err 'bagcache: source failed: cat: output ends inside frame 0 (2 of 5 bytes)'
printf '\001\000\000\000a\005\000' >shorthdr
bc cache fill f3 --from frames -- cat shorthdr
want_rc 1
want_err 'bagcache: source failed: cat: output ends inside the length of frame 1 (2 of 4 bytes)'

t "a shard length metadata.json cannot hold is refused before anything is written"
bc cache fill huge --shard-records 9223372036854775808 -- seq 1 10
want_rc 2
check test ! -e huge
bc cache fill huge --shard-records 9223372036854775807 -- seq 1 10
want_rc 0
bc cache count huge
want_out '10\n'

t "a command that exits non-zero fails the fill"
bc cache fill x1 --shard-records 64 -- sh -c 'seq 1 100; exit 3'
want_rc 1
want_out ''
want_err 'bagcache: source failed: sh exited with status 3'
bc cache info x1
want_rc 0
check grep -q '^length final: no$' out
bc cache count x1
want_rc 1

t "the same root filled again by a command that succeeds"
bc cache fill x1 --shard-records 64 -- seq 1 100
want_rc 0
want_quiet_err
bc cache count x1
want_out '100\n'
bc cache get --text x1 0 63 64 -1
want_out '1\n64\n65\n100\n'

t "a failed first fill leaves nothing that clear cannot remove"
# Without --shard-records the first records are sampled before anything
# is cached: that pass fails here.
bc cache fill ff -- sh -c 'seq 1 5; exit 3'
want_rc 1
want_err 'bagcache: source failed: sh exited with status 3'
if [ -e ff ]; then
  bc cache clear ff
  want_rc 0
  check [ ! -e ff ]
fi
bc cache fill ff -- seq 1 5
want_rc 0
bc cache count ff
want_out '5\n'

t "a command killed by a signal fails the fill"
bc cache fill x2 -- sh -c 'seq 1 10; kill -TERM $$'
want_rc 1
want_err 'bagcache: source failed: sh killed by signal 15'

t "a command that cannot run fails the fill"
bc cache fill x3 -- ./no-such-command
want_rc 1
want_err 'bagcache: source failed: cannot run ./no-such-command: No such file or directory'

t "-v prints a summary on standard output"
bc cache fill v --shard-records 64 -v -- seq 1 1000
want_rc 0
want_quiet_err
want_out 'v: 1000 records, 16 shards present (10893 bytes); this run: 16 filled, 0 regenerated, 0 evicted, 1 pass\n'

t "--progress: a line rewritten in place on standard error"
bc cache fill p --progress --shard-records 64 -- seq 1 1000
want_rc 0
want_out ''
check grep -q "$(printf '\r')1000 records, " err
check [ "$(tail -c 1 err | od -An -c | tr -d ' ')" = '\n' ]
t "no progress when standard error is not a terminal"
bc cache fill p2 -- seq 1 10
want_quiet_err

t "--limit: bytes on disk stay under the limit, old shards are evicted"
bc cache fill lim --shard-records 64 --limit 2K -v -- seq 1 1000
want_rc 0
want_quiet_err
check grep -q '^lim: 1000 records, .* bytes, limit 2048); ' out
# The limit is stored with the cache.
bc cache info lim
want_rc 0
check grep -q '^length: 1000$' out
check grep -q '^length final: yes$' out
check grep -q '^disk limit: 2048$' out
on_disk=$(field 'bytes on disk')
present=$(field 'shards present')
check [ "$on_disk" -le 2048 ]
check [ "$present" -ge 1 ]
check [ "$present" -lt 16 ]
# The shard files are what the state says they are.
check [ "$(ls lim/shards | wc -l)" -eq "$present" ]
check [ "$(cat lim/shards/* | wc -c)" -eq "$on_disk" ]
bc cache get --text lim -1
want_rc 0
want_out '1000\n'
bc cache get lim 0
want_rc 1
want_err 'bagcache: not cached: '
bc cache verify lim
want_rc 0
want_out "ok: $present shard$([ "$present" -eq 1 ] || echo s) verified\n"

t "the stored limit holds for a later fill without --limit"
bc cache fill lim -v -- seq 1 1000
want_rc 0
want_out "lim: 1000 records, $present shard$([ "$present" -eq 1 ] || echo s) present ($on_disk bytes, limit 2048); this run: 0 filled, 0 regenerated, 0 evicted, 0 passes\n"

t "--limit none removes the stored limit; the next fill keeps everything"
bc cache fill lim --limit none -v -- seq 1 1000
want_rc 0
check grep -q '^lim: 1000 records, 16 shards present (.* bytes); this run: .* 0 evicted, 1 pass' out
bc cache info lim
want_rc 0
check grep -q '^disk limit: none$' out
check [ "$(ls lim/shards | wc -l)" -eq 16 ]

t "--limit and --shard-size read sizes as people write them (Python's parser)"
for pair in "1.5 GB:1610612736" "2GiB:2147483648" "2g:2147483648" "512k:524288" \
  "512KiB:524288" "64mb:67108864" "100:100" "0.5 m:524288"; do
  text=${pair%:*}
  bytes=${pair##*:}
  rm -rf sz
  bc cache fill sz --shard-records 4 --limit "$text" -- seq 1 10
  want_rc 0
  bc cache info sz
  check grep -q "^disk limit: $bytes\$" out
done
rm -rf sz
bc cache fill sz --shard-size "1.5k" -- seq 1 10
want_rc 0
for bad in 1.5.2g 1kk "1 k b" -1k 1e3 k; do
  bc cache fill bad --limit "$bad" -- seq 1 10
  want_rc 2
  want_err "invalid limit '$bad'"
  check [ ! -e bad ]
done

t "a limit smaller than two shards is refused"
bc cache fill tiny --limit 1K -- seq 1 10
want_rc 1
want_err 'bagcache: invalid argument: cache options: the disk limit (1024 bytes) is below the smallest workable limit, 134217728 bytes: 2 shards of 67108864 bytes (the target shard size) (one being read, one being filled)'
bc cache fill tiny2 --shard-records 100 --limit 100 -- seq 1 1000
want_rc 1
want_err 'is below the smallest workable limit'
# Shard 0 (1..100) is 192 bytes of records and 8 per record: 992 bytes, and
# it is published; shard 1 (101..200) is 300 + 800 = 1100 bytes: refused.
bc cache fill tiny3 --shard-records 100 --limit 2199 -- seq 1 1000
want_rc 1
want_err 'bagcache: invalid argument: tiny3: the disk limit (2199 bytes) is below the smallest workable limit, 2200 bytes: 2 shards of 1100 bytes (the size of this shard) (one being read, one being filled)'
check [ "$(ls tiny3/shards)" = 0.100.bag ]

t "--level: zstd shards"
bc cache fill z --shard-records 100 --level 5 -- seq 1 1000
want_rc 0
check [ -f z/shards/0.100.bagz ]
bc bag info z/shards/900.1000.bagz
check grep -q '^compression: zstd$' out
bc cache get --text z 0 -1 450
want_out '1\n1000\n451\n'
bc cache export z plain.bag
want_rc 0
bc bag dump --text plain.bag
want_out_file input

t "--shard-size: records per shard estimated, every record kept"
# Records of equal size (4 bytes, "0001" ...), so the estimate from the
# first records holds for all: a full shard is at most 1K and not much
# less (a record costs its bytes plus an 8-byte limit).
seq -w 1 1000 >input_w
bc cache fill s --shard-size 1K -- seq -w 1 1000
want_rc 0
bc cache info s
per=$(field 'shard records')
present=$(field 'shards present')
check [ $((present * per)) -ge 1000 ]
check [ $(((present - 1) * per)) -lt 1000 ]
full=$(wc -c <"s/shards/0.$per.bag")
check [ "$full" -le 1024 ]
check [ "$full" -gt 1000 ]
bc cache export s s.bag
bc bag dump --text s.bag
want_out_file input_w

t "an abandoned pass: the command is stopped with SIGTERM and reaped"
# With --shard-size the cache reads a few records in a first pass to
# estimate the shard length, then abandons it.  The first run prints its
# records and then would sleep for a minute; later runs exit at once.  The
# fill finishing and the first run's process being gone show it was
# killed, not waited for.
cat >slow_first.sh <<'EOF_SCRIPT'
if [ -e ran ]; then
  exec seq -w 1 2000
fi
: >ran
echo $$ >first.pid
seq -w 1 2000
exec sleep 60
EOF_SCRIPT
bc cache fill ab --shard-size 1K -- sh slow_first.sh
want_rc 0
want_quiet_err
check [ -s first.pid ]
check sh -c "! kill -0 $(cat first.pid) 2>/dev/null"
bc cache count ab
want_out '2000\n'

t "an abandoned pass that ignores SIGTERM is killed"
cat >stubborn_first.sh <<'EOF_SCRIPT'
if [ -e ran2 ]; then
  exec seq -w 1 2000
fi
: >ran2
echo $$ >stubborn.pid
trap '' TERM
seq -w 1 2000
while :; do sleep 1; done
EOF_SCRIPT
bc cache fill ab2 --shard-size 1K -- sh stubborn_first.sh
want_rc 0
check [ -s stubborn.pid ]
check sh -c "! kill -0 $(cat stubborn.pid) 2>/dev/null"
bc cache count ab2
want_out '2000\n'

t "--info: user info stored in metadata.json"
bc cache fill u --info '{"name": "seq", "size": [1, 2]}' -- seq 1 3
want_rc 0
bc cache info u
check grep -q '^info: {"name":"seq","size":\[1,2\]}$' out
bc cache info --json u
check grep -q '^  "info": {$' out
check grep -q '^    "name": "seq",$' out
check grep -q '^    "size": \[$' out

t "--seek-arg: a resumed fill runs the command from the first record needed"
# The first run stops with an error after 450 lines: shards 0..3 are
# published.  The second runs with {start} 400, {start1} 401.
bc cache fill sk --shard-records 100 --seek-arg -- \
  sh -c 'echo "run {start} {start1}" >>runs; tail -n +{start1} input | head -n 450; exit 3'
want_rc 1
want_err 'bagcache: source failed: sh exited with status 3'
bc cache fill sk -v --seek-arg -- \
  sh -c 'echo "run {start} {start1}" >>runs; tail -n +{start1} input'
want_rc 0
want_out 'sk: 1000 records, 10 shards present (10893 bytes); this run: 6 filled, 0 regenerated, 0 evicted, 1 pass\n'
check [ "$(cat runs)" = "$(printf 'run 0 1\nrun 400 401')" ]
bc cache get --hex sk 0 399 400 999
want_out '31\n343030\n343031\n31303030\n'

t "--seek-arg without {start} or {start1} in the command"
bc cache fill sn --seek-arg -- cat input
want_rc 2
want_err 'bagcache cache fill: --seek-arg: no argument of the command holds {start} or {start1}'
check [ ! -e sn ]

t "an existing root keeps its shard length"
bc cache fill x1 --shard-records 32 --level 3 -- seq 1 100
want_rc 0
want_err 'bagcache: notice: x1: keeping the existing cache'"'"'s shard length (64 records) and compression (none)'
bc cache info x1
check grep -q '^shard records: 64$' out

t "a ROOT whose parents are missing: an error, unless -p/--parents"
bc cache fill deep/er/root --shard-records 4 -- seq 1 10
want_rc 1
want_err 'bagcache: not found: deep/er/root: cannot create the directory: No such file or directory'
check [ ! -e deep ]
bc cache fill -p deep/er/root --shard-records 4 -- seq 1 10
want_rc 0
want_quiet_err
check [ -d deep/er/root/shards ]
bc cache count deep/er/root
want_out '10\n'
bc cache fill --parents deep/er2/root --shard-records 4 -- seq 1 3
want_rc 0
bc cache get --text deep/er2/root 2
want_out '3\n'
bc cache fill --parents deep/er/root -- seq 1 10
want_rc 0
want_quiet_err
printf 'x' >plainfile
bc cache fill -p plainfile/sub/root -- seq 1 3
want_rc 1
want_err 'bagcache: invalid argument: plainfile: exists and is not a directory'
check [ ! -e plainfile/sub ]

t "--no-publish-behind: each shard published before the next, the same shards"
bc cache fill --shard-records 100 --limit 3000 behind -- seq 1 1000
want_rc 0
bc cache fill --no-publish-behind --shard-records 100 --limit 3000 sync -- seq 1 1000
want_rc 0
want_quiet_err
check [ "$(ls behind/shards)" = "$(ls sync/shards)" ]
for f in sync/shards/*; do check cmp -s "$f" "behind/shards/${f##*/}"; done
check [ -z "$(ls -A behind/scratch)" ]
check [ -z "$(ls -A sync/scratch)" ]
bc cache count behind
want_out '1000\n'

t "--evict-ahead, --no-evict-ahead: accepted, and a drain fills the same shards"
# (A drain publishes each shard as the length grows: nothing is evicted
# ahead then; the regenerations of tests/cache/test_cache_io.c are.)
bc cache fill --evict-ahead --shard-records 100 --limit 3000 ahead -- seq 1 1000
want_rc 0
want_quiet_err
bc cache fill --no-evict-ahead --shard-records 100 --limit 3000 noahead -- seq 1 1000
want_rc 0
want_quiet_err
check [ "$(ls ahead/shards)" = "$(ls behind/shards)" ]
check [ "$(ls noahead/shards)" = "$(ls behind/shards)" ]
bc cache fill --evict-ahead=on x -- seq 1 3
want_rc 2

t "the command is stored; cache get runs it only with --rerun"
mkdir -p work
seq 1 600 >work/data
# The command leaves a mark each time it runs.
cat >work/cmd.sh <<'EOF2'
#!/bin/sh
echo run >>ran
exec cat data
EOF2
chmod +x work/cmd.sh
(cd work && "$BAGCACHE" cache fill --shard-records 100 --limit 3k ../st -- ./cmd.sh) \
  >out 2>err
rc=$?
want_rc 0
check grep -q '"type": "command"' st/metadata.json
check grep -q "\"cwd\": \"$tmp/work\"" st/metadata.json
check grep -q '"seek_arg": false' st/metadata.json
check grep -q '"from": "lines"' st/metadata.json
check [ "$(wc -l <work/ran)" -eq 1 ]
# Shard 0 was evicted: without --rerun it is an error that names the option,
# and the command does not run.
bc cache get --text st 5
want_rc 1
want_err 'a command is stored with the cache: --rerun runs it'
check [ "$(wc -l <work/ran)" -eq 1 ]
# With --rerun (from another directory: the command runs in its own).
bc cache get --text --rerun st 5 599 250
want_rc 0
want_out '6\n600\n251\n'
check [ "$(wc -l <work/ran)" -gt 1 ]

t "--rerun with --seek-arg runs the command from the shard's start"
(cd work && "$BAGCACHE" cache fill --shard-records 100 --limit 3k --seek-arg ../sk -- \
  tail -n +{start1} data) >out 2>err
rc=$?
want_rc 0
check grep -q '"seek_arg": true' sk/metadata.json
check grep -q '"+{start1}"' sk/metadata.json
bc cache get --text --rerun sk 0 101 599
want_rc 0
want_out '1\n102\n600\n'

t "--rerun on a root with no stored command is an error"
printf 'a\nb\n' | "$BAGCACHE" cache fill in - >out 2>err
bc cache get --rerun in 0
want_rc 1
want_err 'no command is stored with the cache'

t "a full disk is an error, not a crash (LMDB's lock file is allocated first)"
# A 2 MiB tmpfs of a private mount namespace, filled up; needs root (CI runs
# as root).  Where mounting is refused, the check is skipped with a notice.
mkdir full
if unshare -m --propagation private sh -c \
    'mount -t tmpfs -o size=2m tmpfs full' 2>/dev/null; then
  unshare -m --propagation private sh -c '
    mount -t tmpfs -o size=2m tmpfs full || exit 99
    dd if=/dev/zero of=full/fill bs=4k 2>/dev/null
    dd if=/dev/zero of=full/fill2 bs=1 2>/dev/null
    "$0" cache fill full/r2 -- seq 1 10' "$BAGCACHE" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  want_rc 1
  check grep -q 'No space left on device' err
else
  echo "cache_fill.sh: skipped the full-disk check: mounting a tmpfs is not permitted here" >&2
fi

finish
