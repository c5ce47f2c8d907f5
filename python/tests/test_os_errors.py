"""Operating-system failures reach Python as OSError with their errno
(PermissionError for EACCES), never as ValueError; an unreadable shard is
regenerated when the cache has a source.

Permission checks do not apply to root (CAP_DAC_OVERRIDE), and CI runs as
root: those scripts then run in a child whose bounding set lacks
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (dropped before exec, so the
child is root without them and file modes apply to it).  A full disk is a
small tmpfs mounted in a private mount namespace (unshare -m as root,
unshare -rm otherwise)."""

import ctypes
import errno
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2


def _drop_dac():
    """preexec_fn: lose the capabilities that bypass file modes."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            os._exit(77)


def run_unprivileged(tmp_path, body, *args):
    """Runs `body` (Python source) in a child to which file modes apply;
    returns its stdout.  The body may use ARGS (sys.argv[1:]) and prints
    what the test checks."""
    script = tmp_path / "script.py"
    probe = tmp_path / "probe"
    script.write_text(
        "import sys\nARGS = sys.argv[1:]\n"
        f"open({str(probe)!r}, 'w').close()\n"
        f"import os; os.chmod({str(probe)!r}, 0)\n"
        "try:\n"
        f"    open({str(probe)!r}).close()\n"
        "    sys.exit(78)  # file modes do not apply: cannot test\n"
        "except PermissionError:\n"
        "    pass\n" + textwrap.dedent(body)
    )
    pre = _drop_dac if os.geteuid() == 0 else None
    r = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                       text=True, preexec_fn=pre, timeout=120)
    if r.returncode in (77, 78):
        pytest.skip("cannot drop the privilege to ignore file modes here")
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_reader_of_unreadable_file_raises_permission_error(tmp_path):
    out, _ = run_unprivileged(tmp_path, """
        import bagcache, errno, os
        path = ARGS[0]
        with bagcache.Writer(path) as w:
            w.write(b"abc")
        os.chmod(path, 0)
        try:
            bagcache.Reader(path)
        except PermissionError as e:
            print(type(e).__name__, e.errno == errno.EACCES, e.strerror)
        """, tmp_path / "a.bag")
    kind, right_errno, message = out.split(" ", 2)
    assert (kind, right_errno) == ("PermissionError", "True")
    assert message.strip() == f"{tmp_path / 'a.bag'}: open: Permission denied"


SHARD_SCRIPT = """
    import bagcache, glob, os
    root = ARGS[0]
    def source():
        return iter(range(100))
    ld = bagcache.LoadIt(root, source, max_shard_length=10)
    assert (ld[5], ld[15]) == (5, 15)
    ld.close()
    shard = glob.glob(os.path.join(root, "shards", "10.20.*"))[0]
    os.chmod(shard, 0)
"""


def test_unreadable_shard_without_source_raises_permission_error(tmp_path):
    out, _ = run_unprivileged(tmp_path, SHARD_SCRIPT + """
    import errno
    ro = bagcache.LoadIt(root, None)
    assert ro[5] == 5  # another shard reads fine
    try:
        ro[15]
    except PermissionError as e:
        print(e.errno == errno.EACCES, e.strerror)
    """, tmp_path / "r")
    right_errno, message = out.split(" ", 1)
    assert right_errno == "True"
    assert message.strip() == f"{tmp_path / 'r' / 'shards' / '10.20.bag'}: open: Permission denied"


def test_unreadable_shard_is_regenerated_from_the_source(tmp_path):
    out, err = run_unprivileged(tmp_path, SHARD_SCRIPT + """
    ld = bagcache.LoadIt(root, source, max_shard_length=10)
    print([ld[i] for i in range(10, 20)], ld.stats()["regenerations"],
          os.access(shard, os.R_OK))
    """, tmp_path / "r")
    assert out.strip() == f"{list(range(10, 20))} 1 True"
    assert "Permission denied; regenerating it" in err


# ---- a full disk -------------------------------------------------------------------


def run_on_full_disk(tmp_path, body, size="256k"):
    """Runs `body` with MNT (a tmpfs of `size`) as ARGS[0]; returns stdout."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "script.py"
    script.write_text("import sys\nARGS = sys.argv[1:]\n" + textwrap.dedent(body))
    inner = (f'mount -t tmpfs -o size={size} tmpfs "$1" || exit 77; '
             f'exec "{sys.executable}" "{script}" "$1"')
    flags = ["-m"] if os.geteuid() == 0 else ["-r", "-m"]
    r = subprocess.run(["unshare", *flags, "sh", "-c", inner, "sh", str(mnt)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 77 or r.stderr.startswith("unshare:"):
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_full_disk_is_oserror_enospc(tmp_path):
    out = run_on_full_disk(tmp_path, """
        import bagcache, errno, os
        mnt = ARGS[0]
        def show(what, e):
            print(what, type(e).__name__, e.errno == errno.ENOSPC, isinstance(e, ValueError),
                  e.strerror.endswith(": write: No space left on device"))
        w = bagcache.Writer(os.path.join(mnt, "a.bag"))
        try:
            for _ in range(100):
                w.write(os.urandom(10000))
            w.close()
        except OSError as e:
            show("writer", e)
        for name in os.listdir(mnt):
            os.unlink(os.path.join(mnt, name))
        def source():
            return (os.urandom(20000) for _ in range(1000))
        ld = bagcache.LoadIt(os.path.join(mnt, "r"), source, max_shard_length=20,
                             serializer="raw", preload_fn=None)
        for i in (0, 500):  # filled on this thread, then on a helper
            try:
                ld[i]
            except OSError as e:
                show(f"ld[{i}]", e)
        try:
            ld.read_indices([700])
        except OSError as e:
            show("read_indices", e)
        """)
    assert out.splitlines() == [
        "writer OSError True False True",
        "ld[0] OSError True False True",
        "ld[500] OSError True False True",
        "read_indices OSError True False True",
    ]


def test_corrupt_data_stays_value_error(tmp_path):
    """Codes decide the class: damaged bytes are not an OSError."""
    import bagcache

    path = tmp_path / "bad.bag"
    path.write_bytes(b"\x01" * 5)
    with pytest.raises(ValueError) as info:
        bagcache.Reader(str(path))
    assert not isinstance(info.value, OSError)


def test_missing_file_is_file_not_found_with_errno(tmp_path):
    import bagcache

    with pytest.raises(FileNotFoundError) as info:
        bagcache.Reader(str(tmp_path / "none.bag"))
    assert info.value.errno == errno.ENOENT
    assert str(tmp_path / "none.bag") in str(info.value)
