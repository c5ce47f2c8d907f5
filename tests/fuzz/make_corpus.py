#!/usr/bin/env python3
"""Writes the seed corpus of the bag reader fuzzer (tests/fuzz/corpus/bag_reader).

    python3 tests/fuzz/make_corpus.py [--vectors DIR] [--out DIR]

Every seed is one fuzzer input: a mode byte, then file bytes (see the comment
at the top of fuzz_bag_reader.c).  The seeds are the Bagz golden vectors
(--vectors, default tests/data/bagz) in tail and separate form, each once
with the default reader options and once with IN_MEMORY limits,
DROP_AFTER_READ and two threads, plus hand-made edge cases: tiny and
malformed tails, bad limits, and zstd frames that are truncated, doubled,
skippable, without a content size, claiming a huge size or expanding past the
fuzzer's 1 MiB record limit.  Standard library only; the output is
deterministic, and the directory is emptied first.
"""

import argparse
import os
import struct
import sys

# Mode bits (fuzz_bag_reader.c).
SEPARATE, ZSTD, IN_MEMORY, DROP, PARALLEL, LEVEL1 = 1, 2, 4, 8, 64, 128
SPLIT_RECORDS_FIRST, SPLIT_LIMITS_FIRST = 0 << 4, 3 << 4
VARIANT = IN_MEMORY | DROP | PARALLEL
MAX_SEED = 65536


def limits(sizes):
    """u64 LE end offsets of records with the given stored sizes."""
    out, end = b"", 0
    for n in sizes:
        end += n
        out += struct.pack("<Q", end)
    return out


def tail(records):
    return b"".join(records) + limits(len(r) for r in records)


def separate_input(mode, records_file, limits_file, limits_first=False):
    """Fuzzer input for a separate-limits pair (split point in 2 bytes)."""
    first, second = ((limits_file, records_file) if limits_first
                     else (records_file, limits_file))
    split = len(first)
    assert split < 65536
    how = SPLIT_LIMITS_FIRST if limits_first else SPLIT_RECORDS_FIRST
    return bytes([mode | SEPARATE | how]) + struct.pack("<H", split) + first + second


def split_tail(data):
    """(records, limits list) of a well-formed tail file."""
    if not data:
        return b"", []
    end = struct.unpack("<Q", data[-8:])[0]
    lims = [struct.unpack("<Q", data[i:i + 8])[0] for i in range(end, len(data), 8)]
    return data[:end], lims


# ---- zstd frames made by hand (RFC 8878) -----------------------------------

MAGIC = b"\x28\xb5\x2f\xfd"


def block(kind, payload, size, last):
    """Block header (3 bytes LE: last | type << 1 | size << 3) + payload."""
    header = (1 if last else 0) | kind << 1 | size << 3
    return struct.pack("<I", header)[:3] + payload


def raw_frame_sized(content):
    """Single-segment frame with a 1- or 2-byte content size, one raw block."""
    if len(content) < 256:
        fhd, fcs = 0x20, bytes([len(content)])
    else:
        fhd, fcs = 0x60, struct.pack("<H", len(content) - 256)
    return MAGIC + bytes([fhd]) + fcs + block(0, content, len(content), True)


def raw_frame_unsized(content, window_log=10):
    """Frame without a content size (window descriptor only), raw block."""
    wd = (window_log - 10) << 3
    return MAGIC + bytes([0x00, wd]) + block(0, content, len(content), True)


def frame_claiming(size, content=b"hello"):
    """Single-segment frame with an 8-byte content size that lies."""
    return (MAGIC + bytes([0xE0]) + struct.pack("<Q", size) +
            block(0, content, len(content), True))


def rle_bomb(blocks, window_log=23):
    """Unsized frame of `blocks` RLE blocks of 128 KiB each ('A')."""
    body = b"".join(block(1, b"A", 128 * 1024, i == blocks - 1)
                    for i in range(blocks))
    return MAGIC + bytes([0x00, (window_log - 10) << 3]) + body


