"""The cache demo (doc/examples/cache_demo.py, what `./bootstrap.sh demo`
runs first) on a small, fast source: every line it prints, in order, with
what each line claims checked."""

import os
import pathlib
import re
import subprocess
import sys

DEMO = pathlib.Path(__file__).resolve().parents[2] / "doc" / "examples" / "cache_demo.py"


def test_cache_demo_runs_and_says_what_happened(tmp_path):
    out_dir = tmp_path / "not" / "yet" / "there"  # parents are created
    run = subprocess.run(
        [sys.executable, str(DEMO), str(out_dir), "--items", "400", "--delay", "0.0002"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    t = r"\s+[0-9.]+ (?:us|ms)"
    patterns = [
        r"source: 400 items, 0\.2 ms each, about \d+ KiB pickled; disk limit \d+ KiB; "
        r"100 records per shard",
        rf"first touch     loader\[233\]{t}   \(the iterator ran to record 300\)",
        rf"warm read       loader\[233\]{t}   \(median of 200, the same shard\)",
        r"all shards read once: \d+ evicted; on disk now (\d+) KiB <= limit (\d+) KiB, "
        r"shards \[.*\]",
        rf"regenerated     loader\[(\d+)\]{t}   \(its shard had been evicted; "
        r"shards regenerated: 1, records produced: (\d+)\)",
        rf"second process  loader\[\d+\]{t}   \(pid \d+, shards filled here: 0\)",
        r"the cache stays in .*/slow-cache \(shards/\*\.bag are Bagz files: "
        r"bagcache bag info .*\.bag\)",
    ]
    assert len(lines) == len(patterns), run.stdout
    for line, pattern in zip(lines, patterns):
        assert re.fullmatch(pattern, line), (pattern, line)
    used, limit = map(int, re.search(r"now (\d+) KiB <= limit (\d+)", lines[3]).groups())
    assert used <= limit
    # The regenerated record's shard is not among those left on disk, and
    # producing it took at least that shard and at most the whole source.
    again, produced = map(int, re.fullmatch(patterns[4], lines[4]).groups())
    assert f"({again - again % 100}, {again - again % 100 + 100})" not in lines[3]
    assert 100 <= produced <= 400
    shard = re.search(r"bag info (\S+\.bag)", lines[-1]).group(1)
    assert os.path.isfile(shard)
