"""The dispatcher's two paths, the vectorized pass and the record-by-record one for small passes,
each checked against a plain per-record reading of the same records (store/message.py's parser
and Java's hash one string at a time): queue slots, tag codes, delivery times of delayed messages,
transaction records left out, and every index key."""

import os
import time

import pytest

from rocketbox.shm.layout import C
from rocketbox.shm.ringclient import PutRequest
from rocketbox.store import indexfile, message
from rocketbox.store.javahash import index_key_hash, string_hash
from rocketbox.store.view import StoreView
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config

PREPARED, ROLLBACK = message.TX_PREPARED, message.TX_ROLLBACK


def _requests():
    """Two topics whose names hash alike ("Aa" and "BB"), keys with spaces and non-ASCII, empty and
    repeated properties, delayed messages, prepared/rollback transaction records, and IPv6 born
    hosts (a header 12 bytes longer, the store time further in)."""
    out = []
    for i in range(120):
        topic = ("Aa", "BB", "TBW102")[i % 3]
        props = {"UNIQ_KEY": f"U{i:05d}", "TAGS": ("TagA", "TagB", "标签", "")[i % 4],
                 "KEYS": ("k%d" % i, " a%d  b%d " % (i, i), "键%d" % i, "")[i % 4]}
        out.append(PutRequest(topic, i % 2, [b"m%d" % i], [props],
                              sys_flag=PREPARED if i % 17 == 5 else ROLLBACK if i % 19 == 7 else 0,
                              born_host=("::1", 5000) if i % 5 == 1 else ("127.0.0.1", 0)))   # wider headers
    for level, i in ((1, 200), (3, 201), (99, 202), (0, 203)):
        out.append(PutRequest("SCHEDULE_TOPIC_XXXX", 0, [b"d"], [{"DELAY": str(level), "TAGS": "TagD",
                                                                   "UNIQ_KEY": f"D{i}"}],
                              born_host=("::1", 5000) if i == 201 else ("127.0.0.1", 0)))
    return out


PATHS = pytest.mark.parametrize("few_records", [0, 10**6], ids=["vector", "few"])


