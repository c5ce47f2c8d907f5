"""LoadIt's progress line (progress=): len() on a new root,
wait_until_all_cached() and preload_all_async on standard error - its
format and numbers, its end (a newline, nothing written after the call
returns, no thread left), auto mode (a terminal only, BAGCACHE_PROGRESS=0),
and tqdm (a fake module recording its calls).

The line is checked in child processes whose standard error is a pipe or
a pseudo-terminal; the records are bytes (serializer="raw") of 64 KiB, so
the MiB read are exact."""

import fcntl
import os
import pickle
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap

import pytest

from bagcache import LoadIt

HERE = os.path.dirname(os.path.abspath(__file__))
N = 40
SIZE = 65536  # 40 records: 2.5 MiB

# The script's prelude: a slow source of N records of SIZE bytes.
PRELUDE = f"""
import os, sys, threading, time
if not os.environ.get("BC_TEST_REAL_TQDM"):
    sys.modules["tqdm"] = None  # the plain line, whether tqdm is installed or not
from bagcache import LoadIt

class Slow:
    def __init__(self, n, delay, fail_at=None):
        self.n, self.delay, self.fail_at = n, delay, fail_at
    def __call__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise ValueError(f"boom at {{i}}")
            time.sleep(self.delay)
            yield bytes([i % 251]) * {SIZE}

def say(text):
    sys.stderr.write(text + "\\n")
    sys.stderr.flush()

def threads_left():
    return [t.name for t in threading.enumerate() if t.name == "bagcache-progress"]

root = sys.argv[1]
"""


def run(tmp_path, body, env=None, tty=False, columns=0):
    """Runs PRELUDE + body with root tmp_path/"deep"/"root"; returns its
    standard error as text (from a pty, `columns` wide: with "\\r\\n" made
    "\\n")."""
    script = PRELUDE + textwrap.dedent(body)
    root = str(tmp_path / "deep" / "root")
    full_env = dict(os.environ)
    full_env.pop("BAGCACHE_PROGRESS", None)
    full_env.update(env or {})
    args = [sys.executable, "-c", script, root]
    if not tty:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=full_env, timeout=120)
        err = p.stderr.decode()
        assert p.returncode == 0, err
        return root, err
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave, env=full_env)
    finally:
        os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child's side is closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    assert p.wait(timeout=120) == 0
    return root, b"".join(chunks).decode().replace("\r\n", "\n")


LINE = re.compile(
    r"(?P<label>.*): (?P<records>\d+)(?: of (?P<length>\d+))? records"
    r"(?: \((?P<pct>\d+)%\))?, (?P<mib>\d+\.\d) MiB, (?P<rate>\d+) records/s, "
    r"(?P<mibrate>\d+\.\d) MiB/s, (?P<secs>\d+) s *"
)


def line_states(text):
    """The states drawn by a progress line ending with a newline at the
    start of text: (list of match dicts, the rest of text)."""
    assert text.startswith("\r"), repr(text[:200])
    end = text.index("\n")
    states = []
    for seg in text[1:end].split("\r"):
        m = LINE.fullmatch(seg)
        assert m is not None, repr(seg)
        states.append(m.groupdict())
    return states, text[end + 1:]


def check_states(states, root, final_records, length_known_from_start):
    records = [int(s["records"]) for s in states]
    assert records == sorted(records), records  # never decreasing
    for s in states:
        assert s["label"] == root
        if s["length"] is not None:
            assert int(s["pct"]) == int(s["records"]) * 100 // int(s["length"])
        else:
            assert not length_known_from_start
    last = states[-1]
    assert (last["records"], last["length"], last["pct"]) == (str(final_records), str(N), "100")
    assert last["mib"] == f"{final_records * SIZE / (1 << 20):.1f}"


# ---- the plain line ------------------------------------------------------------


