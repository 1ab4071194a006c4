"""Java ``String.hashCode`` — the hash RocketMQ puts in ConsumeQueue tag codes and IndexFile keys.

h = 0; for each UTF-16 code unit c: h = 31*h + c (mod 2**32), read as a signed 32-bit int.
``string_hash`` does one string in plain Python (a client's tag codes, a reader's filter);
``store.javahashes`` does many at once with numpy (the dispatcher's vector path).
Pure: no I/O, no state.
"""
from __future__ import annotations

import operator
import sys

assert sys.byteorder == "little"          # string_hash reads UTF-16-LE as native u16


_CHUNK = 256                               # string_hash sums up to this many units per step
_POW = [pow(31, _CHUNK - 1 - i, 1 << 32) for i in range(_CHUNK)]   # 31**(CHUNK-1) .. 31**0, mod 2**32
_POW_N = [pow(31, m, 1 << 32) for m in range(_CHUNK + 1)]            # 31**m mod 2**32


def string_hash(s: str, seed: int = 0) -> int:
    """Java ``s.hashCode()`` as a signed 32-bit int; ``seed``: the hash of a prefix to continue.
    The loop ``h = 31*h + c`` unrolled: h = seed*31**n + sum(c_i * 31**(n-1-i)), each term with a
    power taken mod 2**32 from a table, summed in C by ``map`` (no Python-level loop per unit)."""
    units = memoryview(s.encode("utf-16-le")).cast("H")
    n = len(units)
    h = seed & 0xFFFFFFFF
    for k in range(0, n, _CHUNK):
        part = units[k:k + _CHUNK]
        m = len(part)
        h = (h * _POW_N[m] + sum(map(operator.mul, part, _POW[_CHUNK - m:]))) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(hashCode)``, and 0 where abs overflows (Integer.MIN_VALUE)."""
    return index_abs_one(string_hash(key))


def index_abs_one(h: int) -> int:
    """``index_abs`` of one hash."""
    return 0 if h == -0x80000000 else abs(h)
