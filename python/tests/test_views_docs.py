"""The Python examples of doc/python.md and README.md, run as written.

Each file's ```python blocks run in order in one namespace, in an empty
temporary directory (the examples write relative paths), so the
documentation cannot drift from the code."""

import os
import re

import pytest


def blocks(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def source(name):
    srcdir = os.environ.get("BC_SRCDIR")
    if srcdir is None:
        srcdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    return os.path.join(srcdir, name)


@pytest.mark.parametrize("name", ["doc/python.md", "README.md"])
def test_examples_run(name, tmp_path, monkeypatch):
    found = blocks(source(name))
    assert found, f"{name} has no ```python example"
    if re.search(r"\bnumpy\b|\bnp\.|chunk_shuffle_idx", "".join(found)):
        try:
            import numpy  # noqa: F401
        except ImportError:
            pytest.skip(f"{name}'s examples need numpy, which is not installed")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__doc_example__"}
    for k, code in enumerate(found):
        exec(compile(code, f"{name} (python block {k + 1})", "exec"), namespace)
    # close what the examples left open (LoadIt fill threads)
    for value in list(namespace.values()):
        close = getattr(value, "close", None)
        if callable(close) and type(value).__name__ in ("LoadIt",):
            close()