def test_len_draws_a_line_that_ends_before_len_returns(tmp_path):
    root, err = run(tmp_path, f"""
        loader = LoadIt(Slow({N}, 0.03), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True)
        n = len(loader)
        say(f"LEN {{n}} {{threads_left()}}")
        time.sleep(0.6)  # a display still running would draw meanwhile
        say("END")
    """)
    states, rest = line_states(err)
    assert rest == f"LEN {N} []\nEND\n"
    assert len(states) >= 2  # at least one state before the final one
    check_states(states, root, N, length_known_from_start=False)
    assert states[0]["length"] is None  # the length was not known meanwhile


def test_wait_until_all_cached_shows_the_percentage(tmp_path):
    root, err = run(tmp_path, f"""
        loader = LoadIt(Slow({N}, 0.03), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True, length={N})
        ok = loader.wait_until_all_cached()
        say(f"DONE {{ok}} {{threads_left()}}")
        ok = loader.wait_until_all_cached()  # nothing left to do: 100% at once
        say(f"AGAIN {{ok}}")
    """)
    states, rest = line_states(err)
    check_states(states, root, N, length_known_from_start=True)
    assert len(states) >= 2
    assert int(states[0]["pct"]) < 100
    assert rest.startswith("DONE True []\n")
    again, rest = line_states(rest[len("DONE True []\n"):])
    assert rest == "AGAIN True\n"
    assert again[-1]["pct"] == "100" and again[-1]["mib"] == "0.0"


def test_an_iterator_error_ends_the_line(tmp_path):
    _, err = run(tmp_path, """
        loader = LoadIt(Slow(40, 0.02, fail_at=30), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True)
        try:
            len(loader)
        except ValueError as e:
            say(f"RAISED {e} {threads_left()}")
    """)
    states, rest = line_states(err)
    assert rest == "RAISED boom at 30 []\n"
    assert states[-1]["length"] is None and int(states[-1]["records"]) <= 30


def test_ctrl_c_ends_the_line(tmp_path):
    _, err = run(tmp_path, """
        import _thread
        loader = LoadIt(Slow(400, 0.02), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True)
        threading.Timer(1.2, _thread.interrupt_main).start()
        try:
            len(loader)
        except KeyboardInterrupt:
            say(f"INTERRUPTED {threads_left()}")
        time.sleep(0.6)
        say("END")
    """)
    states, rest = line_states(err)
    assert rest == "INTERRUPTED []\nEND\n"
    assert 0 < int(states[-1]["records"]) < 400 and states[-1]["length"] is None


def test_preload_line_ends_with_the_drain(tmp_path):
    root, err = run(tmp_path, f"""
        loader = LoadIt(Slow({N}, 0.02), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True, preload_all_async=True)
        shown = loader._preload_shown
        for _ in range(3000):
            if shown.done:
                break
            time.sleep(0.01)
        time.sleep(0.3)
        say(f"DONE {{shown.done}} {{threads_left()}} {{loader.all_cached_to_disk()}}")
        loader.close()
        say("CLOSED")
    """)
    states, rest = line_states(err)
    check_states(states, root, N, length_known_from_start=False)
    assert rest == "DONE True [] True\nCLOSED\n"


def test_close_ends_the_preload_line(tmp_path):
    _, err = run(tmp_path, """
        loader = LoadIt(Slow(400, 0.02), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True, preload_all_async=True)
        time.sleep(0.8)
        loader.close()
        say(f"CLOSED {threads_left()}")
        time.sleep(0.6)
        say("END")
        # a complete root: no preload line at all
        again = LoadIt(Slow(400, 0.0), root_dir=root, serializer="raw", progress=True)
        again.wait_until_all_cached()
        again.close()
        say("FILLED")
        LoadIt(Slow(400, 0.0), root_dir=root, serializer="raw", progress=True,
               preload_all_async=True).close()
        say("QUIET")
    """)
    states, rest = line_states(err)
    assert 0 < int(states[-1]["records"]) < 400
    assert rest.startswith("CLOSED []\nEND\n")
    rest = rest[len("CLOSED []\nEND\n"):]
    _, rest = line_states(rest)
    assert rest == "FILLED\nQUIET\n"


