"""What a user can see of a root: the library's notices reach Python's
logging (and sys.stderr, not file descriptor 2, while logging is not
configured), and stats()["root"] counts the work of every process that used
the root, which `bagcache cache info` reports too."""

import contextlib
import io
import json
import logging
import multiprocessing as mp
import os
import subprocess
import sys
import threading

import pytest

import bagcache

from loadit_helpers import Source, bagcache_command, item

N = 400
MSL = 20


# ---- notices --------------------------------------------------------------------


def _reopen_with_another_shard_length(root):
    bagcache.LoadIt(root, Source(50), max_shard_length=10).close()
    loader = bagcache.LoadIt(root, Source(50), max_shard_length=7)
    assert loader[12] == item(12)
    return loader


def test_a_notice_goes_to_the_bagcache_logger(tmp_path, caplog, capfd):
    caplog.set_level(logging.WARNING, logger="bagcache")
    loader = _reopen_with_another_shard_length(str(tmp_path))
    mine = [r for r in caplog.records if r.name == "bagcache"]
    assert len(mine) == 1 and mine[0].levelno == logging.WARNING
    assert mine[0].getMessage() == (
        f"{tmp_path}: keeping the existing cache's shard length (10 records) "
        "and compression (none) over the options given")
    assert "keeping" not in capfd.readouterr().err  # not written to fd 2 as well
    loader.close()


def test_a_logger_level_above_warning_silences_notices(tmp_path, caplog, capfd):
    caplog.set_level(logging.ERROR, logger="bagcache")
    _reopen_with_another_shard_length(str(tmp_path)).close()
    assert [r for r in caplog.records if r.name == "bagcache"] == []
    assert "keeping" not in capfd.readouterr().err


_UNCONFIGURED = r"""
import contextlib, io, sys
import bagcache
sys.path.insert(0, sys.argv[2])
from loadit_helpers import Source
root = sys.argv[1]
bagcache.LoadIt(root, Source(50), max_shard_length=10).close()
buf = io.StringIO()
with contextlib.redirect_stderr(buf):
    bagcache.LoadIt(root, Source(50), max_shard_length=7).close()
print(repr(buf.getvalue()))
"""


def test_without_logging_configured_a_notice_goes_to_sys_stderr(tmp_path):
    # A fresh interpreter, where logging has no handler: the line reaches
    # sys.stderr (so redirect_stderr, and Jupyter, see it), and fd 2 gets nothing.
    tests = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run([sys.executable, "-c", _UNCONFIGURED, str(tmp_path), tests],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert eval(run.stdout) == (
        f"bagcache: notice: {tmp_path}: keeping the existing cache's shard length "
        "(10 records) and compression (none) over the options given\n")


def test_a_notice_raised_off_the_main_thread_is_delivered(tmp_path, caplog):
    # A damaged shard is found by a read in another thread, inside the engine
    # with the GIL released: the notice is queued and delivered with the GIL.
    caplog.set_level(logging.WARNING, logger="bagcache")
    root = str(tmp_path)
    with bagcache.LoadIt(root, Source(60), max_shard_length=10) as loader:
        assert list(loader) == [item(i) for i in range(60)]
    shard = os.path.join(root, "shards", "20.30.bag")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 3)
    loader = bagcache.LoadIt(root, Source(60), max_shard_length=10)
    got = []
    t = threading.Thread(target=lambda: got.append(loader[25]))
    t.start()
    t.join()
    assert got == [item(25)]
    bagcache._bagcache._flush_notices()  # (delivered already, else now)
    said = [r.getMessage() for r in caplog.records if r.name == "bagcache"]
    assert len(said) == 1 and said[0].endswith("; regenerating it") and "20.30" in said[0]
    loader.close()


# ---- root-wide counters -----------------------------------------------------------


def _worker(root, memory_limit, seed, queue):
    import random
    loader = bagcache.LoadIt(root, Source(N), max_shard_length=MSL,
                             memory_limit=memory_limit, preload_fn=None)
    rng = random.Random(seed)
    for _ in range(40):
        i = rng.randrange(N)
        assert loader[i] == item(i)
    loader.sync()
    st = loader.stats()
    loader.close()
    queue.put({k: st[k] for k in ("fills", "regenerations", "evictions",
                                  "records_generated", "shards_kept")})


