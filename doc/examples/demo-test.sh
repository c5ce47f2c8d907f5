#!/bin/sh
# Runs the two C examples in fresh temporary directories.  The demo
# (doc/examples/demo.c): checks everything it prints, the exact bytes of the
# plain bag it writes, that nothing else is left in the directory, and that
# failures are reported through bc_strerror/bc_errmsg with exit status 1.
# The README's example (extracted from README.md at build time): checks its
# output and the file it writes.
set -u
builddir=$(cd "${BC_BUILDDIR:-.}" && pwd) || exit 99
demo=$builddir/doc/examples/demo
readme=$builddir/doc/examples/readme-example
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bc-demo.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A directory two levels deep that does not exist yet: the demo creates it.
dir=$tmp/out/sub
if ! "$demo" "$dir" >"$tmp/stdout" 2>"$tmp/stderr"; then
  cat "$tmp/stderr"
  echo "FAIL: demo $dir failed"
  exit 1
fi

# Compressed sizes depend on the zstd version: mask the .bagz byte counts.
sed -E '/demo\.bagz:/ s/[0-9]+ bytes/N bytes/g' "$tmp/stdout" >"$tmp/masked"
cat >"$tmp/expected" <<END
wrote $dir/demo.bag: 5 records, 23 bytes of records
read $dir/demo.bag: 5 records, 63 bytes on disk (uncompressed)
  get(1)           "banana"
  get_many(4,2,0)  "banana" "" "apple"
  get_view(3)      "cherry"
  index            4 distinct; "banana" first at 1, all at 1 4
wrote $dir/demo.bagz: 5 records, N bytes of records
read $dir/demo.bagz: 5 records, N bytes on disk (zstd)
  get(1)           "banana"
  get_many(4,2,0)  "banana" "" "apple"
  index            4 distinct; "banana" first at 1, all at 1 4
END
diff -u "$tmp/expected" "$tmp/masked" || fail "demo output differs (- expected, + actual)"

# A tail-limits file is its records plus one u64 per record: 5 * 8 = 40.
zrec=$(sed -n "s|^wrote $dir/demo.bagz: 5 records, \([0-9]*\) bytes of records\$|\1|p" "$tmp/stdout")
zdisk=$(sed -n "s|^read $dir/demo.bagz: 5 records, \([0-9]*\) bytes on disk (zstd)\$|\1|p" "$tmp/stdout")
if [ -z "$zrec" ] || [ -z "$zdisk" ] || [ "$zdisk" -ne $((zrec + 40)) ]; then
  fail "demo.bagz: $zdisk bytes on disk, expected records ($zrec) + 40"
fi

# The plain bag byte by byte: "apple" "banana" "" "cherry" "banana", then the
# end offsets 5, 11, 11, 17, 23 as u64 little endian.
want=6170706c6562616e616e6163686572727962616e616e61
for limit in 05 0b 0b 11 17; do want=${want}${limit}00000000000000; done
got=$(od -An -v -tx1 "$dir/demo.bag" | tr -d ' \n')
[ "$got" = "$want" ] || fail "demo.bag bytes: $got, expected $want"

# The writer publishes atomically: no temporary or limits files remain.
left=$(cd "$dir" && ls -A | tr '\n' ' ')
[ "$left" = "demo.bag demo.bagz " ] || fail "files left in $dir: $left"

# Failures exit 1 with a message on stderr.  A regular file where the
# directory should be stops the demo before bagcache is called ...
: >"$tmp/plainfile"
"$demo" "$tmp/plainfile/x" >/dev/null 2>"$tmp/err1"
rc=$?
[ "$rc" -eq 1 ] || fail "demo under a regular file: exit $rc, expected 1"
grep -q '^demo: cannot create directory' "$tmp/err1" ||
  fail "demo under a regular file: stderr: $(cat "$tmp/err1")"

# ... and a directory named demo.bag makes the writer fail: the message
# carries bc_strerror, the code's name and bc_errmsg's detail naming the file.
mkdir -p "$tmp/taken/demo.bag"
"$demo" "$tmp/taken" >/dev/null 2>"$tmp/err2"
rc=$?
[ "$rc" -eq 1 ] || fail "demo with a directory demo.bag: exit $rc, expected 1"
grep -Eq '^demo: bc_writer_(open|close): .* \[BC_E[A-Z]+\] \(.*demo\.bag.*\)$' "$tmp/err2" ||
  fail "demo with a directory demo.bag: stderr: $(cat "$tmp/err2")"

# The README example writes fruit.bagz in the current directory.
mkdir "$tmp/readme"
out=$(cd "$tmp/readme" && "$readme" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "README example: exit $rc: $out"
[ "$out" = '4 records, record 3 is "cherry"' ] ||
  fail "README example printed: $out"
[ -s "$tmp/readme/fruit.bagz" ] || fail "README example wrote no fruit.bagz"

if [ $failures -ne 0 ]; then
  echo "demo output was:"; cat "$tmp/stdout"
  exit 1
fi
echo "PASS: the demo and the README example work as documented"
