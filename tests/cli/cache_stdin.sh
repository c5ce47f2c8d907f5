#!/bin/sh
# bagcache cache fill ROOT -: records from standard input, read once
# through the appender (lines, frames), --tee's byte-identical copy, a
# consumer that exits early (broken pipe), the shard length estimated from
# the first records, a limit smaller than the input and the "no source"
# message of an evicted shard, the check against records cached already,
# and the usage errors.
# shellcheck source=tests/cli/lib.sh
. "${BC_SRCDIR:-$(dirname "$0")/../..}/tests/cli/lib.sh"

cd "$tmp" || exit 99
seq 1 5000 >input

# The value of "KEY: VALUE" in the last `cache info` output.
field() { sed -n "s/^$1: //p" out; }

t "lines from standard input: every record, the length final"
bc_in input cache fill --shard-records 100 l -
want_rc 0
want_quiet_err
want_out ''
bc cache info l
check [ "$(field length)" = 5000 ]
check [ "$(field 'length final')" = yes ]
check [ "$(field 'shards present')" = 50 ]
# shellcheck disable=SC2046 # one argument per index
bc cache get --text l $(seq 0 4999)
want_out_file input

t "--tee: the input on standard output, byte for byte (lines)"
{
  seq 1 3000
  printf '\n\nx\r\000y\n'
  printf 'no newline at the end'
} >odd
bc_in odd cache fill --tee --shard-records 7 t -
want_rc 0
want_quiet_err
want_out_file odd
bc cache count t
want_out '3004\n'
bc cache get --hex t 3000 3001 3002 3003
want_out '\n\n780d0079\n6e6f206e65776c696e652061742074686520656e64\n'

t "--tee: frames, byte for byte"
{
  printf '\003\000\000\000abc'
  printf '\000\000\000\000'
  printf '\003\000\000\000a\nb'
  printf '\054\001\000\000'
  printf '%0300d' 0
} >frames
bc_in frames cache fill --tee --from frames --shard-records 2 f -
want_rc 0
want_out_file frames
bc cache get --hex f 0 1 2
want_out '616263\n\n610a62\n'
bc cache info f
check [ "$(field 'length final')" = yes ]

t "--tee in a pipeline: the consumer gets the producer's bytes"
seq 1 20000 >big
# shellcheck disable=SC2002 # a producer in a pipeline, as users write it
cat big | "$BAGCACHE" cache fill --tee --shard-records 1000 p - 2>err | cat >piped
check cmp -s piped big
check [ ! -s err ]
bc cache count p
want_out '20000\n'

t "a consumer that exits early: exit 141, complete shards kept, not final"
seq 1 400000 >huge
{
  "$BAGCACHE" cache fill --tee --shard-records 1000 e - <huge 2>eerr
  echo $? >status
} | head -n 3 >headout
check [ "$(cat status)" = 141 ]
check grep -q 'standard output was closed (broken pipe) after' eerr
check grep -q 'the length is not final' eerr
printf '1\n2\n3\n' >want3
check cmp -s headout want3
bc cache info e
n=$(field length)
check [ "$(field 'length final')" = no ]
check [ $((n % 1000)) -eq 0 ]
check [ "$n" -lt 400000 ]
if [ "$n" -gt 0 ]; then
  bc cache get --text e 0 $((n - 1))
  want_out '1\n%s\n' "$n"
fi
bc cache get e "$n"
want_rc 1
# The same stream again completes it (the shards there are checked).
bc_in huge cache fill -v e -
want_rc 0
check grep -q "^e: 400000 records, 400 shards present (.*); this run: $((400 - n / 1000)) filled, 0 regenerated" out
bc cache info e
check [ "$(field 'length final')" = yes ]
bc cache get --text e 0 199999 399999
want_out '1\n200000\n400000\n'

t "the shard length of a new root comes from the first records"
bc_in input cache fill --shard-size 100 s -
want_rc 0
bc cache info s
# 16 records "1".."16": 9 + 14 bytes, + 8 each: 151 / 16 = 9 bytes a record.
check [ "$(field 'shard records')" = 11 ]
check [ "$(field length)" = 5000 ]

t "a limit smaller than the input: an evicted shard has no source"
bc_in input cache fill --shard-records 100 --limit 2600 m -
want_rc 0
bc cache info m
check [ "$(field length)" = 5000 ]
check [ "$(field 'length final')" = yes ]
check [ "$(field 'shards present')" -le 5 ]
bc cache get m 4999
want_rc 0
want_out '5000'
bc cache get m 0
want_rc 1
want_err 'records 0..100 are not cached and the cache has no source'

t "another stream than the one cached fails and changes nothing"
sed 's/^2500$/x/' input >other
bc_in other cache fill l -
want_rc 1
want_err 'not deterministic'
want_err "start over: delete what is cached with 'bagcache cache clear ROOT'"
# shellcheck disable=SC2046 # one argument per index
bc cache get --text l $(seq 0 4999)
want_out_file input
seq 1 5001 >longer
bc_in longer cache fill l -
want_rc 1
want_err 'not deterministic'

t "a frame cut short: the complete shards stay, the length is not final"
{
  cat frames
  printf '\005\000\000\000ab'
} >cutframes
bc_in cutframes cache fill --from frames --shard-records 2 c -
want_rc 1
want_err 'standard input: output ends inside frame 4 (2 of 5 bytes)'
bc cache info c
check [ "$(field length)" = 4 ]
check [ "$(field 'length final')" = no ]

t "usage errors"
bc cache fill --tee u -- true
want_rc 2
want_err "--tee needs '-'"
bc cache fill u - -- true
want_rc 2
want_err "no COMMAND after '--'"
bc cache fill --seek-arg u -
want_rc 2
want_err '--seek-arg needs a COMMAND'

finish
