"""Mapped files: fixed-size files named by their 20-digit start offset (FACTS §5.1, §5.2).

``MappedFile`` is one file mapped shared, with a numpy uint8 view for vector reads/writes.
``MappedFileQueue`` is a directory of them (CommitLog, each ConsumeQueue): load with a size check,
find the file holding an offset, create the next one, truncate everything past an offset.

Who writes: the writer (CommitLog) and the dispatcher (ConsumeQueue) open these read-write;
readers, the flusher and Spark open them read-only.  Files are sparse, as RocketMQ's: created at
their full size (``ftruncate``, so readers see the size at once) with no blocks behind them, so
disk use follows the data.  A writer reserves blocks (``posix_fallocate``) before it places bytes:
``reserve`` for a range written in order (a chunk ahead at a time), ``reserve_chunk`` for a range
written at random (the IndexFile's slot table).  A full disk is then an error before the write
(``DiskFull``), never a SIGBUS when a mapped page is first stored to.

``write`` puts bytes into a file through its descriptor (``pwrite``), not through the mapping: the
CommitLog writer appends that way.  Every mapping of the file sees them at once (Linux has one page
cache), but the writer takes no page fault per 4 KiB page, and the pages come as large folios,
which the flusher writes back for a fraction of the cost (docs/ARCHITECTURE.md, "How the writer
writes the CommitLog").

``readahead=False`` maps a file with ``MADV_RANDOM``: a page fault then brings in its own page
only, where the kernel's default would read ahead the device's ``read_ahead_kb`` around it (8 MiB
on this project's VM: one ~20 ms fault).  The IndexFile, whose hash slots are touched at random,
maps without it; readers of the CommitLog and consume queues keep it for cold reads.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import resource
from collections import OrderedDict

import numpy as np

from rocketbox.store.errors import OUT_OF_FILES, DiskFull, FileGap, FileSizeMismatch, MapFailed

NAME_DIGITS = 20
RESERVE_CHUNK = 64 << 10     # blocks reserved ahead of an in-order writer, and reserve_chunk's piece


def offset_to_name(offset: int) -> str:
    return f"{offset:0{NAME_DIGITS}d}"


def fdatasync(path: str) -> None:
    """fdatasync a file by path.  Raises OSError; callers treat that as fatal."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def syncfs(path: str) -> None:
    """Write back everything dirty on the filesystem holding ``path`` and wait for it (one journal
    commit: many small files are cheaper this way than each with its fdatasync).  Raises OSError
    (Linux reports writeback errors here since 5.8); callers treat that as fatal."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
FALLOC_PUNCH = 0x01 | 0x02      # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE


def punch(path: str, at: int, end: int) -> None:
    """Make bytes [at, end) of a file read as zero, its size and inode unchanged, so that every
    process mapping it sees zeros at once and none takes a SIGBUS (the file never shrinks): their
    blocks are punched out, or, where the filesystem cannot, zeros written over them."""
    fd = os.open(path, os.O_RDWR)
    try:
        if at < end and _libc.fallocate(fd, FALLOC_PUNCH, at, end - at) != 0:
            zeros = bytes(1 << 20)
            while at < end:
                at += os.pwrite(fd, memoryview(zeros)[:min(len(zeros), end - at)], at)
    finally:
        os.close(fd)


def is_offset_name(name: str) -> bool:
    return len(name) == NAME_DIGITS and name.isdigit()


def map_failure(path: str, size: int, why: str, maps: int, max_maps: int) -> str:
    """What a failed mmap says: the file, and this process's mappings against vm.max_map_count
    (every consume-queue and CommitLog file a process reads is one; RocketMQ's os.sh raises the
    limit to 655360 for the same reason)."""
    text = f"cannot map {path} ({size} bytes): {why}; this process has {maps} mappings, vm.max_map_count is {max_maps}"
    if maps >= max_maps * 0.9:
        text += " (raise it: sysctl -w vm.max_map_count=655360)"
    return text


def _reserve(fd: int, at: int, length: int, path: str) -> None:
    try:
        os.posix_fallocate(fd, at, length)
    except OSError as e:
        raise DiskFull(f"cannot reserve {length} bytes at {at} of {path}: {e.strerror}") from None


def _map_counts() -> tuple[int, int]:
    """(this process's mappings, vm.max_map_count); -1 for what cannot be read."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = sum(1 for _ in f)
        with open("/proc/sys/vm/max_map_count") as f:
            return maps, int(f.read())
    except (OSError, ValueError):
        return -1, -1


class MappedFile:
    """One mapped file of ``size`` bytes starting at global offset ``start``."""
    __slots__ = ("path", "start", "size", "writable", "readahead", "cache", "released", "mm", "fd", "view", "_typed",
                 "_reserved", "_chunks", "_data_span", "__weakref__")     # a store may hold 100,000 of them

    def __init__(self, path: str, start: int, size: int, writable: bool, readahead: bool = True,
                 cache: "OpenFiles | None" = None):
        """``cache``: the budget of open files it counts against (``OpenFiles``); such a file may be
        released (unmapped, descriptor closed) while open, and ``use`` maps it again."""
        self.path, self.start, self.size, self.writable, self.readahead = path, start, size, writable, readahead
        self.cache, self.released = cache, False
        # the map and a uint8 view over the whole file: None until ``open`` and after ``close``, typed
        # as what callers use (they use an open file's)
        self.mm: mmap.mmap = None  # type: ignore[assignment]
        self.fd = -1                          # for ``write``, opened at its first call
        self.view: np.ndarray = None  # type: ignore[assignment]
        self._typed: dict[np.dtype, np.ndarray] = {}
        self._reserved = (0, 0)               # [lo, hi): blocks this process has reserved in order
        self._chunks: bytearray | None = None  # reserve_chunk's map of RESERVE_CHUNK pieces
        self._data_span = (0, 0)              # holds_data's last find

    @property
    def end(self) -> int:
        return self.start + self.size

    def open(self, create: bool = False) -> "MappedFile":
        flags = os.O_RDWR if self.writable else os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        fd, kept = os.open(self.path, flags, 0o644), False
        try:
            length = os.fstat(fd).st_size
            if create and length < self.size:       # new, or its creation was cut short
                os.ftruncate(fd, self.size)           # sparse: blocks come as they are reserved
                length = self.size
            if length != self.size:
                raise FileSizeMismatch(f"{self.path}: length {length} is not the configured file size {self.size}")
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
            try:
                self.mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, prot)
            except OSError as e:
                if e.errno in OUT_OF_FILES:             # (mmap dups the descriptor): said as it is
                    raise OSError(e.errno, f"{e.strerror}: cannot map {self.path}") from None
                raise MapFailed(map_failure(self.path, self.size, e.strerror or str(e), *_map_counts())) from None
            if not self.readahead:
                self.mm.madvise(mmap.MADV_RANDOM)
            if create and self.writable and self.fd < 0:  # its creator writes it next: kept for ``write`` and
                self.fd, kept = fd, True                   # ``reserve`` (one open less per new consume queue)
        finally:
            if not kept:
                os.close(fd)
        self.view = np.frombuffer(self.mm, dtype=np.uint8)
        if not self.writable:
            self.view.flags.writeable = False
        if self.cache is not None:
            self.cache.touch(self)
        return self

    def defer(self, length: int) -> "MappedFile":
        """A file under a budget, known but not mapped yet: its ``length`` (as found) is checked
        now, and its first ``use`` maps it (a store of 100,000 queues loads without mapping them
        all)."""
        if length != self.size:
            raise FileSizeMismatch(f"{self.path}: length {length} is not the configured file size {self.size}")
        self.released = True
        return self

    def use(self) -> "MappedFile":
        """This file, mapped: opened again if its budget released it, and counted as used now
        (the LRU's order). Callers of a file under a budget take it through here before using
        ``mm``, ``view`` or ``typed``, and touch no other such file until done with it."""
        if self.cache is not None:
            if self.released:
                self.released = False
                self.open()
            else:
                self.cache.touch(self)
        return self

    def release(self) -> None:
        """The budget's eviction: unmap and close the descriptor; ``use`` opens it again."""
        self._unmap()
        self.released = True

    def reserve(self, at: int, end: int, ahead: int = RESERVE_CHUNK) -> None:
        """Blocks behind bytes [at, end) before they are written, and ``ahead`` bytes beyond:
        one comparison while an in-order writer stays inside what it reserved.  Raises DiskFull."""
        lo, hi = self._reserved
        if lo <= at and end <= hi:
            return
        hi = min(self.size, end + ahead)
        _reserve(self._descriptor(), at, hi - at, self.path)
        self._reserved = (at, hi)

    def reserve_chunk(self, at: int) -> None:
        """Blocks behind the RESERVE_CHUNK piece holding byte ``at``, for a writer at random
        places (each piece once per process).  Raises DiskFull."""
        if self._chunks is None:
            self._chunks = bytearray(-(-self.size // RESERVE_CHUNK))
        i = at // RESERVE_CHUNK
        if not self._chunks[i]:
            start = i * RESERVE_CHUNK
            _reserve(self._descriptor(), start, min(RESERVE_CHUNK, self.size - start), self.path)
            self._chunks[i] = 1

    def data_spans(self, at: int = 0, most: int = 1 << 62) -> list[tuple[int, int]]:
        """The file's data from ``at`` on, as [lo, hi) ranges: what is neither a hole nor a
        reserved block never written (``SEEK_DATA``/``SEEK_HOLE``).  Scans read only these: a
        hole reads as zeros, but on tmpfs reading one takes a page, which a full one lacks."""
        spans: list[tuple[int, int]] = []
        fd = os.open(self.path, os.O_RDONLY)
        try:
            while at < self.size and len(spans) < most:
                try:
                    lo = os.lseek(fd, at, os.SEEK_DATA)
                except OSError:                     # ENXIO: no data past ``at``
                    break
                hi = min(self.size, os.lseek(fd, lo, os.SEEK_HOLE))
                spans.append((lo, hi))
                at = hi
        finally:
            os.close(fd)
        return spans

    def holds_data(self, at: int) -> bool:
        """Byte ``at`` lies in the file's data, not in a hole (the span last found is kept)."""
        lo, hi = self._data_span
        if lo <= at < hi:
            return True
        spans = self.data_spans(at, most=1)
        if not spans or spans[0][0] != at:
            return False
        self._data_span = spans[0]
        return True

    def _descriptor(self) -> int:
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR)
        return self.fd

    def typed(self, dtype: np.dtype) -> np.ndarray:
        """The whole file as an array of ``dtype`` records, made once per file (a structured
        view costs a few µs of numpy checks each time; a pull asks for one per request)."""
        v = self._typed.get(dtype)
        if v is None:
            v = self._typed[dtype] = self.view.view(dtype)
        return v

    def write(self, at: int, data) -> None:
        """``data`` (a bytes-like) into the file from byte ``at``, through the descriptor."""
        fd = self._descriptor()
        view = memoryview(data).cast("B")
        while view:
            n = os.pwrite(fd, view, at)
            view, at = view[n:], at + n

    def zero_from(self, pos: int) -> None:
        """Make bytes [pos, size) read as zero, cheaply: punch them out of the file (their blocks
        go; the next writer reserves again)."""
        with open(self.path, "r+b") as f:
            f.truncate(pos)
            f.truncate(self.size)
        self._reserved, self._chunks, self._data_span = (0, 0), None, (0, 0)

    def punch_from(self, pos: int) -> None:
        """Make bytes [pos, size) read as zero while other processes map the file (``punch``);
        what this process reserved there is forgotten."""
        punch(self.path, pos, self.size)
        self._reserved, self._chunks, self._data_span = (0, 0), None, (0, 0)

    def flush(self) -> None:
        """fdatasync the file.  Raises OSError; callers treat that as fatal."""
        fdatasync(self.path)

    def close(self) -> None:
        """Unmap.  If a caller still holds a numpy view, the mapping stays until that view is
        dropped (closing under it would leave it dangling); the file itself is released now."""
        if self.cache is not None:
            self.cache.forget(self)
        self.released = False
        self._unmap()

    def _unmap(self) -> None:
        self.view, self._typed = None, {}  # type: ignore[assignment]
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:         # a caller still holds a view into it: mapped until dropped
                if self.cache is not None:
                    self.cache.linger(self.mm)
            self.mm = None  # type: ignore[assignment]


class OpenFiles:
    """A process's budget of open files for files that come in large numbers (consume queues:
    one or more per queue, and a store may hold 100,000 queues): each keeps a mapping, and a
    written one a descriptor, so without a bound a process dies at ``ulimit -n`` or at
    vm.max_map_count.  An LRU: past the budget the least recently used file is released (unmapped,
    its descriptor closed) and opened again when next used.  A file holds up to two descriptors
    (Python's mmap keeps a dup of the one it mapped, and a written file has its own), so the budget
    is a sixth of ``ulimit -n`` or a quarter of vm.max_map_count, the smaller, taken at first use
    (the roles raise their descriptor limit at start): the rest is left to connections, the
    CommitLog and the IndexFile."""

    def __init__(self, budget: int | None = None):
        self.budget = budget
        self.lru: OrderedDict[MappedFile, None] = OrderedDict()
        self.released = 0                   # files released so far (a figure for status and benchmarks)
        self.lingering: list[mmap.mmap] = []  # released files' mappings a view still holds open

    @staticmethod
    def budget_from_limits() -> int:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        try:
            with open("/proc/sys/vm/max_map_count") as f:
                maps = int(f.read())
        except (OSError, ValueError):
            maps = 65530
        return max(64, min((nofile if nofile > 0 else 1 << 20) // 6, maps // 4))

    def touch(self, mf: MappedFile) -> None:
        lru = self.lru
        if mf in lru:
            lru.move_to_end(mf)
            return
        if self.budget is None:
            self.budget = self.budget_from_limits()
        lru[mf] = None
        if len(lru) + len(self.lingering) > self.budget:
            self._reap()
        while len(lru) > 1 and len(lru) + len(self.lingering) > self.budget:   # (never the file touched)
            old, _ = lru.popitem(last=False)
            old.release()
            self.released += 1

    def forget(self, mf: MappedFile) -> None:
        self.lru.pop(mf, None)

    def linger(self, mm: mmap.mmap) -> None:
        """A released file's mapping that could not be closed (a view into it is still held): it
        counts against the budget until it is really closed (``_reap``)."""
        self.lingering.append(mm)

    def _reap(self) -> None:
        """Close the lingering mappings whose views have been dropped since."""
        still = []
        for mm in self.lingering:
            try:
                mm.close()
            except BufferError:
                still.append(mm)
        self.lingering = still


class MappedFileQueue:
    """A directory of equally sized mapped files, ordered by start offset; with ``cache``, its
    files count against that budget of open files (``OpenFiles``)."""
    __slots__ = ("directory", "file_size", "writable", "cache", "readahead", "files")

    def __init__(self, directory: str, file_size: int, writable: bool, cache: OpenFiles | None = None,
                 readahead: bool = True):
        self.directory, self.file_size, self.writable, self.cache = directory, file_size, writable, cache
        self.readahead = readahead
        self.files: list[MappedFile] = []

    def _file(self, path: str, start: int) -> MappedFile:
        return MappedFile(path, start, self.file_size, self.writable, self.readahead, self.cache)

    def _known(self, path: str, start: int, length: int, create: bool = False) -> MappedFile:
        """A file of the directory (``length`` bytes now): mapped now, or under a budget at its
        first use (``defer``)."""
        mf = self._file(path, start)
        return mf.defer(length) if self.cache is not None and not create else mf.open(create=create)

    def load(self) -> "MappedFileQueue":
        """Every file in the directory, mapped (under a budget: at first use); a file of the wrong
        size fails the load, and so does one missing between two others (``FileGap``).  The
        newest file may still be short of its size: its creator is making it (``MappedFile.open``:
        the file is made empty, then given its size), or was killed doing so.  A read-only user
        leaves it to ``refresh``, which maps it once it has its size; its owner (loading for
        recovery) finishes creating it."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if is_offset_name(n))
        except FileNotFoundError:                     # made with its first file (``create``)
            return self
        try:
            for i, name in enumerate(names):
                path = os.path.join(self.directory, name)
                if i and int(name) != int(names[i - 1]) + self.file_size:
                    raise FileGap(f"{self.directory}: no file at offset {int(names[i - 1]) + self.file_size} "
                                  f"between {names[i - 1]} and {name}")
                length = os.stat(path).st_size
                unfinished = i == len(names) - 1 and length < self.file_size
                if unfinished and not self.writable:
                    break
                self.files.append(self._known(path, int(name), length, create=unfinished))
        except BaseException:
            self.close()
            raise
        return self

    def refresh(self) -> None:
        """Read-only users: map files the writer has created since ``load``."""
        if not os.path.isdir(self.directory):
            return
        known = {f.start for f in self.files}
        for name in sorted(n for n in os.listdir(self.directory) if is_offset_name(n)):
            if int(name) not in known and (not self.files or int(name) > self.files[-1].start):
                path = os.path.join(self.directory, name)
                length = os.path.getsize(path)
                if length == self.file_size:
                    self.files.append(self._known(path, int(name), length))

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    def file_for(self, offset: int) -> MappedFile | None:
        """The file holding global ``offset`` (None if not mapped), ready to use (``MappedFile.use``)."""
        if not self.files:
            return None
        i = (offset - self.files[0].start) // self.file_size
        if 0 <= i < len(self.files) and self.files[i].start <= offset < self.files[i].end:
            return self.files[i].use()
        for f in self.files:  # gaps after retention deletes
            if f.start <= offset < f.end:
                return f.use()
        return None

    def create(self, start: int) -> MappedFile:
        """Create (or map the existing) file starting at ``start``."""
        assert start % self.file_size == 0, start
        os.makedirs(self.directory, exist_ok=True)
        mf = self._file(os.path.join(self.directory, offset_to_name(start)), start).open(create=True)
        self.files.append(mf)
        return mf

    def file_for_write(self, offset: int) -> MappedFile:
        mf = self.file_for(offset)
        return mf if mf is not None else self.create(offset - offset % self.file_size)

    def write(self, offset: int, data) -> None:
        """``MappedFile.write`` at global ``offset``, into the file holding it (created if need be);
        ``data`` must end within that file."""
        mf = self.file_for_write(offset)
        mf.write(offset - mf.start, data)

    def reserve(self, offset: int, end: int) -> None:
        """Blocks behind global [offset, end) exactly (the caller says how far ahead), in the files
        holding it, made if need be.  Raises DiskFull."""
        while offset < end:
            mf = self.file_for_write(offset)
            mf.reserve(offset - mf.start, min(end, mf.end) - mf.start, 0)
            offset = mf.end

    def cut(self, offset: int) -> None:
        """Make everything at or past ``offset`` read as zero, every file kept (``MappedFile.punch_from``):
        other processes map them, and a file deleted and made again would be another file to them.
        A running slave's cut (its master lost its tail); ``truncate`` is recovery's."""
        for mf in self.files:
            if offset < mf.end:
                mf.punch_from(max(0, offset - mf.start))

    def truncate(self, offset: int) -> None:
        """Drop everything at or past ``offset``: later files deleted, the partial one zeroed."""
        keep = []
        for mf in self.files:
            if mf.start >= offset:
                mf.close()
                os.unlink(mf.path)
            else:
                if offset < mf.end:
                    mf.zero_from(offset - mf.start)
                keep.append(mf)
        self.files = keep

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files = []