@PATHS
def test_dispatch_matches_a_per_record_reading(tmp_path, few_records):
    cfg = small_config(tmp_path / "store", "d", mappedFileSizeCommitLog=1 << 20)
    with running_store(cfg) as (sh, w, d, c):
        d.few_records = few_records
        for name in ("Aa", "BB"):
            w.topics.upsert(topic_config(name, 2, 2))
        assert string_hash("Aa") == string_hash("BB")
        reqs = _requests()
        results = []
        for i in range(0, len(reqs), 40):
            ticket = c.submit(reqs[i:i + 40])
            while w.step():
                pass
            results += c.collect(ticket, 1)
        assert all(r.ok for r in results)
        assert d.step() and not d.step()             # one pass
        assert int(sh.control[C.DISPATCHED]) == int(sh.control[C.WRITTEN])

        view = StoreView(cfg, sh).open()
        expect_queue, expect_keys = {}, []
        levels = cfg.delay_levels_ms
        for req, res in zip(reqs, results):
            phys = res.phys_offsets[0]
            rec = message.decode_record(bytes(view.record(phys)))
            props = rec.properties
            tx = req.sys_flag & message.TX_MASK
            if tx not in (PREPARED, ROLLBACK):
                tag = string_hash(props["TAGS"]) if props.get("TAGS") else 0
                delay = int(props.get("DELAY", "0"))
                if req.topic == "SCHEDULE_TOPIC_XXXX" and delay > 0:
                    tag = rec.store_ts + levels[min(delay, len(levels)) - 1]
                expect_queue.setdefault((req.topic, req.queue_id), []).append((phys, rec.total_size, tag))
            if tx != ROLLBACK:
                keys = [props["UNIQ_KEY"]] + [k for k in props.get("KEYS", "").split(" ") if k]
                expect_keys += [(f"{req.topic}#{k}", phys, rec.store_ts) for k in keys]

        last = message.decode_record(bytes(view.record(results[-1].phys_offsets[0])))
        assert int(sh.control[C.DISPATCHED_TS]) == last.store_ts
        for (topic, qid), want in expect_queue.items():
            got = view.entries(topic, qid, 0, 1000)
            assert [(int(e["phys"]), int(e["size"]), int(e["tags"])) for e in got] == want, (topic, qid)
        assert view.entries("Aa", 0, 0, 1000)[0]["phys"] != view.entries("BB", 0, 0, 1000)[0]["phys"]

        idx = indexfile.IndexFile(indexfile.list_index_files(cfg.index_dir)[-1], cfg.maxHashSlotNum,
                                  cfg.maxIndexNum, False).open()
        assert idx.h("index_count") == len(expect_keys) + 1
        entries = idx.entries[1:len(expect_keys) + 1]
        assert entries["phys"].tolist() == [p for _, p, _ in expect_keys]     # record order kept
        assert entries["hash"].tolist() == [index_key_hash(k) for k, _, _ in expect_keys]
        begin = idx.h("begin_ts")
        assert entries["time_diff"].tolist() == [(ts - begin) // 1000 for _, _, ts in expect_keys]
        for key, phys, _ in expect_keys[::7]:
            assert phys in idx.lookup(index_key_hash(key), 0, 1 << 62, 64)
        idx.mf.close()
        view.close()


def test_pace_pauses_only_when_no_long_poll_waits_and_the_pass_caught_up(tmp_path):
    from rocketbox.shm.layout import S
    cfg = small_config(tmp_path / "store", "pace")
    with running_store(cfg) as (sh, w, d, c):
        c.submit([PutRequest("TBW102", 0, [b"x"], [{}])])
        w.step()
        assert d.step() and not d.short

        def paused(**state) -> float:
            d.short = state.get("short", False)
            sh.slots[0, S.DISPATCH_WAIT] = state.get("waiting", 0)
            t0 = time.monotonic()
            d._pace(t0 + 0.3)
            return time.monotonic() - t0

        assert paused() >= 0.25                      # under load: let writes gather
        assert paused(waiting=1) < 0.1               # a parked long poll wants the next write now
        assert paused(short=True) < 0.1              # catching up with a backlog: no pause


@PATHS
def test_a_record_with_a_damaged_queue_offset_is_put_at_its_queues_next_offset(tmp_path, few_records, caplog):
    """A record whose QUEUEOFFSET says 7 after 0 (a flipped header byte the body CRC does not cover)
    does not stop dispatch: the pass is redone record by record, the record goes to its queue's next
    offset without index keys (logged with its offset, counted), and the queue goes on densely."""
    cfg = small_config(tmp_path / "store", "gap")
    with running_store(cfg) as (sh, w, d, c):
        d.few_records = few_records
        t = c.submit([PutRequest("TBW102", 1, [b"m%d" % i], [{}]) for i in range(3)])
        w.step()
        phys = [r.phys_offsets[0] for r in c.collect(t, 1)]
        mf = w.commitlog.file_for(phys[1])
        at = phys[1] - mf.start + message.QUEUE_OFFSET_AT
        mf.mm[at:at + 8] = (7).to_bytes(8, "big")        # a record claiming queue offset 7 after 0
        assert d.guarded_turn() == 0 and int(sh.control[C.DISPATCHED]) == int(sh.control[C.WRITTEN])
        view = StoreView(cfg, sh).open()
        assert [int(e["phys"]) for e in view.entries("TBW102", 1, 0, 10)] == phys
        view.close()
        assert (int(sh.control[C.DISPATCH_UNINDEXED]), int(sh.control[C.DISPATCH_UNQUEUED])) == (1, 0)
        assert f"record at CommitLog offset {phys[1]} says queue offset 7" in caplog.text


@PATHS
def test_a_record_that_fails_is_queued_without_index_keys_and_one_of_no_queue_is_left_out(
        tmp_path, few_records, caplog, monkeypatch):
    """Whatever a pass raises, dispatch goes on: a fault injected into one topic's index keys (every
    record of "Poison" raises in both paths) leaves those records consumable without keys, the
    others of the same pass fully dispatched; a record for a queue the writer never registered (its
    QUEUEID flipped) is left out; each is logged with its offset and counted, nothing raises."""
    from rocketbox.dispatcher.service import DispatcherService
    real = DispatcherService._key_seed

    def poisoned(self, topic):
        if topic == b"Poison":
            raise ValueError("injected: this topic's keys cannot be hashed")
        return real(self, topic)

    monkeypatch.setattr(DispatcherService, "_key_seed", poisoned)
    cfg = small_config(tmp_path / "store", "contain")
    with running_store(cfg) as (sh, w, d, c):
        d.few_records = few_records
        w.topics.upsert(topic_config("Poison", 2, 2))
        reqs = [PutRequest(("Poison", "TBW102")[i % 2], 0, [b"m%d" % i],
                           [{"TAGS": "T", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"}]) for i in range(60)]
        t = c.submit(reqs)
        while w.step():
            pass
        phys = [r.phys_offsets[0] for r in c.collect(t, 1)]
        stray = phys[-1]                                   # TBW102's last record: queue 9 does not exist
        mf = w.commitlog.file_for(stray)
        at = stray - mf.start + message.QUEUE_ID_AT
        mf.mm[at:at + 4] = (9).to_bytes(4, "big")
        assert d.guarded_turn() == 0 and int(sh.control[C.DISPATCHED]) == int(sh.control[C.WRITTEN])
        assert (int(sh.control[C.DISPATCH_UNINDEXED]), int(sh.control[C.DISPATCH_UNQUEUED])) == (30, 1)
        view = StoreView(cfg, sh).open()
        poison = view.entries("Poison", 0, 0, 100)
        assert [int(e["phys"]) for e in poison] == phys[0::2]
        assert set(poison["tags"].tolist()) == {string_hash("T")}
        assert [int(e["phys"]) for e in view.entries("TBW102", 0, 0, 100)] == phys[1:-1:2]
        view.close()
        idx = indexfile.IndexFile(indexfile.list_index_files(cfg.index_dir)[-1], cfg.maxHashSlotNum,
                                  cfg.maxIndexNum, False).open()
        for i in range(1, 59, 2):                          # the others are indexed by key and UNIQ_KEY
            assert phys[i] in idx.lookup(index_key_hash(f"TBW102#k{i}"), 0, 1 << 62, 64)
            assert phys[i] in idx.lookup(index_key_hash(f"TBW102#U{i}"), 0, 1 << 62, 64)
        assert idx.h("index_count") == 1 + 2 * 29
        idx.mf.close()
        for p in phys[0::2]:
            assert f"record at CommitLog offset {p} cannot be dispatched (ValueError: injected" in caplog.text
        assert f"record at CommitLog offset {stray} cannot be dispatched" in caplog.text
        assert "left out; it stays in the CommitLog" in caplog.text
        assert d.step() is False                            # nothing replays


def test_a_dispatcher_out_of_descriptors_waits_says_so_once_and_catches_up(tmp_path, caplog, monkeypatch):
    """The process's descriptor limit is lowered under it (real EMFILE from open and mmap): the
    pass fails, ``dispatched`` stays, it is said once however often it is tried, and once files can
    be opened again every queue gets its entries (the pass redone, nothing twice)."""
    import resource

    from rocketbox.shm import role
    from rocketbox.store import consumequeue
    from rocketbox.store.consumequeue import ConsumeQueue
    monkeypatch.setattr(role, "WAIT_OUT_S", 0.0)
    monkeypatch.setattr(consumequeue.OPEN_FILES, "budget", 1000)     # more files than the lowered limit allows
    cfg = small_config(tmp_path / "store", "df", shmQueueSlots=256)
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Wide", 64, 64))
        ticket = c.submit([PutRequest("Wide", q, [b"q%d" % q], [{}]) for q in range(64)])
        while w.step():
            pass
        assert all(r.ok for r in c.collect(ticket, 1))
        before = int(sh.control[C.DISPATCHED])
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 6, hard))
        try:
            assert [d.guarded_turn() for _ in range(3)] == [None] * 3
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert int(sh.control[C.DISPATCHED]) == before
        assert caplog.text.count("no descriptor or mapping left for a file") == 1
        assert "Too many open files" in caplog.text
        while d.guarded_turn() == 0:
            pass
        assert int(sh.control[C.DISPATCHED]) == int(sh.control[C.WRITTEN])
        assert "no descriptor or mapping left for a file: over after" in caplog.text
        for q in range(64):
            cq = ConsumeQueue(cfg.root, "Wide", q, cfg.mappedFileSizeConsumeQueue // 20 * 20, False).load()
            assert cq.max_offset == 1, q
            cq.close()


def test_a_dispatcher_that_died_between_a_records_keys_puts_them_all_again(tmp_path):
    """A pass fills an IndexFile between two keys of one record, and the dispatcher dies before the
    next file is made (before it says ``dispatched``): started again, it puts that record's keys
    again, every one (the end_phys skip alone would step over the record and lose its second key)."""
    from rocketbox.dispatcher.service import DispatcherService
    cfg = small_config(tmp_path / "store", "x", mappedFileSizeCommitLog=1 << 20, maxIndexNum=6, maxHashSlotNum=8)
    with running_store(cfg) as (sh, w, d, c):
        reqs = [PutRequest("TBW102", 0, [b"m%d" % i], [{"UNIQ_KEY": f"U{i}", "KEYS": f"k{i}"}]) for i in range(3)]
        ticket = c.submit(reqs)
        while w.step():
            pass
        results = c.collect(ticket, 1)
        assert all(r.ok for r in results)
        d.step()
        files = indexfile.list_index_files(cfg.index_dir)
        assert len(files) == 2                 # 5 keys a file: the third record's U2 in the first, k2 in the second
        third = results[2].phys_offsets[0]
        # what a dispatcher killed after U2 and before the second file leaves: no second file, and
        # ``dispatched`` still before the pass (here: before the third record, done again from there)
        d.close()
        os.unlink(files[1])
        sh.control[C.DISPATCHED] = third
        again = DispatcherService(cfg, sh).open()
        try:
            again.step()
            assert int(sh.control[C.DISPATCHED]) == int(sh.control[C.WRITTEN])
        finally:
            again.close()
        for i, r in enumerate(results):
            for key in (f"U{i}", f"k{i}"):
                found = indexfile.find(cfg.index_dir, f"TBW102#{key}", cfg.maxHashSlotNum, cfg.maxIndexNum)
                assert r.phys_offsets[0] in found, (key, found)
