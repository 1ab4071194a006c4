"""StoreView.pull's limits, record by record as RocketMQ's isTheBatchFull: records "on disk" (more
than accessMessageInMemoryMaxRatio of RAM behind the CommitLog's end) under the on-disk count and
bytes, records past that line under the in-memory ones, in one pull that crosses it; and the
next offset is the first record not returned, with and without a tag filter."""
from rocketbox.shm.ringclient import PutRequest
from rocketbox.store.javahash import string_hash
from rocketbox.store.view import StoreView
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config

N = 20


def _store(tmp_path):
    cfg = small_config(tmp_path / "store", "pl", mappedFileSizeCommitLog=1 << 20)
    return cfg, running_store(cfg)


def _fill(sh, w, d, c):
    w.topics.upsert(topic_config("Cold", 1, 1))
    reqs = [PutRequest("Cold", 0, [bytes([65 + i]) * 1000], [{"TAGS": "TagA" if i % 2 == 0 else "TagB"}])
            for i in range(N)]
    ticket = c.submit(reqs)
    while w.step():
        pass
    assert all(r.ok for r in c.collect(ticket, 1))
    while d.step():
        pass


def test_a_pull_crossing_from_disk_into_memory_takes_each_records_limits(tmp_path):
    cfg, store = _store(tmp_path)
    with store as (sh, w, d, c):
        _fill(sh, w, d, c)
        view = StoreView(cfg, sh).open()
        e = view.entries("Cold", 0, 0, N)
        phys, size = [int(p) for p in e["phys"]], int(e["size"][0])
        written = phys[-1] + size

        def pull(on_disk: int, disk=(8, 1 << 16), mem_bytes=1 << 18, offset=0, tags=None):
            """A pull from ``offset`` with the first ``on_disk`` records of the queue on disk."""
            view.in_memory_bytes = written - (phys[on_disk] if on_disk < N else written)
            got = view.pull("Cold", 0, offset, 32, tags, mem_bytes, disk)
            return [r.body[0] for r in got.records()], got.next_offset

        assert pull(5) == (list(b"ABCDEFGHIJKLMNOPQRST"), N)     # 5 on disk (< 8), then 15 in memory
        view.in_memory_bytes = written - phys[5]
        assert view.on_disk(phys[4]) and not view.on_disk(phys[5])
        assert pull(N) == (list(b"ABCDEFGH"), 8)                          # all on disk: 8
        assert pull(5, disk=(3, 1 << 16)) == (list(b"ABC"), 3)            # the 4th is on disk, 3 taken
        assert pull(5, disk=(8, 2 * size + 10)) == (list(b"AB"), 2)      # on-disk bytes
        assert pull(1, mem_bytes=3 * size + 10) == (list(b"ABC"), 3)     # in memory past the line: its bytes
        assert pull(N, disk=(8, 10)) == (list(b"A"), 1)                   # the first always
        # with a filter: TagA is every other record; the next offset is the first match not taken
        tag_a = [string_hash("TagA")]
        assert pull(N, disk=(2, 1 << 16), tags=tag_a) == (list(b"AC"), 4)
        assert pull(3, disk=(2, 1 << 16), tags=tag_a, offset=0) == (list(b"ACEGIKMOQS"), N)
        assert pull(N, offset=16) == (list(b"QRST"), N)                   # fewer than the limit left
        view.close()