EMPTY_FRAME = bytes.fromhex("28b52ffd2000010000")
SKIPPABLE = struct.pack("<II", 0x184D2A50, 4) + b"skip"


def seeds(vectors):
    out = {}

    def golden(name):
        with open(os.path.join(vectors, name), "rb") as f:
            return f.read()

    def add(name, data):
        assert len(data) <= MAX_SEED, (name, len(data))
        assert name not in out, name
        out[name] = data

    def add_both(name, data):
        """Default reader options, and IN_MEMORY + DROP_AFTER_READ + 2 threads."""
        add(name, data)
        add(name + "+variant", bytes([data[0] | VARIANT]) + data[1:])

    # Golden tail files.
    for name, mode in [("abc_tail.bag", 0), ("abc_tail.bagz", ZSTD),
                       ("mixed.bagz", ZSTD), ("mixed_level1.bagz", ZSTD | LEVEL1),
                       ("dict_raw.bagz", ZSTD), ("all_empty.bag", 0),
                       ("all_empty.bagz", ZSTD), ("empty.bag", 0),
                       ("empty.bagz", ZSTD),
                       ("shard-00000-of-00004.bag", 0),
                       ("shard-00001-of-00004.bag", 0),
                       ("shard-00003-of-00004.bag", 0),
                       ("inter-00000-of-00003.bag", 0),
                       ("inter-00002-of-00003.bag", 0),
                       ("corrupt/too_short.bag", 0),
                       ("corrupt/tail_past_eof.bag", 0),
                       ("corrupt/tail_misaligned.bag", 0),
                       ("corrupt/non_monotonic.bag", 0),
                       ("corrupt/bad_frame.bagz", ZSTD),
                       ("corrupt/truncated_frame.bagz", ZSTD)]:
        add_both("golden-" + name.replace("/", "-"), bytes([mode]) + golden(name))

    # mixed.bag is 300 KB: keep its small records, re-packed as a tail file.
    records, lims = split_tail(golden("mixed.bag"))
    starts = [0] + lims[:-1]
    small = [records[s:e] for s, e in zip(starts, lims) if e - s <= 4096]
    add_both("golden-mixed.bag-small-records", bytes([0]) + tail(small))

    # Golden separate pairs, records first and limits first.
    for name, mode in [("abc_separate.bag", 0), ("mixed_separate.bagz", ZSTD),
                       ("sepz-00000-of-00002.bagz", ZSTD),
                       ("sepz-00001-of-00002.bagz", ZSTD),
                       ("empty_separate.bag", 0),
                       ("corrupt/separate_past_eof.bag", 0)]:
        head, base = os.path.split(name)
        rec, lim = golden(name), golden(os.path.join(head, "limits." + base))
        stem = "golden-" + name.replace("/", "-")
        add_both(stem, separate_input(mode, rec, lim))
        add(stem + "+limits-first", separate_input(mode, rec, lim, True))

    # Hand-made: tiny and malformed tails.
    add("edge-empty-input", b"")
    add("edge-mode-only-tail", bytes([0]))
    add("edge-mode-only-separate", bytes([SEPARATE]))
    add("edge-mode-only-zstd", bytes([ZSTD | VARIANT]))
    for n in range(1, 8):
        add("edge-tail-%d-bytes" % n, bytes([0]) + bytes(range(1, n + 1)))
    add("edge-tail-huge-last-limit", bytes([0]) + b"\xff" * 8)
    add("edge-tail-huge-last-limit-16", bytes([0]) + b"abcdefgh" + b"\xff" * 8)
    add("edge-tail-limit-2^63", bytes([0]) + b"abc" + struct.pack("<QQ", 2**63, 3))
    add("edge-tail-non-monotonic-middle",
        bytes([0]) + b"abcdef123catcat" + struct.pack("<QQQQ", 6, 3, 2**64 - 1, 15))
    add("edge-tail-first-limit-huge",
        bytes([IN_MEMORY]) + b"abc" + struct.pack("<QQ", 2**64 - 1, 3))
    add("edge-tail-8000-empty-records", bytes([0]) + bytes(8 * 8000))

    # Hand-made: separate limits.
    add("edge-separate-empty-records-file",
        separate_input(0, b"", struct.pack("<QQ", 3, 6)))
    add("edge-separate-limits-ragged",
        separate_input(0, b"abcdef", struct.pack("<QQ", 3, 6) + b"\x01\x02\x03"))
    add("edge-separate-extra-record-bytes",
        separate_input(0, b"abcdef-extra", struct.pack("<QQ", 3, 6)))
    add("edge-separate-huge-limit",
        separate_input(IN_MEMORY, b"abc", struct.pack("<QQ", 3, 2**64 - 1)))
    add("edge-separate-non-monotonic",
        separate_input(DROP, b"abcdef", struct.pack("<QQQ", 4, 2, 6)))

    # Hand-made zstd records, each in a tail .bagz (and a few separate).
    frames = [
        ("frame-empty-content", [EMPTY_FRAME, b"", EMPTY_FRAME]),
        ("frame-raw-sized", [raw_frame_sized(b"hello"), raw_frame_sized(bytes(300))]),
        ("frame-without-content-size", [raw_frame_unsized(b"hello, unsized")]),
        ("frame-unsized-big-window", [raw_frame_unsized(b"big window", 31)]),
        ("frame-claims-2^40-bytes", [frame_claiming(2**40)]),
        ("frame-claims-2MiB", [frame_claiming(2 * 1024 * 1024)]),
        ("frame-claims-fewer-bytes", [frame_claiming(3)]),
        ("frame-two-frames", [raw_frame_sized(b"one") + raw_frame_sized(b"two")]),
        ("frame-trailing-garbage", [raw_frame_sized(b"one") + b"\x00"]),
        ("frame-truncated", [raw_frame_sized(b"truncated frame")[:-4]]),
        ("frame-header-only", [MAGIC + b"\x20\x05"]),
        ("frame-magic-only", [MAGIC]),
        ("frame-skippable", [SKIPPABLE, raw_frame_sized(b"after")]),
        ("frame-bad-checksum",
         [MAGIC + b"\x24\x05" + block(0, b"hello", 5, True) + b"\x00\x00\x00\x00"]),
        ("frame-rle-bomb-8MiB", [rle_bomb(64)]),
        ("frame-rle-512KiB", [rle_bomb(4)]),
        ("frame-not-zstd", [b"plain text, not a frame"]),
        ("frame-mixed-good-bad",
         [raw_frame_sized(b"good"), b"\x00\x01", raw_frame_unsized(b"good too")]),
    ]
    for name, recs in frames:
        add("edge-" + name, bytes([ZSTD]) + tail(recs))
    add("edge-frame-rle-bomb-8MiB+variant", bytes([ZSTD | VARIANT]) + tail([rle_bomb(64)]))
    add("edge-frame-mixed-separate",
        separate_input(ZSTD | PARALLEL, b"".join(frames[-1][1]),
                       limits(len(r) for r in frames[-1][1])))

    # Writer round trips: the input after the mode byte is a separator and
    # records (every seed also exercises this; these have many records).
    text = b"\n" + b"\n".join(b"line %d of a small text" % i for i in range(200))
    add("writer-lines-tail-none", bytes([0]) + text)
    add("writer-lines-separate-zstd-level1", bytes([SEPARATE | ZSTD | LEVEL1]) + text)
    add("writer-empty-records", bytes([ZSTD]) + b"\x00" + b"\x00" * 50)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", default=os.path.join(top, "tests", "data", "bagz"),
                    help="directory of the Bagz golden vectors")
    ap.add_argument("--out", default=os.path.join(here, "corpus", "bag_reader"))
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.vectors, "abc_tail.bag")):
        sys.exit("make_corpus: no golden vectors in %s (use --vectors)" % args.vectors)
    corpus = seeds(args.vectors)
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):
        os.remove(os.path.join(args.out, old))
    for name, data in sorted(corpus.items()):
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
    print("make_corpus: %d seeds in %s" % (len(corpus), args.out))


if __name__ == "__main__":
    main()
