"""The read-side API against a running appliance: pull with tag filter, records from the mmap,
and a long-poll wait woken by the dispatcher."""
import threading
import time

from rocketbox.shm.layout import C
from rocketbox.shm.ringclient import PutRequest, RingClient
from rocketbox.store.javahash import string_hash
from rocketbox.store.view import FILTER_SCAN, FOUND, NO_MATCHED, NO_NEW, OFFSET_MOVED, StoreView


def test_pull_filter_and_long_poll(appliance_factory):
    app = appliance_factory().start()
    sh = app.shared()
    client = RingClient(app.cfg, sh).open()
    view = StoreView(app.cfg, sh, client.slot).open()
    try:
        reqs = [PutRequest("TBW102", 0, [f"m{i}".encode()], [{"TAGS": "TagA" if i % 2 else "TagB", "UNIQ_KEY": f"U{i}"}])
                for i in range(50)]
        assert all(r.ok for r in client.put(reqs))
        deadline = time.monotonic() + 5
        while view.offsets("TBW102", 0) != (0, 50):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        got = view.pull("TBW102", 0, 0, 32)
        assert got.status == FOUND and got.next_offset == 32 and got.count == 32
        assert len(got.parts) == 1                       # adjacent in the CommitLog: one view
        recs = got.records()
        assert [r.body for r in recs] == [f"m{i}".encode() for i in range(32)]
        assert recs[0].queue_offset == 0 and recs[0].topic == "TBW102"
        got = view.pull("TBW102", 0, 0, 10, tag_codes=[string_hash("TagA")])
        assert [r.body for r in got.records()] == [f"m{i}".encode() for i in range(1, 20, 2)]
        assert got.next_offset == 20 and len(got.parts) == 10
        size = recs[0].total_size
        got = view.pull("TBW102", 0, 5, 32, max_bytes=3 * size + 1)       # the byte cap
        assert [r.body for r in got.records()] == [b"m5", b"m6", b"m7"] and got.next_offset == 8
        assert view.pull("TBW102", 0, 5, 32, max_bytes=1).count == 1      # the first record always
        got = view.pull("TBW102", 0, 5, 3, max_bytes=3 * size)             # one run, exactly the cap
        assert [r.body for r in got.records()] == [b"m5", b"m6", b"m7"] and len(got.parts) == 1
        assert got.next_offset == 8
        mixed = [PutRequest("TBW102", 1 + i % 2, [f"q{i}".encode()], [{}]) for i in range(10)]
        assert all(r.ok for r in client.put(mixed))                      # queues 1 and 2 interleaved
        deadline = time.monotonic() + 5
        while view.offsets("TBW102", 1) != (0, 5):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        got = view.pull("TBW102", 1, 0, 32)
        assert [r.body for r in got.records()] == [b"q0", b"q2", b"q4", b"q6", b"q8"]
        assert len(got.parts) == 5 and got.next_offset == 5
        assert view.pull("TBW102", 0, 50, 32).status == NO_NEW
        assert view.pull("TBW102", 0, 51, 32).status == OFFSET_MOVED
        while sh.control[C.DISPATCHED] < sh.control[C.WRITTEN]:
            time.sleep(0.01)
        seen = int(sh.control[C.DISPATCHED])
        def late_put():
            other_sh = app.shared()
            other = RingClient(app.cfg, other_sh).open()
            assert other.put([PutRequest("TBW102", 0, [b"late"], [{}])])[0].ok
            other.close()
            other_sh.close()
        t = threading.Timer(0.3, late_put)
        t0 = time.monotonic()
        t.start()
        assert view.wait_new(seen, client.waker, 10)
        waited = time.monotonic() - t0
        t.join()
        assert 0.2 < waited < 5
        deadline = time.monotonic() + 5
        while view.offsets("TBW102", 0)[1] != 51:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert view.pull("TBW102", 0, 50, 1).records()[0].body == b"late"
        assert not view.wait_new(int(sh.control[C.DISPATCHED]), client.waker, 0.2)
    finally:
        view.close()
        client.close()
        sh.close()


def test_a_filtered_pull_scans_as_far_as_rocketmqs_does(appliance_factory):
    """RocketMQ's getMessage looks at up to max(16000, maxMsgNums * 20) bytes of consume queue
    (800 entries) for a filtered pull: 1,000 TagBs then a TagA take a TagA consumer two pulls."""
    app = appliance_factory(mappedFileSizeConsumeQueue=20 * 4000).start()
    sh = app.shared()
    client = RingClient(app.cfg, sh).open()
    view = StoreView(app.cfg, sh, client.slot).open()
    try:
        tags = ["TagB"] * 1000 + ["TagA"]
        assert all(r.ok for r in client.put([PutRequest("TBW102", 0, [b"m%d" % i], [{"TAGS": t}]) for i, t in enumerate(tags)]))
        deadline = time.monotonic() + 5
        while view.offsets("TBW102", 0) != (0, 1001):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        a = [string_hash("TagA")]
        assert FILTER_SCAN == 800
        got = view.pull("TBW102", 0, 0, 32, tag_codes=a)
        assert got.status == NO_MATCHED and got.next_offset == 800
        got = view.pull("TBW102", 0, 800, 32, tag_codes=a)
        assert got.status == FOUND and [r.body for r in got.records()] == [b"m1000"] and got.next_offset == 1001
        got = view.pull("TBW102", 0, 0, 1000, tag_codes=[string_hash("TagB")], max_bytes=1 << 30)
        assert got.status == FOUND and got.count == 1000 and got.next_offset == 1000      # maxMsgNums past 800
    finally:
        view.close()
        client.close()
        sh.close()


def test_interleaved_queues_across_commitlog_files(appliance_factory):
    """Two queues' records interleaved over three 80 KiB CommitLog files: a pull gets one piece
    per record, in order, whole across the file ends, and the byte cap counts those pieces."""
    app = appliance_factory(mappedFileSizeCommitLog=str(80 * 1024), maxMessageSize=str(8 * 1024)).start()
    sh = app.shared()
    client = RingClient(app.cfg, sh).open()
    view = StoreView(app.cfg, sh, client.slot).open()
    try:
        bodies = [bytes([i]) * 3000 for i in range(60)]                     # ~3.1 KiB records: ~25 a file
        for i in range(0, 60, 10):
            assert all(r.ok for r in client.put([PutRequest("TBW102", 1 + j % 2, [bodies[j]], [{}])
                                                  for j in range(i, i + 10)]))
        deadline = time.monotonic() + 5
        while view.offsets("TBW102", 2) != (0, 30):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert int(sh.control[C.WRITTEN]) > 2 * 80 * 1024                  # into the third file
        got = view.pull("TBW102", 1, 0, 32)
        assert got.count == 30 and len(got.parts) == 30 and got.next_offset == 30
        assert [r.body for r in got.records()] == bodies[0::2]
        assert [r.queue_offset for r in got.records()] == list(range(30))
        size = got.records()[0].total_size
        got = view.pull("TBW102", 2, 3, 32, max_bytes=4 * size)             # the cap over separate pieces
        assert [r.body for r in got.records()] == bodies[7:15:2] and got.next_offset == 7
    finally:
        view.close()
        client.close()
        sh.close()