def test_len_takes_the_preload_line_over(tmp_path):
    root, err = run(tmp_path, f"""
        loader = LoadIt(Slow({N}, 0.03), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True, preload_all_async=True)
        for _ in range(3000):  # until the preload's line shows something
            if loader._preload_shown._out._width:
                break
            time.sleep(0.01)
        n = len(loader)
        say(f"LEN {{n}} {{threads_left()}}")
    """)
    # The preload's line, erased, then len()'s line to the end.
    assert err.endswith(f"LEN {N} []\n")
    erase = re.search(r"\r +\r", err)
    assert erase is not None
    before = err[:erase.start()]
    assert "\n" not in before and LINE.fullmatch(before.split("\r")[-1])
    states, rest = line_states(err[erase.end():])
    assert rest == f"LEN {N} []\n"
    assert (states[-1]["records"], states[-1]["pct"]) == (str(N), "100")


# ---- auto mode -------------------------------------------------------------------

BODY = f"""
loader = LoadIt(Slow({N}, 0.01), root_dir=root, max_shard_length=8, serializer="raw"{{arg}})
say(f"LEN {{{{len(loader)}}}}")
"""


def test_auto_is_off_on_a_pipe(tmp_path):
    _, err = run(tmp_path, BODY.format(arg=""))
    assert err == f"LEN {N}\n"


@pytest.mark.parametrize("arg, env, shown", [
    ("", None, True),
    ("", {"BAGCACHE_PROGRESS": "0"}, False),
    ("", {"BAGCACHE_PROGRESS": "1"}, True),
    (", progress=False", None, False),
    (", progress=None", None, True),
])
def test_auto_on_a_terminal(tmp_path, arg, env, shown):
    root, err = run(tmp_path, BODY.format(arg=arg), env=env, tty=True)
    if not shown:
        assert err == f"LEN {N}\n"
        return
    states, rest = line_states(err)
    assert rest == f"LEN {N}\n"
    check_states(states, root, N, length_known_from_start=False)


def test_line_fits_the_terminal(tmp_path):
    # The root's name is shortened (from the left) to fit 100 columns.
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    root, err = run(deep, BODY.format(arg=""), tty=True, columns=100)
    assert len(root) > 100
    assert err.endswith(f"LEN {N}\n")
    segments = err[1:err.index("\n")].split("\r")
    for seg in segments:
        assert len(seg) <= 99, seg
        m = LINE.fullmatch(seg)
        assert m and m["label"].startswith("...") and root.endswith(m["label"][3:])
    assert " 40 of 40 records (100%)" in segments[-1]


def test_progress_argument(tmp_path):
    with pytest.raises(TypeError, match="progress"):
        LoadIt(str(tmp_path / "a"), lambda: iter(range(3)), progress="yes")
    loader = LoadIt(str(tmp_path / "b"), list(range(5)), progress=False)
    copy = pickle.loads(pickle.dumps(loader))
    assert copy._progress is False and list(copy) == list(range(5))
    copy.close()
    loader.close()


# ---- tqdm ------------------------------------------------------------------------

FAKE_TQDM = '''
calls = []

class tqdm:
    def __init__(self, **kwargs):
        calls.append(("init", kwargs))
        self.total = kwargs.get("total")
        self.n = kwargs.get("initial", 0)
        self.leave = kwargs.get("leave", True)

    def update(self, n=1):
        calls.append(("update", n, self.total))
        self.n += n

    def refresh(self):
        calls.append(("refresh", self.total))

    def set_postfix_str(self, s="", refresh=True):
        calls.append(("postfix", s))

    def close(self):
        calls.append(("close", self.n, self.total, self.leave))
'''


