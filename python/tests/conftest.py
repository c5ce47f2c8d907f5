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
