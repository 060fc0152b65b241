"""The reader's inflater (zlib-ng where it is installed) against the standard library's zlib, the oracle: the same
blocks from a real trace, a gzip file of several members, files cut at many points and corrupt files, with the same
cut-stream signal and the same error messages."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

from tracekit.read import text
from tracekit.read.text import NotStreamable, StreamCut, decompressed_blocks

OWLV2 = Path(__file__).parents[2] / "bench" / "recorded" / "owlv2.json.gz"  # a real trace, kept in the repository
BLOCK_BYTES = 1 << 20  # the reader's chunk size


def read_all(path: Path, block_bytes: int = BLOCK_BYTES) -> tuple[bytes, str]:
    """Every block of PATH joined, and how the stream ended: "end", "cut" or "corrupt: MESSAGE"."""
    blocks = []
    try:
        for block in decompressed_blocks(path, block_bytes):
            blocks.append(block)
    except StreamCut:
        return b"".join(blocks), "cut"
    except NotStreamable as exc:
        return b"".join(blocks), f"corrupt: {exc}"
    return b"".join(blocks), "end"


def by_both(path: Path, monkeypatch, block_bytes: int = BLOCK_BYTES) -> tuple[tuple, tuple]:
    """read_all with the reader's inflater, then with the standard library's."""
    ours = read_all(path, block_bytes)
    with monkeypatch.context() as patched:
        patched.setattr(text, "inflating", zlib)
        oracle = read_all(path, block_bytes)
    return ours, oracle


def test_zlib_ng_is_used_where_installed():
    zlib_ng = pytest.importorskip("zlib_ng.zlib_ng")
    assert text.inflating is zlib_ng


def test_a_real_trace_inflates_to_the_same_bytes(monkeypatch):
    ours, oracle = by_both(OWLV2, monkeypatch)
    assert ours == oracle
    assert ours == (gzip.decompress(OWLV2.read_bytes()), "end")


def test_several_members_and_zero_padding(tmp_path, monkeypatch):
    data = gzip.decompress(OWLV2.read_bytes())[:3_000_000]
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(data[:1_000_000]) + gzip.compress(data[1_000_000:]) + bytes(4096))
    ours, oracle = by_both(path, monkeypatch, 64 << 10)
    assert ours == oracle == (data, "end")


@pytest.mark.parametrize("fraction", [0.0001, 0.013, 0.25, 0.5, 0.77, 0.999])
def test_cut_files_keep_the_same_text(tmp_path, monkeypatch, fraction):
    """A cut stream gives what zlib gives before the cut, to the byte: which entries are complete depends on it."""
    compressed = OWLV2.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(compressed[:int(len(compressed) * fraction)])
    ours, oracle = by_both(path, monkeypatch)
    assert ours == oracle
    assert ours[1] == "cut" and gzip.decompress(compressed).startswith(ours[0])


@pytest.mark.parametrize("damage", ["checksum", "stored_bits", "after_the_last_member"])
def test_corrupt_files_fail_alike(tmp_path, monkeypatch, damage):
    compressed = bytearray(gzip.compress(gzip.decompress(OWLV2.read_bytes())[:2_000_000]))
    if damage == "checksum":
        compressed[-8] ^= 0xFF
    elif damage == "stored_bits":
        compressed[len(compressed) // 2:len(compressed) // 2 + 64] = bytes(range(64))
    else:
        compressed += b"not gzip"
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(bytes(compressed))
    ours, oracle = by_both(path, monkeypatch)
    assert ours == oracle
    assert ours[1].startswith("corrupt: corrupt gzip data")


@pytest.mark.parametrize("at", [0.02, 0.1, 0.3, 0.55, 0.8, 0.97, 0.9995])
def test_a_damaged_byte_ends_the_stream_alike(tmp_path, monkeypatch, at):
    """A byte flipped anywhere in the stream: the same blocks and the same end with either inflater, and never an
    error of the inflater itself (the reader's callers catch only its own NotStreamable and StreamCut)."""
    compressed = bytearray(gzip.compress(gzip.decompress(OWLV2.read_bytes())[:1_000_000]))
    compressed[int(len(compressed) * at)] ^= 0x5A
    path = tmp_path / "damaged.json.gz"
    path.write_bytes(bytes(compressed))
    ours, oracle = by_both(path, monkeypatch, 64 << 10)
    assert ours == oracle
    assert ours[1] != "end"
