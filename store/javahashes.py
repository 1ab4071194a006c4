"""Java ``String.hashCode`` of many strings at once: ``BufferHashes`` does many UTF-8 segments of
one buffer in a few numpy calls, optionally continuing from a prefix's hash (the dispatcher's
vector path hashes every tag and every ``topic#key`` of a pass at once, without building the
keys). ``segment_hashes`` is the same, compiled (``native/_native.c``) when it is built, with
``BufferHashes`` as its twin. ``store.javahash`` is the same hash of one string, and the reference
these are tested against. Pure: no I/O, no state.
"""
from __future__ import annotations

import numpy as np

from rocketbox.native import compiled
from rocketbox.store.javahash import string_hash

FEW_HASHES = 8          # string_hashes does up to this many one by one (numpy's fixed cost is more)


def string_hashes(strings: list[str], seeds: list[int] | None = None) -> list[int]:
    """``string_hash`` of every string (continuing from ``seeds[i]`` when given): one by one for
    a few, else vectorized over the whole list."""
    if len(strings) <= FEW_HASHES:
        return [string_hash(s, h) for s, h in zip(strings, seeds or [0] * len(strings))]
    return bytes_hashes([s.encode() for s in strings], seeds).tolist()


def bytes_hashes(items: list[bytes], seeds: list[int] | None = None) -> np.ndarray:
    """``string_hash`` of every UTF-8 string as int32, without decoding the ASCII ones."""
    lens = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    starts = np.zeros(len(items), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return BufferHashes(np.frombuffer(b"".join(items), dtype=np.uint8))(starts, lens, seeds)


def index_abs(hashes: np.ndarray) -> np.ndarray:
    """``abs`` of each hash, with Integer.MIN_VALUE (whose abs overflows) mapped to 0."""
    h = np.abs(hashes.astype(np.int64))
    h[h > 0x7FFFFFFF] = 0
    return h.astype(np.int32)


def index_key_hashes(keys: list[str]) -> np.ndarray:
    return index_abs(bytes_hashes([k.encode() for k in keys]))


_INV31 = pow(31, -1, 1 << 32)   # 31 is odd, so it has an inverse mod 2**32
_TABLES: dict[int, np.ndarray] = {}


def _powers(base: int, n: int) -> np.ndarray:
    """base**i mod 2**32 for i < n (at least), from a table grown on demand and kept."""
    t = _TABLES.get(base)
    if t is None or t.size < n:
        size = max(n, 2 * t.size if t is not None else 1 << 16)
        t = _TABLES[base] = np.cumprod(np.concatenate(([1], np.full(size - 1, base))).astype(np.uint32), dtype=np.uint32)
    return t


class BufferHashes:
    """Java hash of any UTF-8 segments of one buffer, after one pass over the whole buffer.

    With P[k] = sum of buf[p] * 31**-p for p < k (mod 2**32), a segment [s, e) hashes to
    (P[e] - P[s]) * 31**(e-1): a few vector operations per batch of segments, whatever their
    lengths.  Segments holding non-ASCII bytes (whose UTF-16 units are not their bytes) are
    decoded and folded one by one."""

    def __init__(self, buf: np.ndarray):
        n = buf.size
        self.buf, self.pow = buf, _powers(31, n + 1)
        self.prefix = np.zeros(n + 1, dtype=np.uint32)
        np.cumsum(buf.astype(np.uint32) * _powers(_INV31, n)[:n], dtype=np.uint32, out=self.prefix[1:])
        self.high = None
        if n and (buf >= 0x80).any():
            self.high = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(buf >= 0x80, out=self.high[1:])

    def __call__(self, starts: np.ndarray, lens: np.ndarray, seed=None) -> np.ndarray:
        """Hash of each ``buf[starts[i]:starts[i] + lens[i]]``, continuing from ``seed[i]`` (the
        hash of a prefix: Java's hash folds left, so hash(p + s) continues hash(p))."""
        ends = starts + lens
        h = (self.prefix[ends] - self.prefix[starts]) * self.pow[np.maximum(ends - 1, 0)]
        if seed is not None:
            h += np.asarray(seed, dtype=np.int32).view(np.uint32) * self.pow[lens]
        out = h.view(np.int32)
        if self.high is not None:
            for i in np.flatnonzero(self.high[ends] != self.high[starts]).tolist():
                out[i] = _decoded_hash(self.buf, int(starts[i]), int(ends[i]), 0 if seed is None else int(seed[i]))
        return out


def index_key_hashes_bytes(keys: list[bytes]) -> np.ndarray:
    """``index_key_hashes`` of UTF-8 keys."""
    return index_abs(bytes_hashes(keys))


def _decoded_hash(buf: np.ndarray, start: int, end: int, seed: int) -> int:
    """The hash of a segment holding non-ASCII UTF-8: decoded (invalid bytes replaced by U+FFFD),
    then hashed by its UTF-16 units."""
    return string_hash(bytes(buf[start:end]).decode("utf-8", "replace"), seed)


def py_segment_hashes(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, seeds=None) -> np.ndarray:
    """``segment_hashes`` through ``BufferHashes``."""
    return BufferHashes(buf)(starts, lens, seeds)


def _compiled_segment_hashes(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, seeds=None) -> np.ndarray:
    starts, lens = np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(lens, dtype=np.int64)
    seeds = np.zeros(len(starts), dtype=np.int64) if seeds is None else np.ascontiguousarray(seeds, dtype=np.int64)
    out = np.empty(len(starts), dtype=np.int32)
    assert compiled is not None
    for i in compiled.hashes(buf, starts, lens, seeds, out):       # non-ASCII: decoded, as BufferHashes does
        out[i] = _decoded_hash(buf, int(starts[i]), int(starts[i] + lens[i]), int(seeds[i]))
    return out


segment_hashes = _compiled_segment_hashes if compiled is not None else py_segment_hashes
segment_hashes.__doc__ = """Java ``String.hashCode`` (int32) of each UTF-8 segment ``buf[starts[i]:starts[i] + lens[i]]``,
continuing from ``seeds[i]`` (the hash of a prefix) when given."""
