"""IndexFile: hash index from message keys to CommitLog offsets (FACTS §5.3).

    header (40 bytes)                          slot table at 40: max_slots x i32
    off size field                               slot = newest entry number in the bucket (0 = empty)
    0   8    beginTimestamp                    entries at 40 + max_slots*4: max_entries x 20 bytes
    8   8    endTimestamp                        off size field
    16  8    beginPhyOffset                      0   4    keyHash   abs(String.hashCode("topic#key"))
    24  8    endPhyOffset                        4   8    commitLogOffset
    32  4    hashSlotCount (slots in use)        12  4    timeDiff  (storeTs - beginTimestamp) / 1000 s
    36  4    indexCount (starts at 1)            16  4    prevIndex (older entry in same slot, 0 = end)

File name = creation time ``yyyyMMddHHmmssSSS`` (local time).  Entry 0 is unused.
Who writes: the dispatcher (``put_batch``, vectorized over a whole batch of keys; ``put_few``
for a small one).
Who reads: readers answering QUERY_MESSAGE (``offsets_of``), recovery, Spark.
"""
from __future__ import annotations

import itertools
import os
import struct
import time
from collections.abc import Iterator

import numpy as np

from rocketbox.native import compiled
from rocketbox.store.errors import CorruptData
from rocketbox.store.javahash import index_key_hash
from rocketbox.store.mappedfile import RESERVE_CHUNK, MappedFile

HEADER = np.dtype([("begin_ts", ">i8"), ("end_ts", ">i8"), ("begin_phys", ">i8"),
                   ("end_phys", ">i8"), ("slot_count", ">i4"), ("index_count", ">i4")])
HEADER_SIZE = 40
assert HEADER.itemsize == HEADER_SIZE
ENTRY = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])
assert ENTRY.itemsize == 20
# the same layouts for put_few's one-key-at-a-time writes
HEADER_S, SLOT_S, ENTRY_S = struct.Struct(">qqqqii"), struct.Struct(">i"), struct.Struct(">iqii")
assert HEADER_S.size == HEADER.itemsize and ENTRY_S.size == ENTRY.itemsize
INT_MAX = 0x7FFFFFFF
END_OF_TIME = (1 << 63) - 1      # Java's Long.MAX_VALUE: a query's open end


def file_size(max_slots: int, max_entries: int) -> int:
    return HEADER_SIZE + max_slots * 4 + max_entries * ENTRY.itemsize