def test_tqdm_when_installed(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "tqdm.py").write_text(FAKE_TQDM)
    monkeypatch.syspath_prepend(str(fake))
    # setitem, not delitem: pytest undoes a delitem of an absent key by
    # leaving whatever the test imported, so the fake would outlive it.
    monkeypatch.setitem(sys.modules, "tqdm", None)
    del sys.modules["tqdm"]
    import tqdm

    def slow():
        import time
        for i in range(N):
            time.sleep(0.02)
            yield bytes([i]) * SIZE

    root = str(tmp_path / "r")
    loader = LoadIt(slow, root_dir=root, max_shard_length=8, serializer="raw", progress=True)
    assert len(loader) == N
    calls = list(tqdm.calls)
    loader.close()
    assert capsys.readouterr().err == ""  # no plain line meanwhile
    kind, kwargs = calls[0]
    assert kind == "init"
    assert kwargs["desc"] == root and kwargs["total"] is None and kwargs["initial"] == 0
    assert kwargs["file"] is sys.stderr and kwargs["unit"] == " records"
    assert [c[0] for c in calls].count("close") == 1 and calls[-1][0] == "close"
    assert calls[-1] == ("close", N, N, True)  # every record, the length known at the end
    assert sum(c[1] for c in calls if c[0] == "update") == N
    postfix = [c[1] for c in calls if c[0] == "postfix"]
    assert postfix[-1] == "2.5 MiB"
    # A second wait on the finished root: a new bar, from 100% at once.
    tqdm.calls.clear()
    with LoadIt(slow, root_dir=root, serializer="raw", progress=True) as again:
        assert again.wait_until_all_cached()
    assert tqdm.calls[0][1]["total"] == N and tqdm.calls[-1] == ("close", N, N, True)


def test_the_real_tqdm_when_installed(tmp_path):
    # Asked of a fresh interpreter, the one the script runs in: this
    # process's sys.modules may hold another test's fake.
    if subprocess.run([sys.executable, "-c", "import tqdm"],
                      capture_output=True).returncode != 0:
        pytest.skip("tqdm is not installed (the fake-tqdm test covers the calls)")
    _, err = run(tmp_path, f"""
        loader = LoadIt(root, Slow({N}, 0.002), serializer="raw", max_shard_length=4,
                        progress=True)
        assert len(loader) == {N}
        say("returned")
    """, env={"BC_TEST_REAL_TQDM": "1"})
    frames = err.replace("\r", "\n").split("\n")
    bars = [f for f in frames if "records" in f]
    assert bars and "100%" in bars[-1] and f"{N}.0/{N}.0" in bars[-1] and "2.5 MiB" in bars[-1]
    assert err.rstrip("\n").endswith("returned")


# ---- single reads that wait (the watch) ----------------------------------------------

READS_LINE = re.compile(
    r"(?P<label>.*) \(reads wait for the iterator\): (?P<records>\d+) records, "
    r"(?P<mib>\d+\.\d) MiB, (?P<rate>\d+) records/s, (?P<mibrate>\d+\.\d) MiB/s, "
    r"(?P<secs>\d+) s *"
)


def reads_states(text):
    """The states drawn by the line of waiting reads at the start of text,
    up to its erasure ("\\r", spaces, "\\r"): (match dicts, the rest)."""
    m = re.match(r"((?:\r[^\r\n]+)+)\r( +)\r", text)
    assert m is not None, repr(text[:300])
    states = []
    for seg in m.group(1)[1:].split("\r"):
        got = READS_LINE.fullmatch(seg)
        assert got is not None, repr(seg)
        states.append(got.groupdict())
    assert len(m.group(2)) >= max(len(seg) for seg in m.group(1)[1:].split("\r"))
    return states, text[m.end():]


