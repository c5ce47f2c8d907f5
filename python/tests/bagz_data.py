"""Shared helpers of the bagz-compatibility tests: the golden vectors
(tests/data/bagz, owned by the C tests) and bagz's own test records."""

import ctypes
import ctypes.util
import hashlib
import json
import os
import pathlib

import bagcache as bagz

NUM_RECORDS = 20


def generate_record(row: int) -> bytes:
    """bagz's test records: every fourth one (row % 4 == 2) is empty."""
    if (row + 2) % 4 == 0:
        return b""
    return f"Record_{row:03d}".encode()


def generate_records(n: int = NUM_RECORDS) -> list:
    return [generate_record(i) for i in range(n)]


def write_records(path, records, options=None) -> None:
    with bagz.Writer(path, options or bagz.Writer.Options()) as writer:
        for record in records:
            writer.write(record)


# ---- golden vectors -------------------------------------------------------


def golden_dir() -> pathlib.Path:
    """tests/data/bagz of the source tree (BC_SRCDIR under make check)."""
    top = os.environ.get("BC_SRCDIR")
    root = pathlib.Path(top) if top else pathlib.Path(__file__).resolve().parents[2]
    return root / "tests" / "data" / "bagz"


def manifest() -> dict:
    with open(golden_dir() / "manifest.json", encoding="utf-8") as f:
        return json.load(f)


def vectors(pred=lambda v: True) -> list:
    return [v for v in manifest()["vectors"] if pred(v)]


def _noise300() -> bytes:
    x, out = 42, bytearray()
    for _ in range(300):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append((x >> 16) & 0xFF)
    return bytes(out)


RULES = {
    "text100k": lambda: b"".join(
        b"line %06d: the quick brown fox jumps over the lazy dog\n" % i
        for i in range(2000)
    )[:102400],
    "bytes200k": lambda: bytes(range(256)) * 800,
    "noise300": _noise300,
}


def record_bytes(rec: dict) -> bytes:
    """The bytes of a manifest record (hex, text or a named rule), checked
    against the manifest's length and SHA-256."""
    if "hex" in rec:
        data = bytes.fromhex(rec["hex"])
    elif "text" in rec:
        data = rec["text"].encode("ascii")
    else:
        data = RULES[rec["rule"]]()
    assert len(data) == rec["len"]
    assert hashlib.sha256(data).hexdigest() == rec["sha256"]
    return data


def _compression(value):
    if value in (None, "auto"):
        return bagz.CompressionAutoDetect()
    if value == "none":
        return bagz.CompressionNone()
    zstd = value["zstd"]
    return bagz.CompressionZstd(
        level=zstd.get("level", 0), dictionary=zstd.get("dictionary", "")
    )


def reader_options(v: dict) -> "bagz.Reader.Options":
    o = v.get("reader_options", {})
    return bagz.Reader.Options(
        limits_placement=bagz.LimitsPlacement[o.get("limits_placement", "TAIL")],
        sharding_layout=bagz.ShardingLayout[o.get("sharding_layout", "CONCATENATED")],
        compression=_compression(o.get("compression")),
    )


def writer_options(o) -> "bagz.Writer.Options":
    o = o or {}
    return bagz.Writer.Options(
        limits_placement=bagz.LimitsPlacement[o.get("limits_placement", "TAIL")],
        compression=_compression(o.get("compression")),
    )


def zstd_version() -> int:
    """ZSTD_versionNumber() of the system libzstd (0 if it cannot be found)."""
    name = ctypes.util.find_library("zstd")
    if name is None:
        return 0
    return ctypes.CDLL(name).ZSTD_versionNumber()


def byte_exact(kind: str) -> bool:
    """Whether this machine must reproduce a vector's bytes exactly: always
    for "exact"; for "exact-if-same-zstd" with the libzstd versions known to
    produce the reference bytes (1.5.4 made them, 1.5.6 matches)."""
    if kind == "exact":
        return True
    return zstd_version() in (10504, 10506)


def sha256_file(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
