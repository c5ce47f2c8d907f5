"""pytest configuration of the bagcache Python tests.

The tests import `bagcache` from the build tree (python/pkg, put first on
PYTHONPATH by python/run-pytest.sh); they never write outside pytest's
temporary directories."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bagz_data  # noqa: E402


@pytest.fixture
def records():
    return bagz_data.generate_records()


@pytest.fixture
def bag_path(tmp_path, records):
    """A .bagz file holding bagz's 20 test records (tail limits, zstd)."""
    path = tmp_path / "data.bagz"
    bagz_data.write_records(path, records)
    return path


@pytest.fixture
def golden():
    return bagz_data.golden_dir()


def pytest_collection_modifyitems(config, items):
    """BC_PYTEST_DESELECT (make check-python-threads sets it): the tests not
    to run, as "test_file.py::test_name[params]".  A name that matches no
    collected test is an error, so the list cannot go stale silently."""
    names = set(os.environ.get("BC_PYTEST_DESELECT", "").split())
    if not names:
        return
    keep, drop = [], []
    for item in items:
        name = os.path.basename(str(item.fspath)) + "::" + item.name
        (drop if name in names else keep).append(item)
    unknown = names - {os.path.basename(str(i.fspath)) + "::" + i.name for i in drop}
    if unknown:
        raise pytest.UsageError("BC_PYTEST_DESELECT names no collected test: "
                                + " ".join(sorted(unknown)))
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