def name_for(ts_ms: int) -> str:
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ts_ms / 1000)) + f"{ts_ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: str, max_slots: int, max_entries: int, writable: bool):
        self.path, self.max_slots, self.max_entries = path, max_slots, max_entries
        self.mf = MappedFile(path, 0, file_size(max_slots, max_entries), writable, readahead=False)   # slots at random

    def open(self, create: bool = False) -> "IndexFile":
        self.mf.open(create=create)
        v = self.mf.view
        self.header = v[:HEADER_SIZE].view(HEADER)[0:1]          # 1-element structured view
        self.slots = v[HEADER_SIZE:HEADER_SIZE + self.max_slots * 4].view(">i4")
        self.entries = v[HEADER_SIZE + self.max_slots * 4:].view(ENTRY)
        if self.mf.writable:
            self.mf.reserve_chunk(0)                             # the header's piece
        if create and int(self.header["index_count"][0]) == 0:
            self.header["index_count"] = 1
        return self

    def h(self, field: str) -> int:
        return int(self.header[field][0])

    @property
    def is_full(self) -> bool:
        return self.h("index_count") >= self.max_entries

    def put_batch(self, hashes: np.ndarray, phys: np.ndarray, store_ts: np.ndarray) -> int:
        """Add keys in order; stops when the file is full.  Returns how many were added.
        Keys of a record older than ``end_phys`` are the caller's to skip (re-dispatch)."""
        n0 = self.h("index_count")
        k = int(min(len(hashes), self.max_entries - n0))
        if k <= 0:
            return 0
        hashes, phys, store_ts = hashes[:k].astype(np.int64), phys[:k].astype(np.int64), store_ts[:k].astype(np.int64)
        numbers = np.arange(n0, n0 + k, dtype=np.int64)
        slot = hashes % self.max_slots
        begin_ts = self.h("begin_ts")
        if n0 <= 1:              # the very first entry sets the begin values (its own diff is 0)
            self.header["begin_phys"], self.header["begin_ts"] = phys[0], store_ts[0]
        diffs = np.zeros(k, dtype=np.int64)
        if begin_ts > 0:
            diffs = np.clip((store_ts - begin_ts) // 1000, 0, INT_MAX)
        elif k > 1:
            diffs[1:] = np.clip((store_ts[1:] - store_ts[0]) // 1000, 0, INT_MAX)
        # chain each key to the previous key of its slot: earlier in this batch, else the slot table
        order = np.argsort(slot, kind="stable")
        s_sorted = slot[order]
        first_in_group = np.ones(k, dtype=bool)
        first_in_group[1:] = s_sorted[1:] != s_sorted[:-1]
        old = self.slots[s_sorted].astype(np.int64)
        # a slot may point into a batch that was never committed (crash before the header was
        # written): those entries were written first, so follow their prev links back
        for _ in range(self.max_entries):
            ahead = old >= n0
            if not ahead.any():
                break
            old[ahead] = np.where(old[ahead] < self.max_entries, self.entries["prev"][np.minimum(old[ahead], self.max_entries - 1)], 0)
        old[old <= 0] = 0
        prev_sorted = np.where(first_in_group, old, np.concatenate(([0], numbers[order][:-1])))
        prev = np.empty(k, dtype=np.int64)
        prev[order] = prev_sorted
        last_in_group = np.ones(k, dtype=bool)
        last_in_group[:-1] = s_sorted[1:] != s_sorted[:-1]
        entries_at = HEADER_SIZE + self.max_slots * 4
        self.mf.reserve(entries_at + n0 * ENTRY.itemsize, entries_at + (n0 + k) * ENTRY.itemsize)
        for at in np.unique((HEADER_SIZE + s_sorted[last_in_group] * 4) // RESERVE_CHUNK):
            self.mf.reserve_chunk(int(at) * RESERVE_CHUNK)
        block = self.entries[n0:n0 + k]
        block["hash"], block["phys"], block["time_diff"], block["prev"] = hashes, phys, diffs, prev
        newly_used = int(np.count_nonzero(first_in_group & (old == 0)))
        self.slots[s_sorted[last_in_group]] = numbers[order][last_in_group]
        self.header["slot_count"] = self.h("slot_count") + newly_used
        self.header["end_phys"], self.header["end_ts"] = phys[-1], store_ts[-1]
        self.header["index_count"] = n0 + k
        return k

    def put_few(self, hashes: list[int], phys: list[int], store_ts: list[int]) -> int:
        """``put_batch`` for a few keys, one at a time with ``struct`` (below a few dozen keys,
        numpy's fixed cost per call outweighs the work).  Writes the same bytes."""
        mm, entries_at = self.mf.mm, HEADER_SIZE + self.max_slots * 4
        begin_ts, _end_ts, begin_phys, _end_phys, slot_count, n0 = HEADER_S.unpack_from(mm, 0)
        k = min(len(hashes), self.max_entries - n0)
        if k <= 0:
            return 0
        base = begin_ts if begin_ts > 0 else store_ts[0]     # time diffs count from here
        if n0 <= 1:              # the very first entry sets the begin values
            begin_ts, begin_phys = store_ts[0], phys[0]
        newest: dict[int, int] = {}             # slot -> its newest entry from this call
        max_slots, max_entries = self.max_slots, self.max_entries
        self.mf.reserve(entries_at + n0 * ENTRY_S.size, entries_at + (n0 + k) * ENTRY_S.size)
        reserve_chunk = self.mf.reserve_chunk
        read_slot, write_slot, write_entry = SLOT_S.unpack_from, SLOT_S.pack_into, ENTRY_S.pack_into
        for i, (key_hash, offset, ts) in enumerate(zip(hashes[:k], phys, store_ts)):
            n, slot_at = n0 + i, HEADER_SIZE + key_hash % max_slots * 4
            prev = newest.get(slot_at)
            if prev is None:
                (prev,) = read_slot(mm, slot_at)
                if prev >= n0:                  # an uncommitted batch's entry: skip it, as put_batch
                    for _ in range(max_entries):
                        if prev < n0:
                            break
                        prev = ENTRY_S.unpack_from(mm, entries_at + prev * ENTRY_S.size)[3] if prev < max_entries else 0
                if prev <= 0:
                    prev = 0
                    slot_count += 1
            diff = (ts - base) // 1000
            write_entry(mm, entries_at + n * ENTRY_S.size, key_hash, offset, 0 if diff < 0 else min(diff, INT_MAX), prev)
            reserve_chunk(slot_at)
            write_slot(mm, slot_at, n)
            newest[slot_at] = n
        HEADER_S.pack_into(mm, 0, begin_ts, store_ts[k - 1], begin_phys, phys[k - 1], slot_count, n0 + k)
        return k

    def put_compiled(self, hashes, phys, store_ts) -> int:
        """``put_few``'s bytes from one compiled pass (``native/_native.c``), arrays or lists: the
        entries' blocks and the slots' pieces are reserved first, then the keys written."""
        n0 = self.h("index_count")
        k = min(len(hashes), self.max_entries - n0)
        if k <= 0:
            return 0
        hashes = np.ascontiguousarray(hashes[:k], dtype=np.int64)
        entries_at = HEADER_SIZE + self.max_slots * 4
        self.mf.reserve(entries_at + n0 * ENTRY.itemsize, entries_at + (n0 + k) * ENTRY.itemsize)
        for piece in np.unique((HEADER_SIZE + hashes % self.max_slots * 4) // RESERVE_CHUNK).tolist():
            self.mf.reserve_chunk(piece * RESERVE_CHUNK)
        assert compiled is not None
        return compiled.index_put(self.mf.mm, hashes, np.ascontiguousarray(phys[:k], dtype=np.int64),
                                  np.ascontiguousarray(store_ts[:k], dtype=np.int64), self.max_slots, self.max_entries)

    def truncate(self, phys: int) -> int:
        """Drop the entries of records at or past ``phys`` (recovery: they are re-added by
        re-dispatch), so only what may be lost is rebuilt, not the whole file.  Entries are in
        CommitLog order; slots pointing at a dropped entry go back along its chain to the newest
        kept one (a dropped entry's ``prev`` was written before any slot pointed at it).
        -> entries kept (the new ``index_count``)."""
        count = self.h("index_count")
        keep = 1 + int(np.searchsorted(self.entries["phys"][1:count].astype(np.int64), phys, side="left"))
        if keep >= count:
            return count
        heads = self.slots.astype(np.int64)
        ahead = np.flatnonzero(heads >= keep)
        for _ in range(self.max_entries):
            if not ahead.size:
                break
            n = heads[ahead]
            heads[ahead] = np.where(n < self.max_entries, self.entries["prev"][np.minimum(n, self.max_entries - 1)], 0)
            ahead = ahead[heads[ahead] >= keep]
        heads[heads < 0] = 0
        moved = np.flatnonzero(heads != self.slots)      # only these: the rest may be holes
        self.slots[moved] = heads[moved]
        last = self.entries[keep - 1] if keep > 1 else None
        self.header["slot_count"] = int(np.count_nonzero(heads))
        self.header["end_phys"] = int(last["phys"]) if last is not None else self.h("begin_phys")
        self.header["end_ts"] = self.h("begin_ts") + int(last["time_diff"]) * 1000 if last is not None else self.h("begin_ts")
        self.header["index_count"] = keep
        return keep

    def lookup(self, key_hash: int, begin_ts: int, end_ts: int, max_count: int) -> list[int]:
        """CommitLog offsets of entries with this hash stored within [begin_ts, end_ts], newest first."""
        return list(itertools.islice(self.matches(key_hash, begin_ts, end_ts), max_count))

    def matches(self, key_hash: int, begin_ts: int, end_ts: int) -> Iterator[int]:
        """``lookup``'s offsets one by one, as the bucket's chain is walked (newest first; an
        entry's time has second precision, as 4.9.8's ``timeDiff``)."""
        count = self.h("index_count")
        base = self.h("begin_ts")
        n = int(self.slots[key_hash % self.max_slots])
        for _ in range(self.max_entries):        # skip entries of an uncommitted batch (see put_batch)
            if not count <= n < self.max_entries:
                break
            n = int(self.entries[n]["prev"])
        seen = 0
        while 0 < n < count and seen < count:
            e = self.entries[n]
            t = base + int(e["time_diff"]) * 1000
            if t < begin_ts:
                break
            if int(e["hash"]) == key_hash and t <= end_ts:
                yield int(e["phys"])
            nxt = int(e["prev"])
            if nxt == n:
                raise CorruptData(self.path, HEADER_SIZE + self.max_slots * SLOT_S.size + n * ENTRY_S.size, "index entry points to itself")
            n, seen = nxt, seen + 1

    def flush(self) -> None:
        self.mf.flush()

    def close(self) -> None:
        self.header = self.slots = self.entries = None  # type: ignore[assignment]
        self.mf.close()


# how the dispatcher adds keys: a pass's many (arrays) and a few (lists); the compiled pass for
# both when it is built, else the numpy and the struct twins (the three write the same bytes)
PUT_MANY = IndexFile.put_compiled if compiled is not None else IndexFile.put_batch
PUT_FEW = IndexFile.put_compiled if compiled is not None else IndexFile.put_few


def list_index_files(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if len(n) == 17 and n.isdigit())


def trim(directory: str, cutoff: int, max_slots: int, max_entries: int) -> int:
    """Drop the index entries of records at or past CommitLog offset ``cutoff`` (recovery: past the
    cut, or, after a crash, from where its scan starts; a running slave whose master lost its
    tail).  A file is truncated there (``IndexFile.truncate``), not deleted, so re-dispatch
    rebuilds only those entries; a file wholly past it goes.  -> the offset re-dispatch must start
    from to add them back (a large number when nothing was dropped)."""
    rebuild_from = 2**63 - 1
    for path in list_index_files(directory):
        ix = IndexFile(path, max_slots, max_entries, True).open()
        try:
            used, begin, last = ix.h("index_count") > 1, ix.h("begin_phys"), ix.h("end_phys")
            if used and cutoff <= last and begin < cutoff:
                ix.truncate(cutoff)
                ix.flush()
                rebuild_from = min(rebuild_from, cutoff)
        finally:
            ix.close()
        if used and begin >= cutoff:
            os.unlink(path)
            rebuild_from = min(rebuild_from, begin)
    return rebuild_from


def find(directory: str, key: str, max_slots: int, max_entries: int, max_count: int = 32) -> list[int]:
    """CommitLog offsets of the records indexed under ``key`` (``topic#key``), in every IndexFile
    of ``directory``, newest first (a hash match, not yet the key)."""
    return list(itertools.islice(offsets_of(directory, key, max_slots, max_entries), max_count))


def offsets_of(directory: str, key: str, max_slots: int, max_entries: int, begin_ts: int = 0,
               end_ts: int = END_OF_TIME) -> Iterator[int]:
    """CommitLog offsets of the records indexed under ``key`` (``topic#key``) and stored within
    [begin_ts, end_ts], newest first: the IndexFiles whose time span meets the range, newest
    first, down to the first that began before ``begin_ts`` (store:index/IndexService#queryOffset).
    A hash match: the caller compares the keys. Each file is open only while it is walked."""
    h = index_key_hash(key)
    for path in reversed(list_index_files(directory)):
        try:
            ix = IndexFile(path, max_slots, max_entries, False).open()
        except (OSError, ValueError):
            continue                       # deleted by retention meanwhile, or still being made
        try:
            first, last = ix.h("begin_ts"), ix.h("end_ts")
            if first <= end_ts and begin_ts <= last:
                yield from ix.matches(h, begin_ts, end_ts)
        finally:
            ix.close()
        if first < begin_ts:
            return


def last_update(directory: str, max_slots: int, max_entries: int) -> tuple[int, int]:
    """(end timestamp, end CommitLog offset) of the newest IndexFile, (0, 0) with none: what
    QUERY_MESSAGE's answer carries (indexLastUpdateTimestamp, indexLastUpdatePhyoffset)."""
    for path in reversed(list_index_files(directory)):
        try:
            ix = IndexFile(path, max_slots, max_entries, False).open()
        except (OSError, ValueError):
            continue
        try:
            return ix.h("end_ts"), ix.h("end_phys")
        finally:
            ix.close()
    return 0, 0
