"""ConsumeQueue: one queue's index into the CommitLog (FACTS §5.2).

    entry (20 bytes, big-endian)         file: 300,000 entries = 6,000,000 bytes,
    off size field                       named by the 20-digit start *byte* offset
    0   8    commitLogOffset  i64        (entry index x 20)
    8   4    size             i32
    12  8    tagsCode         i64

Logical (queue) offset = byte position / 20.  An entry is valid when offset >= 0 and size > 0;
recovery stops at the first invalid one.  Writes are idempotent: entries at or below the queue's
``max_phys`` (end of the last entry already written) are skipped, so re-dispatch is safe.

Who writes: the dispatcher only.  Readers and Spark open read-only and never read past the
queue's max offset published in shared memory.

Open files: every file of every queue counts against ``OPEN_FILES``, the process's budget; a file
past it is released (unmapped, its descriptor closed) and mapped again when next used, so the
code here takes a file through ``MappedFileQueue.file_for`` (or ``MappedFile.use``) and uses it
before it touches another.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from rocketbox.store.errors import CorruptData, FileGap, FileSizeMismatch
from rocketbox.store.mappedfile import MappedFileQueue, OpenFiles

ENTRY = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
ENTRY_SIZE = 20
assert ENTRY.itemsize == ENTRY_SIZE
BLANK_ENTRY = (0, 0x7FFFFFFF, 0)   # fills the front of a queue whose first file starts late
FIRST_READ = 4096 // ENTRY_SIZE * ENTRY_SIZE   # ``valid_prefix``'s first read of a file: 204 entries, a page
FEW_ENTRIES = 8                    # a run of at most this many entries is written with struct
# ENTRY's layout again, for those struct writes: phys and tags (size left 0), then the size
_FIELDS = ENTRY.fields
assert _FIELDS is not None
_PHYS_TAGS, _SIZE, _SIZE_AT = struct.Struct(">q4xq"), struct.Struct(">i"), _FIELDS["size"][1]
assert _PHYS_TAGS.size == ENTRY_SIZE and [_FIELDS[f][1] for f in ("phys", "size", "tags")] == [0, _SIZE_AT, 12]


# every consume-queue file this process opens counts against one budget of open files and mappings:
# a store may hold 100,000 queues, a process a few thousand descriptors (store/mappedfile.OpenFiles)
OPEN_FILES = OpenFiles()


def queue_dir(root: str, topic: str, queue_id: int) -> str:
    return os.path.join(root, "consumequeue", topic, str(queue_id))


def file_size_for(configured: int) -> int:
    """Configured ``mapedFileSizeConsumeQueue`` rounded up to a whole number of entries."""
    return -(-configured // ENTRY_SIZE) * ENTRY_SIZE


def valid_prefix(path: str, size: int) -> tuple[int, tuple | None]:
    """How many entries from the start of the consume-queue file at ``path`` (``size`` bytes) are
    valid, and the last of them; read with ``pread`` in chunks that double, not through a mapping,
    up to the first invalid entry.  A file is written from its start in order, so a queue's file
    holding a few entries costs one small read, not a scan of 6 MB (recovery reads every queue's)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        at, chunk, last = 0, FIRST_READ, None
        while at < size:
            data = os.pread(fd, min(chunk, size - at), at)
            e = np.frombuffer(data, ENTRY, len(data) // ENTRY_SIZE)
            bad = np.flatnonzero((e["phys"] < 0) | (e["size"] <= 0))
            n = int(bad[0]) if bad.size else len(e)
            if n:
                last = e[n - 1].item()
            if n < len(e) or not len(e):
                return at // ENTRY_SIZE + n, last
            at, chunk = at + n * ENTRY_SIZE, chunk * 2
        return at // ENTRY_SIZE, last
    finally:
        os.close(fd)


def read_entries(path: str, first: int, end: int) -> np.ndarray:
    """Entries [first, end) of the consume-queue file at ``path``, read with ``pread`` (a copy,
    read-only; shorter when the file is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, max(0, end - first) * ENTRY_SIZE, first * ENTRY_SIZE)
    finally:
        os.close(fd)
    return np.frombuffer(data, ENTRY, len(data) // ENTRY_SIZE)


class ConsumeQueue:
    __slots__ = ("topic", "queue_id", "per_file", "files", "max_offset", "low", "max_phys")   # one per queue: 100,000

    def __init__(self, root: str, topic: str, queue_id: int, file_size: int, writable: bool):
        self.topic, self.queue_id = topic, queue_id
        self.per_file = file_size // ENTRY_SIZE
        self.files = MappedFileQueue(queue_dir(root, topic, queue_id), file_size, writable, OPEN_FILES, readahead=False)
        self.max_offset = 0     # entries written (next queue offset to write)
        self.low = 0            # entries below point at CommitLog bytes retention deleted
        self.max_phys = 0       # end (offset+size) of the last entry written

    # ------------------------------------------------------------ open / recover
    def load(self) -> "ConsumeQueue":
        """Map the files and find the end of valid entries (recovery scans the last 3 files)."""
        self.files.load()
        self._recover()
        return self

    def _entries_of(self, mf) -> np.ndarray:
        mf = mf.use()
        return mf.typed(ENTRY) if mf.view is not None else np.empty(0, ENTRY)

    def _recover(self) -> None:
        files = self.files.files
        self.max_offset = files[0].start // ENTRY_SIZE if files else 0
        self.max_phys = 0
        for mf in files[max(0, len(files) - 3):]:
            n, last = valid_prefix(mf.path, mf.size)
            self.max_offset = mf.start // ENTRY_SIZE + n
            if last is not None and last != BLANK_ENTRY:
                self.max_phys = last[0] + last[1]
            if n < self.per_file:
                break
        if not self.files.writable:
            return
        # drop files wholly past the end (a crash after creating the next file)
        end_byte = self.max_offset * ENTRY_SIZE
        for mf in list(files):
            if mf.start > end_byte or (mf.start == end_byte and mf is not files[0]):
                mf.close()
                os.unlink(mf.path)
                files.remove(mf)

    @property
    def min_offset(self) -> int:
        """First queue offset whose message is still stored: the first file's first entry, or past
        the entries retention left pointing at deleted CommitLog bytes (``retire``)."""
        return max(self.files.min_offset // ENTRY_SIZE, self.low)

    def retire(self, min_phys: int) -> int:
        """The CommitLog below ``min_phys`` is gone (retention): delete files whose entries all
        point below it (never the last), and move the min offset to the first entry at or past it
        (RocketMQ's deleteExpiredFile + correctMinOffset).  -> the new min offset."""
        files = self.files.files
        while len(files) > 1:
            e = self._entries_of(files[0])
            if not len(e) or int(e["phys"][-1]) >= min_phys:
                break
            mf = files.pop(0)
            mf.close()
            if self.files.writable:
                os.unlink(mf.path)
        self.low = self.first_at_or_past(min_phys)
        return self.min_offset

    # ------------------------------------------------------------ write (dispatcher)
    def put(self, queue_offset: int, phys, size, tags) -> int:
        """Write entries for consecutive queue offsets from ``queue_offset`` (columns as arrays
        or lists).  Entries already present (phys+size <= max_phys) are skipped; returns how
        many were written."""
        if len(phys) and int(phys[0]) + int(size[0]) <= self.max_phys:    # a re-dispatch: skip what is there
            ends = np.asarray(phys) + np.asarray(size)                     # phys only grows in a queue
            first = int(np.searchsorted(ends, self.max_phys, side="right"))
            queue_offset += first
            phys, size, tags = phys[first:], size[first:], tags[first:]
        if len(phys) == 0:
            return 0
        if queue_offset != self.max_offset:
            if self.max_offset == 0 and not self.files.files:
                self._fill_blank_front(queue_offset)
            else:
                raise CorruptData(self.files.directory, queue_offset * ENTRY_SIZE,
                                  f"queue offset {queue_offset} is not the next offset {self.max_offset}")
        done = 0
        while done < len(phys):
            q = queue_offset + done
            mf = self.files.file_for_write(q * ENTRY_SIZE)
            i = q - mf.start // ENTRY_SIZE
            n = min(len(phys) - done, self.per_file - i)
            mf.reserve(i * ENTRY_SIZE, (i + n) * ENTRY_SIZE)
            if n <= FEW_ENTRIES:                    # struct: three numpy field writes cost more
                at, mm = i * ENTRY_SIZE, mf.mm
                for k in range(done, done + n):
                    _PHYS_TAGS.pack_into(mm, at, int(phys[k]), int(tags[k]))
                    _SIZE.pack_into(mm, at + _SIZE_AT, int(size[k]))     # last, as below
                    at += ENTRY_SIZE
            else:
                block = mf.typed(ENTRY)[i:i + n]
                block["phys"] = phys[done:done + n]
                block["tags"] = tags[done:done + n]
                block["size"] = size[done:done + n]     # last: size > 0 is what makes an entry valid
            done += n
        self.max_offset = queue_offset + len(phys)
        self.max_phys = int(phys[-1]) + int(size[-1])
        return len(phys)

    def _fill_blank_front(self, queue_offset: int) -> None:
        start = queue_offset - queue_offset % self.per_file
        mf = self.files.create(start * ENTRY_SIZE)
        mf.reserve(0, (queue_offset - start) * ENTRY_SIZE)
        e = mf.typed(ENTRY)
        front = e[:queue_offset - start]
        front["phys"], front["size"], front["tags"] = BLANK_ENTRY
        self.max_offset = self.low = queue_offset      # (the blanks are no message: the queue starts here)

    def first_at_or_past(self, phys_offset: int) -> int:
        """The first queue offset whose entry points at or past ``phys_offset`` (``max_offset``
        when none does): a binary search, as entries' phys only grow."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if int(self.entries(mid, 1)["phys"][0]) >= phys_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def entries_within(self, start: int, end: int) -> range:
        """The queue offsets whose entries point into CommitLog bytes [start, end)."""
        return range(self.first_at_or_past(start), self.first_at_or_past(end))

    def rewrite(self, queue_offset: int, phys: int, size: int, tags: int) -> None:
        """Rewrite one entry in place (recovery pointing it at a tombstone)."""
        e = self.entries(queue_offset, 1)
        e["phys"], e["tags"], e["size"] = phys, tags, size

    def truncate_phys(self, phys_offset: int, running: bool = False) -> None:
        """Drop every entry pointing at or past ``phys_offset`` (CommitLog tail was cut): files
        deleted and zeroed (recovery), or, ``running`` (readers map them), zeroed and kept
        (``MappedFileQueue.cut``)."""
        lo = self.first_at_or_past(phys_offset)
        if lo < self.max_offset:
            (self.files.cut if running else self.files.truncate)(lo * ENTRY_SIZE)
            self.max_offset = lo
        self.max_phys = 0
        if self.max_offset > self.min_offset:
            last = self.entries(self.max_offset - 1, 1)[0]
            self.max_phys = int(last["phys"]) + int(last["size"])

    # ------------------------------------------------------------ read
    def entries(self, queue_offset: int, count: int) -> np.ndarray:
        """A read-only numpy view of up to ``count`` entries from ``queue_offset`` (one file)."""
        mf = self.files.file_for(queue_offset * ENTRY_SIZE)
        if mf is None:
            return np.empty(0, ENTRY)
        i = queue_offset - mf.start // ENTRY_SIZE
        return mf.typed(ENTRY)[i:i + max(0, count)]

    def flush(self) -> None:
        for mf in self.files.files[-2:]:
            mf.flush()

    def close(self) -> None:
        self.files.close()


def load_all(root: str, mapped_file_size: int, writable: bool, broken: list | None = None) -> dict:
    """Every consume queue of the store, (topic, queue id) -> ConsumeQueue, each with the end of its
    valid entries found (and none of its files mapped: a store may hold 100,000 queues).  A queue
    directory holding no file holds nothing.  With ``broken``, a queue whose files cannot be loaded
    (one missing between others, or of the wrong size) is left out and listed there as
    ((topic, queue id), what is wrong); without it, that raises."""
    cqs: dict[tuple[str, int], ConsumeQueue] = {}
    base = os.path.join(root, "consumequeue")
    if not os.path.isdir(base):
        return cqs
    size = file_size_for(mapped_file_size)
    for topic in sorted(os.listdir(base)):
        for qid in sorted(os.listdir(os.path.join(base, topic))):
            if qid.lstrip("-").isdigit():
                cq = ConsumeQueue(root, topic, int(qid), size, writable)
                try:
                    cq.load()
                except (FileGap, FileSizeMismatch) as e:
                    if broken is None:
                        raise
                    broken.append(((topic, int(qid)), str(e)))
                    continue
                if cq.files.files:
                    cqs[(topic, int(qid))] = cq
    return cqs
