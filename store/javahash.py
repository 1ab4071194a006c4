"""Java ``String.hashCode`` — the hash RocketMQ puts in ConsumeQueue tag codes and IndexFile keys.

h = 0; for each UTF-16 code unit c: h = 31*h + c (mod 2**32), read as a signed 32-bit int.
``string_hash`` does one string; ``string_hashes`` does many in a few numpy calls (the dispatcher
hashes every index key of a batch at once).  Pure: no I/O, no state.
"""
from __future__ import annotations

import numpy as np

_MAX_LEN = 4096  # longest key hashed in one vector op; longer ones take the scalar path
_POW31 = np.array([pow(31, i, 1 << 32) for i in range(_MAX_LEN)], dtype=np.uint32)  # 31**i mod 2**32


def _units(s: str) -> np.ndarray:
    return np.frombuffer(s.encode("utf-16-be"), dtype=">u2").astype(np.uint32)


def string_hash(s: str) -> int:
    """Java ``s.hashCode()`` as a signed 32-bit int."""
    h = 0
    for c in np.frombuffer(s.encode("utf-16-be"), dtype=">u2").tolist():
        h = (31 * h + c) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def string_hashes(strings: list[str]) -> np.ndarray:
    """``string_hash`` of every string, as an int32 array, vectorized over the whole list."""
    out = np.zeros(len(strings), dtype=np.int32)
    if not strings:
        return out
    encoded = [s.encode("utf-16-be") for s in strings]
    lengths = np.fromiter((len(b) // 2 for b in encoded), dtype=np.int64, count=len(encoded))
    short = lengths <= _MAX_LEN
    if not short.all():
        for i in np.flatnonzero(~short):
            out[i] = string_hash(strings[i])
    idx = np.flatnonzero(short & (lengths > 0))
    if idx.size == 0:
        return out
    units = np.frombuffer(b"".join(encoded[i] for i in idx), dtype=">u2").astype(np.uint32)
    lens = lengths[idx]
    starts = np.zeros(idx.size, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    # weight of unit j in its string of length L is 31**(L-1-j)
    seg_end = np.repeat(starts + lens, lens)
    exponent = seg_end - 1 - np.arange(units.size)
    terms = units * _POW31[exponent]  # uint32 arithmetic wraps mod 2**32, like Java int
    sums = np.add.reduceat(terms, starts, dtype=np.uint32)
    out[idx] = sums.view(np.int32)
    return out


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(hashCode)``, and 0 where abs overflows (Integer.MIN_VALUE)."""
    h = abs(string_hash(key))
    return 0 if h > 0x7FFFFFFF else h


def _index_abs(hashes: np.ndarray) -> np.ndarray:
    """``abs`` of each hash, with Integer.MIN_VALUE (whose abs overflows) mapped to 0."""
    h = np.abs(hashes.astype(np.int64))
    h[h > 0x7FFFFFFF] = 0
    return h.astype(np.int32)


def index_key_hashes(keys: list[str]) -> np.ndarray:
    return _index_abs(string_hashes(keys))


def index_key_hashes_bytes(keys: list[bytes]) -> np.ndarray:
    """``index_key_hashes`` for UTF-8 keys: ASCII keys (UTF-16 code units = bytes) are hashed
    straight from one concatenated buffer; the rare others go through ``str``."""
    out = np.zeros(len(keys), dtype=np.int32)
    if not keys:
        return out
    lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    buf = np.frombuffer(b"".join(keys), dtype=np.uint8)
    starts = np.zeros(len(keys), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    ok = (lens > 0) & (lens <= _MAX_LEN)
    if buf.size and (buf >= 0x80).any():
        hi = np.add.reduceat((buf >= 0x80).astype(np.int64), np.minimum(starts, buf.size - 1)) > 0
        hi &= lens > 0
        ok &= ~hi
    else:
        hi = np.zeros(len(keys), bool)
    if ok.any():
        seg_end = np.repeat(starts + lens, lens)
        terms = buf.astype(np.uint32) * _POW31[np.minimum(seg_end - 1 - np.arange(buf.size), _MAX_LEN - 1)]
        sums = np.add.reduceat(terms, np.minimum(starts, max(buf.size - 1, 0)), dtype=np.uint32).view(np.int32)
        out[ok] = sums[ok]
    slow = np.flatnonzero(hi | (lens > _MAX_LEN))
    if slow.size:
        out[slow] = string_hashes([keys[i].decode() for i in slow])
    return _index_abs(out)
