"""The flusher driven in-process: one fdatasync releases every waiter it covers (group commit);
ASYNC_FLUSH waits for enough dirty pages unless somebody waits; checkpoint and abort."""
import os

from rocketbox.appliance import recovery
from rocketbox.dispatcher.service import DispatcherService
from rocketbox.flusher.service import FlusherService
from rocketbox.shm.layout import C, S
from rocketbox.shm.ringclient import PutRequest, RingClient
from rocketbox.shm.state import SharedState
from rocketbox.store.checkpoint import Checkpoint
from rocketbox.writer.service import WriterService
from tests.unit.writer.rig import running_store, small_config


def _setup(tmp_path, mode):
    cfg = small_config(tmp_path / "store", "f", flushDiskType=mode, flushCommitLogLeastPages=4)
    sh = SharedState(cfg.geometry()).create()
    recovery.recover(cfg, sh)
    return cfg, sh


def test_group_commit_releases_every_covered_waiter_with_one_flush(tmp_path):
    cfg, sh = _setup(tmp_path, "SYNC_FLUSH")
    try:
        w = WriterService(cfg, sh).open()
        a, b = RingClient(cfg, sh).open(), RingClient(cfg, sh).open()
        ticket_a = a.submit([PutRequest("TBW102", 0, [b"a" * 100], [{}])])
        ticket_b = b.submit([PutRequest("TBW102", 1, [b"b" * 100], [{}])])
        while w.step():
            pass
        ra, rb = a.collect(ticket_a, 1)[0], b.collect(ticket_b, 1)[0]
        sh.slots[a.slot, S.FLUSH_WAIT] = ra.end_offset
        sh.slots[b.slot, S.FLUSH_WAIT] = rb.end_offset
        a.waker.wait(0)
        b.waker.wait(0)                               # drain earlier posts (replies)
        f = FlusherService(cfg, sh).open()
        assert f.step() and f.flush_count == 1
        assert int(sh.control[C.FLUSHED]) == int(sh.control[C.WRITTEN]) == max(ra.end_offset, rb.end_offset)
        assert a.waker.wait(0) and b.waker.wait(0)                  # both released by that one flush
        assert not f.step() and f.flush_count == 1                    # nothing new: no second flush
        assert a.wait_flushed(ra.end_offset, 0.1) and b.wait_flushed(rb.end_offset, 0.1)
        d = DispatcherService(cfg, sh).open()
        while d.step():
            pass
        d.close()
        f.close()                      # flushed and dispatched: a clean stop removes abort
        assert not os.path.exists(os.path.join(cfg.root, "abort"))
        cp = Checkpoint(os.path.join(cfg.root, "checkpoint")).load()
        assert cp.physic_ts == int(sh.control[C.WRITTEN_TS]) > 0
        a.close()
        b.close()
        w.close()
    finally:
        sh.close()
        sh.unlink()


def test_async_flush_waits_for_least_pages_unless_someone_waits(tmp_path):
    cfg, sh = _setup(tmp_path, "ASYNC_FLUSH")
    try:
        w = WriterService(cfg, sh).open()
        c = RingClient(cfg, sh).open()
        f = FlusherService(cfg, sh).open()
        assert os.path.exists(os.path.join(cfg.root, "abort"))
        ticket = c.submit([PutRequest("TBW102", 0, [b"x" * 100], [{}])])
        while w.step():
            pass
        r = c.collect(ticket, 1)[0]
        assert not f.flush_commitlog(force=False)                  # 1 dirty page < 4
        sh.slots[c.slot, S.FLUSH_WAIT] = r.end_offset
        assert f.flush_commitlog(force=False)                      # a waiter forces it
        assert int(sh.control[C.FLUSHED]) == r.end_offset
        sh.slots[c.slot, S.FLUSH_WAIT] = 0
        ticket = c.submit([PutRequest("TBW102", 0, [b"y" * 3000], [{}]) for _ in range(8)])
        while w.step():
            pass
        c.collect(ticket, 1)
        assert f.flush_commitlog(force=False)                      # >= 4 dirty pages now
        f.close()                      # nothing was dispatched: abort stays, next start recovers
        assert os.path.exists(os.path.join(cfg.root, "abort"))
        c.close()
        w.close()
    finally:
        sh.close()
        sh.unlink()


def test_consume_queues_written_since_the_last_flush_are_flushed_each_or_with_one_syncfs(tmp_path, monkeypatch):
    """A few dirty consume queues get an fdatasync each; past MANY_DIRTY_QUEUES the filesystem is
    synced once (100,000 new queues were 100,000 fdatasyncs, each a journal commit). Either way
    the checkpoint then says how far consume queues are on disk, and nothing is left to flush."""
    from rocketbox.flusher import service
    from rocketbox.store import mappedfile
    calls = []
    for fn in ("fdatasync", "syncfs"):                       # counted, then done for real
        real = getattr(mappedfile, fn)
        monkeypatch.setattr(service, fn, lambda p, real=real, fn=fn: (calls.append(fn), real(p)))
    cfg = small_config(tmp_path / "store", "fq", shmQueueSlots=512)
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert({"topicName": "Wide", "readQueueNums": 200, "writeQueueNums": 200, "perm": 6})
        f = FlusherService(cfg, sh).open()
        for queues, expect in ((range(3), {"fdatasync"}), (range(3, 200), {"syncfs"})):
            calls.clear()
            ticket = c.submit([PutRequest("Wide", q, [b"m"], [{}]) for q in queues])
            while w.step():
                pass
            c.collect(ticket, 1)
            while d.step():
                pass
            f.flush_logics(force=True)
            assert set(calls) == expect and (len(calls) == 3 if expect == {"fdatasync"} else calls.count("syncfs") <= 2)
            cp = Checkpoint(os.path.join(cfg.root, "checkpoint")).load()
            assert cp.logics_offset == int(sh.control[C.DISPATCHED]) == int(sh.control[C.WRITTEN])
            n = sh.queue_count()
            assert (f.cq_flushed[:n] == sh.views["queue_max"][:n]).all()
        calls.clear()
        f.flush_logics(force=True)
        assert calls == []                                   # nothing dirty, nothing synced
        f.close()