@pytest.mark.parametrize("tty, arg", [(True, ""), (False, ", progress=True")])
def test_a_long_single_read_shows_a_line_erased_before_it_returns(tmp_path, tty, arg):
    # data[30] on a new root runs the iterator over 31 records, 0.1 s each:
    # about 3 s, shown after 1 s; the quick reads after it show nothing.
    root, err = run(tmp_path, f"""
        loader = LoadIt(Slow({N}, 0.1), root_dir=root, max_shard_length=8,
                        serializer="raw", preload_fn=None{arg})
        got = loader[30]
        say(f"GOT {{got == bytes([30]) * {SIZE}}}")
        for i in (31, 25, 30):
            loader[i]
        time.sleep(0.6)
        say("END")
    """, tty=tty)
    states, rest = reads_states(err)
    assert rest == "GOT True\nEND\n"
    assert states and all(s["label"] == root for s in states)
    records = [int(s["records"]) for s in states]
    assert records == sorted(records) and 0 < records[-1] <= 31
    assert int(states[0]["secs"]) >= 1  # shown once the read had waited a second


def test_quick_reads_and_progress_off_show_nothing(tmp_path):
    _, err = run(tmp_path, f"""
        loader = LoadIt(Slow({N}, 0.001), root_dir=root, max_shard_length=8,
                        serializer="raw", progress=True)
        for i in range({N}):
            loader[i]
        slow = LoadIt(Slow({N}, 0.1), root_dir=root + "2", max_shard_length=8,
                      serializer="raw", progress=False)
        slow[20]
        say("END")
    """, tty=True)
    assert err == "END\n"


# ---- the warning about reads that keep regenerating ----------------------------------

THRASH = """
import random, warnings
from bagcache import CacheWarning
def source(start=0):
    for i in range(start, 2000):
        yield i.to_bytes(4, "little") * 25   # 100 bytes
limit = 8 * 2200  # 8 shards of 20 records (about 2.1 KB each)
loader = LoadIt(root, {factory}, max_shard_length=20, memory_limit=limit,
                serializer="raw", preload_fn=None)
if {drain}:
    n = len(loader)  # the last shards stay; the first ones were evicted
rng = random.Random(0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(60):
        i = {order}
        assert loader[i] == i.to_bytes(4, "little") * 25
mine = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
say(repr(mine))
"""


@pytest.mark.parametrize("factory, order, drain, warned", [
    ("lambda: source()", "rng.randrange(2000)", True, True),   # not seekable
    ("source", "rng.randrange(2000)", True, True),             # seekable: 20 per read
    ("lambda: source()", "_ * 7 % 80", False, False),          # within the limit
    ("lambda: source()", "_", True, False),                    # sequential
])
def test_reads_that_keep_regenerating_warn_once(tmp_path, factory, order, drain, warned):
    _, err = run(tmp_path, THRASH.format(factory=factory, order=order, drain=drain))
    mine = eval(err)
    if not warned:
        assert mine == []
        return
    assert len(mine) == 1
    text = mine[0]
    assert "keep regenerating evicted shards" in text and "chunk_shuffle" in text
    assert ("create_iter(start=0)" in text) == (factory != "source")


def test_bulk_reads_count_too(tmp_path):
    # read_indices (what a torch Dataset's __getitems__ does): the same
    # warning, once, and a long batch shows the line of waiting reads.
    _, err = run(tmp_path, """
        import random, warnings
        from bagcache import CacheWarning
        def source():
            for i in range(2000):
                yield i.to_bytes(4, "little") * 25
        loader = LoadIt(root, source, max_shard_length=20, memory_limit=8 * 2200,
                        serializer="raw", preload_fn=None)
        n = len(loader)
        rng = random.Random(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(15):
                idx = [rng.randrange(2000) for _ in range(4)]
                assert loader.read_indices(idx) == [i.to_bytes(4, "little") * 25 for i in idx]
        mine = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
        say(repr(len(mine)))
        slow = LoadIt(Slow(40, 0.1), root_dir=root + "2", max_shard_length=8,
                      serializer="raw", preload_fn=None, progress=True)
        got = slow.read_indices([30])
        say(f"GOT {got == [bytes([30]) * 65536]}")
    """)
    first, rest = err.split("\n", 1)
    assert first == "1"
    states, rest = reads_states(rest)
    assert rest == "GOT True\n" and states
