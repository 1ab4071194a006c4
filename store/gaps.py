"""Gaps in the CommitLog: bytes missing between files that are there (#49).

The CommitLog is one address space cut into files named by their first offset, each of the
configured size.  A file missing between two others, a file short of its size that is not the
newest, a name that does not follow from the previous one, or consume queues that point past the
last file: each is a range of acknowledged messages gone, and everything after it is still there.
Recovery used to end the log at the gap and delete every later file.  Now ``find`` names each gap
from the directory listing alone (names and sizes: nothing is mapped), recovery refuses to start
on one (exit 2 with the missing range and the files after it), ``appliance check`` reports it,
and nothing is deleted or cut.

An operator who accepts the loss runs ``appliance accept-gap`` on the stopped store (``fill``):
each missing range becomes a sparse filler, a file (or the rest of the short one) whose first
bytes are RocketMQ's end-of-file BLANK record, so every reader of the log, ours or RocketMQ's,
steps over it to the next file; every consume-queue entry that pointed into the range gets the
tombstone tag code (readers skip it, its queue stays dense); and the quarantine lists the range
("missing CommitLog bytes, accepted by the operator").  The files after the gap stay readable.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from rocketbox.store import message, quarantine, salvage
from rocketbox.store.errors import CorruptData, StoreError
from rocketbox.store.mappedfile import is_offset_name, offset_to_name


class CommitLogGap(StoreError):
    """Recovery met a gap: start-up stops (``appliance accept-gap`` is the operator's way on)."""


@dataclass
class Gap:
    start: int              # first missing CommitLog offset
    end: int                # first offset present again (a file's start), or where the queues point to
    why: str
    after: list[str] = field(default_factory=list)      # the files after the gap, oldest first
    fillable: bool = True   # False: overlapping names, which no filler resolves

    def describe(self) -> str:
        files = (f"{len(self.after)} file(s) after it ({self.after[0]} .. {self.after[-1]})" if self.after
                 else "no file after it")
        return f"CommitLog bytes {self.start}-{self.end} ({self.end - self.start} bytes) are missing: {self.why}; {files}"


def find(directory: str, file_size: int, queues=()) -> list[Gap]:
    """Every gap of the CommitLog in ``directory`` (files of ``file_size`` bytes); ``queues``: the
    store's loaded consume queues, whose furthest entry past the last file means files missing at
    the end.  The newest file may be short (its creator was making it)."""
    try:
        names = sorted(n for n in os.listdir(directory) if is_offset_name(n))
    except FileNotFoundError:
        names = []
    sizes = [os.path.getsize(os.path.join(directory, n)) for n in names]
    gaps: list[Gap] = []
    for i, (name, size) in enumerate(zip(names, sizes)):
        start, later = int(name), names[i + 1:]
        if i > 0:
            expected = int(names[i - 1]) + file_size
            if start > expected:
                gaps.append(Gap(expected, start, f"no file {offset_to_name(expected)} before {name}", names[i:]))
            elif start < expected:
                gaps.append(Gap(start, expected, f"file {name} does not follow {names[i - 1]} (files of {file_size} "
                                                 "bytes): it overlaps it", names[i:], fillable=False))
        if later and size < file_size:
            gaps.append(Gap(start + size, start + file_size, f"file {name} is {size} bytes, not {file_size}", later))
    last_end = int(names[-1]) + file_size if names else 0
    queues_end = max((cq.max_phys for cq in queues), default=0)
    if queues_end > last_end:
        end = -(-queues_end // file_size) * file_size
        gaps.append(Gap(last_end, end, f"consume queues point up to offset {queues_end}, past the last CommitLog "
                                       f"file ({names[-1] if names else 'none'})"))
    return gaps


def refuse(gaps: list[Gap]) -> None:
    """Start-up on a store with gaps: raise, naming each."""
    if gaps:
        raise CommitLogGap("; ".join(g.describe() for g in gaps) + ". Nothing was deleted or cut. To accept the "
                           "loss and serve everything else, stop and run `appliance accept-gap` (docs/STORE-SAFETY.md)")


def fill(root: str, directory: str, file_size: int, gaps: list[Gap], queues: dict) -> list[tuple[int, int]]:
    """Accept each gap (the operator said so): make it a BLANK filler, point the consume-queue
    entries into it at its start with the tombstone tag code, list it in the quarantine.
    ``queues``: (topic, queue id) -> a writable, loaded ConsumeQueue.  -> the (offset, length)
    of each filled range."""
    done, entries = [], []
    for g in gaps:
        if not g.fillable:
            raise CommitLogGap(f"{g.describe()}: no filler resolves overlapping files; move the wrong one away first")
        lost = _fill_files(directory, file_size, g)
        span = min(g.end - lost, 2**31 - 1)
        pointed = 0
        for (topic, qid), cq in sorted(queues.items()):
            for q in cq.entries_within(lost, g.end):
                cq.rewrite(q, lost, span, salvage.TOMBSTONE_TAGS)
                pointed += 1
            cq.flush()
        done.append((lost, g.end - lost))
        entries.append({"offset": lost, "length": g.end - lost, "file": os.path.join(directory, offset_to_name(lost - lost % file_size)),
                        "fileOffset": lost % file_size, "reason": f"missing CommitLog bytes ({g.why}), accepted by the "
                        f"operator; {pointed} consume-queue entries pointed into them", "topic": "", "queueId": -1,
                        "queueOffset": None, "identity": "unknown", "foundBy": "accept-gap",
                        "time": int(time.time() * 1000)})
    if entries:
        quarantine.add(root, entries, [b""] * len(entries))
    return done


def _fill_files(directory: str, file_size: int, g: Gap) -> int:
    """Make [g.start, g.end) a filler: the short file is given its size with a BLANK after its last
    whole record, each missing file is made sparse with a BLANK at its start.  -> where the lost
    bytes begin (a short file's last record, cut by the shortening, is lost with them)."""
    lost = g.start
    at = g.start
    while at < g.end:
        base = at - at % file_size
        path = os.path.join(directory, offset_to_name(base))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            present = os.fstat(fd).st_size
            blank_at = _records_end(fd, present) if present else 0
            lost = min(lost, base + blank_at) if at == g.start else lost
            os.ftruncate(fd, file_size)
            os.pwrite(fd, message.BLANK.pack(file_size - blank_at, message.BLANK_MAGIC), blank_at)
            os.fsync(fd)
        finally:
            os.close(fd)
        at = base + file_size
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return lost


def _records_end(fd: int, length: int) -> int:
    """Where the whole records at the start of a short file end (its first bytes that are not one)."""
    buf = os.pread(fd, length, 0)
    at = 0
    while at + message.END_FILE_MIN_BLANK <= len(buf):
        try:
            size = message.check_record(buf, at, True)
        except CorruptData:
            break
        if size <= 0 or at + size > len(buf):
            break
        at += size
    return at


def accepted(root: str) -> list[tuple[int, int]]:
    """(offset, length) of every gap the operator accepted (the quarantine's list), for re-dispatch
    to point a queue's lost offsets at (``DispatcherService._fill_gap``)."""
    try:
        entries = quarantine.load(root)
    except ValueError as e:
        raise StoreError(str(e)) from None
    return [(e["offset"], min(e["length"], 2**31 - 1)) for e in entries if e.get("foundBy") == "accept-gap"]
