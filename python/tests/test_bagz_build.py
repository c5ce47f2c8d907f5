"""The package itself: imported from the build tree, extension named for this
interpreter and exporting only its init function, documented, and described
completely by its type stubs."""

import ast
import os
import pathlib
import shutil
import subprocess
import sysconfig

import pytest

import bagcache
import bagcache as bagz

PUBLIC_TYPES = ("Reader", "Writer", "Index", "MultiIndex", "ReaderIterator")


def test_imported_from_the_build_tree():
    builddir = os.environ.get("BC_BUILDDIR")
    if builddir is None:
        pytest.skip("not run by make check")
    pkg = pathlib.Path(bagcache.__file__).resolve().parent
    assert pkg == (pathlib.Path(builddir) / "python" / "pkg" / "bagcache").resolve()


def test_extension_name_and_exports():
    ext = pathlib.Path(bagcache._bagcache.__file__)
    assert ext.name == "_bagcache" + sysconfig.get_config_var("EXT_SUFFIX")
    if shutil.which("nm") is None:
        pytest.skip("nm is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(ext)],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines()
                if line.split()[-2:-1] and line.split()[-2] in "TDBRV"}
    assert exported == {"PyInit__bagcache"}


def test_version():
    assert bagcache.__version__ == bagcache._bagcache.version()
    assert all(part.isdigit() for part in bagcache.__version__.split("."))


def _public_members(obj):
    return [n for n in dir(obj) if not n.startswith("_")]


def test_everything_public_is_documented():
    assert bagcache.__doc__
    for name in bagcache.__all__:
        obj = getattr(bagcache, name)
        assert obj.__doc__, name
    for name in PUBLIC_TYPES:
        cls = getattr(bagcache, name)
        for member in _public_members(cls):
            if member in ("name", "value"):
                continue
            assert getattr(cls, member).__doc__, f"{name}.{member}"
    for cls in (bagz.Reader.Options, bagz.Writer.Options, bagz.CompressionZstd):
        assert cls.__doc__


def _stub_names():
    stub = pathlib.Path(bagcache.__file__).with_name("__init__.pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            members[node.name] = set()
            for n in node.body:
                if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                    members[node.name].add(n.name)
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    members[node.name].add(n.target.id)
                elif isinstance(n, ast.Assign):
                    members[node.name].update(t.id for t in n.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AnnAssign)):
            names.add(node.name if isinstance(node, ast.FunctionDef) else node.target.id)
    return names, members


def test_stubs_cover_the_api():
    names, members = _stub_names()
    assert set(bagcache.__all__) <= names
    for name in PUBLIC_TYPES:
        cls = getattr(bagcache, name)
        missing = set(_public_members(cls)) - members[name]
        assert not missing, f"{name}: {sorted(missing)} not in the stubs"
    assert {"Options"} <= members["Reader"] and {"Options"} <= members["Writer"]
    for cls in ("LimitsPlacement", "LimitsStorage", "ShardingLayout", "AccessPattern",
                "CachePolicy"):
        assert {m.name for m in getattr(bagcache, cls)} <= members[cls], cls
