"""Warm-ahead (flusher/warmahead.py) on real CommitLog files: the pages ahead of ``written`` are in
the page cache after a step, it follows ``written`` and goes on into the next file once that
exists, and it never changes a byte, even while the writer writes the pages it reads."""
import ctypes
import mmap
import os
import threading

import numpy as np

from flusher import warmahead
from flusher.warmahead import WarmAhead
from shm.layout import C
from store.mappedfile import MappedFileQueue
from tests.unit.writer.rig import small_config

MIB = 1 << 20
_libc = ctypes.CDLL(None, use_errno=True)


def _resident(path: str, at: int, n: int) -> np.ndarray:
    """Whether each 4 KiB page of ``path[at:at + n]`` is in the page cache (mincore)."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        vec = (ctypes.c_ubyte * (n // 4096))()
        addr = np.frombuffer(mm, np.uint8).ctypes.data + at
        assert _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(n), vec) == 0, ctypes.get_errno()
        return np.frombuffer(vec, np.uint8) & 1 == 1
    finally:
        mm.close()


def _store(tmp_path, ahead_mb=1):
    cfg = small_config(tmp_path / "store", "wa", mappedFileSizeCommitLog=4 * MIB, commitLogWarmAheadMb=ahead_mb)
    log = MappedFileQueue(cfg.commitlog_dir, cfg.mappedFileSizeCommitLog, True).load()
    return cfg, log, np.zeros(64, np.int64)


def test_a_step_brings_in_the_pages_ahead_of_written_and_follows_it_into_the_next_file(tmp_path):
    cfg, log, ctl = _store(tmp_path)
    first = log.create(0)
    warm = WarmAhead(cfg, ctl)
    try:
        ctl[C.WRITTEN] = 5000                      # mid-page: warming starts at that page's start
        assert warm.step() == MIB + 904 and warm.warmed == 5000 + MIB
        assert _resident(first.path, 4096, MIB).all()
        assert warm.step() == 0                    # nothing new written: nothing read
        ctl[C.WRITTEN] = 4 * MIB - 100             # near the end; the next file does not exist yet
        assert warm.step() == 4096 and warm.warmed == 4 * MIB
        second = log.create(4 * MIB)               # the writer rolls: warmed from its start
        assert warm.step() == MIB - 100 and warm.warmed == 5 * MIB - 100
        assert _resident(second.path, 0, MIB).all()
    finally:
        warm.stop()
        log.close()


def test_it_never_changes_a_byte_while_the_writer_writes_under_it(tmp_path, monkeypatch):
    monkeypatch.setattr(warmahead, "BUSY_S", 0.0005)
    monkeypatch.setattr(warmahead, "IDLE_S", 0.0005)
    monkeypatch.setattr(warmahead, "CHUNK", 8192)       # small reads: many races with the writes
    cfg, log, ctl = _store(tmp_path)
    log.create(0)
    data = os.urandom(3 * MIB)
    warm = WarmAhead(cfg, ctl).start()
    try:
        for at in range(0, len(data), 1000):      # records straddle pages, as the writer's do
            log.write(at, data[at:at + 1000])
            ctl[C.WRITTEN] = at + len(data[at:at + 1000])
    finally:
        warm.stop()
    with open(log.files[0].path, "rb") as f:
        assert f.read(len(data)) == data and f.read(MIB) == bytes(MIB)
    assert warm.warmed >= len(data)
    log.close()


def test_off_when_zero_and_a_file_gone_is_not_an_error(tmp_path):
    cfg, log, ctl = _store(tmp_path, ahead_mb=0)
    warm = WarmAhead(cfg, ctl).start()
    assert not warm.thread.is_alive()               # commitLogWarmAheadMb=0: no thread at all
    warm.stop()
    cfg, log, ctl = _store(tmp_path / "b")
    warm = WarmAhead(cfg, ctl)
    assert warm.step() == 0 and warm.warmed == 0    # no CommitLog file yet
    warm.stop()