def test_root_counters_sum_every_process(tmp_path):
    root = str(tmp_path / "root")
    probe = bagcache.LoadIt(str(tmp_path / "probe"), Source(N), max_shard_length=MSL)
    list(probe)
    limit = 5 * max(s["bytes"] for s in probe.shards())
    probe.close()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(root, limit, seed, queue)) for seed in (1, 2)]
    for p in procs:
        p.start()
    seen = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    parent = bagcache.LoadIt(root)
    st = parent.stats()
    # The parent read nothing; the root counts what both workers did.
    assert st["fills"] == st["regenerations"] == st["records_generated"] == 0
    want = {k: sum(s[k] for s in seen) for k in seen[0]}
    assert want["regenerations"] > 0 and want["evictions"] > 0
    root_counts = st["root"]
    assert {k: root_counts[k] for k in want} == want
    assert root_counts["misses"] == want["fills"] + want["regenerations"]
    assert root_counts["bytes_written"] >= st["bytes_on_disk"] > 0
    parent.close()

    # `bagcache cache info` shows the same counters, and no per-process ones.
    exe, env = bagcache_command()
    out = subprocess.run([exe, "cache", "info", "--json", root], capture_output=True,
                         text=True, check=True, env=env).stdout
    counters = json.loads(out)["counters"]
    assert counters == {"misses": root_counts["misses"], "fills": root_counts["fills"],
                        "regenerations": root_counts["regenerations"],
                        "evictions": root_counts["evictions"],
                        "records_generated": root_counts["records_generated"],
                        "bytes_written": root_counts["bytes_written"],
                        "shards_kept": root_counts["shards_kept"]}


# ---- a root filled by `bagcache cache fill -- CMD` -------------------------------


@pytest.mark.filterwarnings("ignore::bagcache.CacheWarning")  # (random reads, on purpose)
@pytest.mark.parametrize("seek", [False, True])
def test_source_command_reruns_the_stored_command(tmp_path, seek):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").write_text("".join(f"line {i}\n" for i in range(1500)))
    # The command leaves a mark each time it runs.
    (work / "cmd.sh").write_text('#!/bin/sh\necho run >>ran\nexec tail -n "+$1" data\n')
    (work / "cmd.sh").chmod(0o755)
    root = str(tmp_path / "root")
    exe, env = bagcache_command()
    argv = [exe, "cache", "fill", "--shard-records", "100", "--limit", "8k"]
    argv += ["--seek-arg", root, "--", "./cmd.sh", "{start1}"] if seek else \
            [root, "--", "./cmd.sh", "1"]
    subprocess.run(argv, cwd=work, check=True, timeout=120, env=env)
    runs = (work / "ran").read_text().count("run")
    want = [f"line {i}".encode() for i in range(1500)]

    # Without the opt-in the command never runs: an evicted record is a miss.
    plain = bagcache.LoadIt(root, serializer="raw")
    assert plain[1499] == want[1499]
    with pytest.raises(bagcache.NotCachedError):
        plain[5]
    plain.close()
    assert (work / "ran").read_text().count("run") == runs

    loader = bagcache.LoadIt(root, source="command")
    assert loader[5] == want[5] and loader[250] == want[250] and len(loader) == 1500
    order = (0, 99, 100, 1499, 300, 700, 1100, 0)
    assert [loader[i] for i in order] == [want[i] for i in order]
    assert (work / "ran").read_text().count("run") > runs
    st = loader.stats()
    assert st["regenerations"] >= 3
    # A seekable command rebuilds a shard from its start: one shard per miss.
    if seek:
        assert st["records_skipped"] == 0
    loader.close()


def test_source_command_needs_a_stored_command(tmp_path):
    root = str(tmp_path / "root")
    bagcache.LoadIt(root, Source(10)).close()
    with pytest.raises(ValueError, match="no command is stored with the cache"):
        bagcache.LoadIt(root, source="command")
    with pytest.raises(ValueError, match="source must be None or 'command'"):
        bagcache.LoadIt(root, source="cmd")
    with pytest.raises(TypeError, match="not both"):
        bagcache.LoadIt(root, Source(10), source="command")
