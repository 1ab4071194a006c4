"""Single-producer single-consumer byte ring in shared memory.

    ring header (128 bytes)                      entry (8-byte aligned)
    off  size  field       written by            off size field
    0    8     write_pos   producer only          0   4    length (header + payload, unpadded)
    64   8     read_pos    consumer only          4   4    kind   (WRAP = skip to the ring start)
    128  cap   data                               8   ..   payload

Positions are monotonically increasing byte counts; ``pos % cap`` is the place in ``data``.  An
entry never wraps: when it does not fit before the end, the producer writes a WRAP entry over the
tail and starts at 0.  The producer copies the payload in, then publishes ``write_pos`` (one
aligned 8-byte store); the consumer reads ``write_pos``, then the payload, and publishes
``read_pos`` only when it is done with everything before it.  (x86-64 store/load ordering; an
ARM port needs fences here.)
"""
from __future__ import annotations

import struct

import numpy as np

HEADER_SIZE = 128
ENTRY_HEADER = struct.Struct("<II")       # length (header + payload, unpadded), kind
WRAP = 0xFFFFFFFF


class RingCorrupt(Exception):
    """An entry header that cannot be right (a producer wrote outside the protocol)."""


def align8(n: int) -> int:
    return (n + 7) & ~7


def ring_size(capacity: int) -> int:
    return HEADER_SIZE + capacity


class Ring:
    def __init__(self, buf: np.ndarray):
        """``buf``: uint8 view of this ring's region (header + data) inside a segment."""
        assert np.little_endian                  # the positions are "<u8", read as native "Q"
        self.pos = buf[:16 * 8].data.cast("Q")   # [0] write_pos, [8] read_pos; cheaper than numpy scalars
        self.data = buf[HEADER_SIZE:]
        self.mv = self.data.data                 # copies and headers through it skip numpy's per-call cost
        self.capacity = len(self.data)
        assert self.capacity % 8 == 0
        self.max_entry = self.capacity // 2

    @property
    def write_pos(self) -> int:
        return self.pos[0]

    @property
    def read_pos(self) -> int:
        return self.pos[8]

    def used(self) -> int:
        return self.write_pos - self.read_pos

    # ------------------------------------------------------------ producer side
    def try_push(self, kind: int, parts) -> bool:
        """Append one entry made of ``parts`` (bytes-likes or numpy arrays); False if no room now."""
        parts = [memoryview(p).cast("B") for p in parts]
        length = 8 + sum(p.nbytes for p in parts)
        padded = align8(length)
        if padded > self.max_entry:
            raise ValueError(f"ring entry of {length} bytes exceeds the ring's limit of {self.max_entry}")
        w, r = self.write_pos, self.read_pos
        at = w % self.capacity
        tail = self.capacity - at
        need = padded if padded <= tail else tail + padded
        if need > self.capacity - (w - r):
            return False
        if padded > tail:
            ENTRY_HEADER.pack_into(self.mv, at, tail, WRAP)
            w += tail
            at = 0
        ENTRY_HEADER.pack_into(self.mv, at, length, kind)
        i = at + 8
        for p in parts:
            n = p.nbytes
            self.mv[i:i + n] = p
            i += n
        self.pos[0] = w + padded
        return True

    # ------------------------------------------------------------ consumer side
    def entries(self, limit_bytes: int | None = None):
        """Entries published so far, as (kind, payload uint8 view, position after the entry).
        Stops early once ``limit_bytes`` of payload has been returned."""
        out = []
        w, r = self.write_pos, self.read_pos
        taken = 0
        while r < w:
            at = r % self.capacity
            length, kind = ENTRY_HEADER.unpack_from(self.mv, at)
            if kind != WRAP and (length < 8 or at + length > self.capacity):
                raise RingCorrupt(f"entry at {r} claims {length} bytes")
            if kind == WRAP:
                r += self.capacity - at
                continue
            r += align8(length)
            out.append((kind, self.data[at + 8:at + length], r))
            taken += length
            if limit_bytes is not None and taken >= limit_bytes:
                break
        return out

    def release(self, upto: int) -> None:
        """Consumer: everything before position ``upto`` is done with."""
        self.pos[8] = upto

    def skip_all(self) -> None:
        """Consumer: drop everything published (a new owner discarding a dead owner's leftovers)."""
        self.pos[8] = self.pos[0]
