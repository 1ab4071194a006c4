"""Writer and dispatcher driven by ``step()`` in this process, on real shared memory and files:
queue offsets, physical offsets, file roll with a BLANK filler, refusal codes, journal replay."""
import itertools
import os
import struct

import numpy as np
import pytest

from rocketbox.appliance.check import check
from rocketbox.shm import protocol as P
from rocketbox.shm.layout import C, S
from rocketbox.shm.ringclient import PutRequest
from rocketbox.store import message, topicjournal
from rocketbox.writer.service import WriterService
from rocketbox.writer.topics import topic_config
from tests.unit.store.test_mappedfile import mappings
from tests.unit.writer.rig import running_store, small_config


@pytest.fixture
def rig(tmp_path):
    cfg = small_config(tmp_path / "store", "u")
    with running_store(cfg) as (sh, w, d, c):
        yield cfg, sh, w, d, c


def put(w, c, reqs):
    """Submit in chunks that fit the request ring (no writer process drains it meanwhile)."""
    out = []
    for i in range(0, len(reqs), 20):
        ticket = c.submit(reqs[i:i + 20])
        while w.step():
            pass
        out += c.collect(ticket, timeout=1)
    return out


def test_offsets_roll_and_blank(rig):
    cfg, sh, w, d, c = rig
    body = b"b" * 3000
    res = put(w, c, [PutRequest("TBW102", i % 2, [body], [{"UNIQ_KEY": f"K{i:03d}"}]) for i in range(90)])
    # the records and the BLANK went in through the files' descriptors: the writer's own mapping of
    # every file (the one it rolled to too) holds no page
    assert len(w.commitlog.files) >= 2
    for mf in w.commitlog.files:
        assert [rss for flags, rss in mappings(mf.path) if "wr" in flags] == [0]
    assert [r.queue_offset for r in res[:6]] == [0, 0, 1, 1, 2, 2]
    assert all(r.ok for r in res)
    sizes = [r.end_offset - r.phys_offsets[0] for r in res]
    assert len(set(sizes)) == 1
    per_file = (cfg.mappedFileSizeCommitLog - 8) // sizes[0]
    assert res[per_file].phys_offsets[0] == cfg.mappedFileSizeCommitLog         # rolled to file 2
    blank_at = res[per_file - 1].end_offset
    mf = w.commitlog.file_for(blank_at)
    size, magic = struct.unpack_from(">ii", mf.mm, blank_at - mf.start)
    assert magic == message.BLANK_MAGIC and size == cfg.mappedFileSizeCommitLog - blank_at
    while d.step():
        pass
    assert int(sh.control[C.DISPATCHED]) == int(sh.control[C.WRITTEN]) == res[-1].end_offset
    assert check(cfg).clean


def test_batch_gets_consecutive_offsets_and_refusals_write_nothing(rig):
    cfg, sh, w, d, c = rig
    before = int(sh.control[C.WRITTEN])
    bad = put(w, c, [PutRequest("NoSuchTopic", 0, [b"x"], [{}]), PutRequest("TBW102", 99, [b"x"], [{}]),
                     PutRequest("TBW102", 0, [b"x" * 5000], [{}]), PutRequest("bad topic", 0, [b"x"], [{}]),
                     PutRequest("TBW102", 0, [b"x"], [{"k": "v" * 40000}])])
    assert [r.status for r in bad] == [17, 1, 13, 1, 13]
    assert int(sh.control[C.WRITTEN]) == before
    b = put(w, c, [PutRequest("TBW102", 3, [b"a", b"b", b"c"], [{}, {}, {}])])[0]
    assert b.ok and b.queue_offset == 0 and len(b.phys_offsets) == 3
    r = put(w, c, [PutRequest("TBW102", 3, [b"d"], [{}])])[0]
    assert r.queue_offset == 3


def test_writer_rechecks_records_it_is_handed(rig):
    """A slab whose record claims another size (a broken producer) is refused, not stored."""
    cfg, sh, w, d, c = rig
    arr, sizes, recs, _ = c.encode([PutRequest("TBW102", 0, [b"ok"], [{}])])
    broken = bytearray(recs)
    broken[0:4] = struct.pack(">i", len(recs) + 8)
    t = c.submit_encoded(arr, sizes, bytes(broken))
    w.step()
    assert c.collect(t, 1)[0].status == P.MESSAGE_ILLEGAL
    assert int(sh.control[C.WRITTEN]) == 0


def test_only_the_requests_holding_a_broken_record_are_refused(rig):
    """One slab: a good single, a batch with a record whose MAGIC is wrong, a good single, a single
    whose TOTALSIZE is wrong, a good batch.  The broken two are refused whole, the rest stored with
    dense queue offsets."""
    cfg, sh, w, d, c = rig
    reqs = [PutRequest("TBW102", 0, [b"a"], [{}]), PutRequest("TBW102", 0, [b"b1", b"b2", b"b3"], [{}] * 3),
            PutRequest("TBW102", 0, [b"c"], [{}]), PutRequest("TBW102", 0, [b"d"], [{}]),
            PutRequest("TBW102", 0, [b"e1", b"e2"], [{}] * 2)]
    arr, sizes, recs, _ = c.encode(reqs)
    starts = [0, *itertools.accumulate(int(z) for z in sizes)]
    broken = bytearray(recs)
    broken[starts[2] + 4:starts[2] + 8] = b"\0\0\0\0"                          # the batch's 2nd record: MAGIC
    broken[starts[5]:starts[5] + 4] = struct.pack(">i", int(sizes[5]) + 1)     # the 4th request: TOTALSIZE
    t = c.submit_encoded(arr, sizes, bytes(broken))
    while w.step():
        pass
    got = c.collect(t, 1)
    assert [r.status for r in got] == [P.SUCCESS, P.MESSAGE_ILLEGAL, P.SUCCESS, P.MESSAGE_ILLEGAL, P.SUCCESS]
    assert [r.queue_offset for r in got if r.ok] == [0, 1, 2]
    while d.step():
        pass
    assert check(cfg).records == 4


def test_journal_releases_rings_of_a_committed_batch(rig):
    """Killed after the commit point but before releasing: the next writer must not append again."""
    cfg, sh, w, d, c = rig
    c.submit([PutRequest("TBW102", 0, [b"once"], [{}])])
    ring = sh.request_rings[c.slot]
    real_release = ring.release
    ring.release = lambda upto: None          # the 'crash': rings never released
    w.step()
    ring.release = real_release
    assert ring.used() > 0 and int(sh.control[C.JOURNAL_WRITTEN]) == int(sh.control[C.WRITTEN])
    assert int(sh.slots[c.slot, S.JOURNAL_READ_POS]) == ring.write_pos
    while d.step():
        pass
    w.close()
    w2 = WriterService(cfg, sh).open()
    assert ring.used() == 0
    assert not w2.step()
    assert check(cfg).records == 1
    w2.close()


def push_raw(c, req, sizes, records):
    """What a broken producer would do: a hand-built slab straight into the ring."""
    return c.push_slab(req, sizes, records)


def test_malformed_slabs_are_refused_and_the_writer_lives_on(rig):
    """Tiny records, counts that disagree with sizes, an empty slab, a corrupt ring entry."""
    import numpy as np
    cfg, sh, w, d, c = rig
    req = np.zeros(1, P.REQUEST)
    req[0] = (0, 1, 0, 0, 1, 0, 0)
    t = push_raw(c, req, np.array([5], "<u4"), b"tiny!")
    w.step()
    assert c.collect(t, 1)[0].status == P.MESSAGE_ILLEGAL
    req[0] = (0, 1, 0, 0, 3, 0, 0)                          # says 3 records, carries 1
    _arr, sizes, recs, _ = c.encode([PutRequest("TBW102", 0, [b"x"], [{}])])
    t = push_raw(c, req, sizes, recs)
    w.step()
    assert c.collect(t, 1)[0].status == P.SYSTEM_ERROR
    push_raw(c, np.zeros(0, P.REQUEST), np.zeros(0, "<u4"), b"")
    assert w.step()
    ring = sh.request_rings[c.slot]
    assert ring.try_push(P.PUT, [b"\0" * 16])
    ring.data[(ring.write_pos - 24) % ring.capacity:][:4] = 0
    w.step()                                              # logged, the ring's entries dropped
    assert ring.used() == 0
    assert int(sh.control[C.WRITTEN]) == 0
    assert put(w, c, [PutRequest("TBW102", 0, [b"fine"], [{}])])[0].ok


def test_many_tiny_requests_are_split_so_every_reply_fits(tmp_path):
    cfg = small_config(tmp_path / "store", "r", ringResponseBytes=64 * 1024)   # 256 replies per slab
    with running_store(cfg) as (sh, w, d, c):
        n = 1000
        ticket = c.submit([PutRequest("TBW102", i % 4, [b"t"], [{}]) for i in range(n)])
        assert sh.request_rings[c.slot].used() > 0
        while w.step():           # the writer only takes what the 64 KiB reply ring can answer
            c.poll()
        res = c.collect(ticket, 1)
        assert all(r.ok for r in res)
        assert sorted(r.queue_offset for r in res if r.queue_id == 0) == list(range(n // 4))


def test_a_writer_restart_answers_what_the_old_writer_had_not_taken(rig):
    """Slabs still in the ring when the writer restarts (or before it first opens) are the new
    writer's to answer: acknowledged once, stored once, never reported as unknown (which would
    make a client retry and store them twice)."""
    cfg, sh, w, d, c = rig
    ticket = c.submit([PutRequest("TBW102", 0, [b"a"], [{}]), PutRequest("TBW102", 1, [b"b", b"c"], [{}, {}])])
    w.close()                                              # never took the slab
    w2 = WriterService(cfg, sh).open()                     # a new writer epoch
    c.check_writer()
    assert not ticket.done
    while w2.step():
        pass
    res = c.collect(ticket, 1)
    assert [r.status for r in res] == [P.SUCCESS] * 2
    assert put(w2, c, [PutRequest("TBW102", 0, [b"d"], [{}])])[0].ok
    while d.step():
        pass
    assert check(cfg).records == 4
    w2.close()


def test_a_topic_the_new_writer_took_and_has_not_answered_yet_is_not_reported_lost(rig):
    """A client that saw the writer's epoch change only after the new writer took its TOPIC entry
    (readers open before the writer does): the entry is the new writer's, answered once
    topics.json has the topic, not failed as taken by the old one."""
    cfg, sh, w, d, c = rig
    w.close()
    rid = c.push_topic(topic_config("Early", 1, 1))
    w2 = WriterService(cfg, sh).open()                     # a new writer epoch
    assert w2.step()                                       # taken and released, its write under way
    c.check_writer()
    assert c.topic_replies[rid] is None
    w2.topics.file.wait_idle()
    assert w2.step()
    c.poll()
    assert c.topic_replies[rid].status == P.SUCCESS
    w2.close()


def test_a_writer_restart_fails_what_the_old_writer_took_but_never_answered_as_unknown(rig):
    """The old writer committed a slab and died before its reply and its ring release: the new
    writer releases it (journal) without an answer, so the ticket says 'outcome unknown' instead
    of hanging, and the client goes on with the new writer."""
    cfg, sh, w, d, c = rig
    ticket = c.submit([PutRequest("TBW102", 0, [b"a"], [{}]), PutRequest("TBW102", 1, [b"b", b"c"], [{}, {}])])
    ring, replies = sh.request_rings[c.slot], sh.response_rings[c.slot]
    ring.release, replies.try_push = (lambda upto: None), (lambda *a: True)    # the 'crash' after the commit
    w.step()
    del ring.release, replies.try_push
    while d.step():
        pass
    w.close()
    w2 = WriterService(cfg, sh).open()                     # a new writer epoch; releases the committed slab
    res = c.collect(ticket, 1)
    assert [r.status for r in res] == [P.SYSTEM_ERROR] * 2
    assert all("outcome unknown" in r.remark for r in res)
    assert put(w2, c, [PutRequest("TBW102", 0, [b"d"], [{}])])[0].ok
    while d.step():
        pass
    assert check(cfg).records == 4                         # the unknown outcome was in fact stored
    w2.close()


def test_a_write_that_fails_commits_nothing_and_the_next_writer_stores_it_once(rig):
    """The disk refuses a pass's write (EIO; here EBADF from a read-only descriptor): the pass
    raises out of ``step``, as a writer process dies of it, with nothing committed, answered or
    released; the next writer appends the same slab, once, and answers it."""
    cfg, sh, w, d, c = rig
    assert put(w, c, [PutRequest("TBW102", 0, [b"first"], [{}])])[0].ok
    written = int(sh.control[C.WRITTEN])
    mf = w.commitlog.file_for_write(written)
    os.close(mf.fd)
    mf.fd = os.open(mf.path, os.O_RDONLY)                     # every pwrite now fails
    ticket = c.submit([PutRequest("TBW102", 1, [b"second"], [{}]), PutRequest("TBW102", 0, [b"third"], [{}])])
    with pytest.raises(OSError):
        w.step()
    assert int(sh.control[C.WRITTEN]) == written and sh.request_rings[c.slot].used() > 0
    assert not ticket.done
    while d.step():                                           # what a new writer waits for
        pass
    w.close()
    w2 = WriterService(cfg, sh).open()
    while w2.step():
        pass
    res = c.collect(ticket, 1)
    assert [(r.status, r.queue_offset) for r in res] == [(P.SUCCESS, 0), (P.SUCCESS, 1)]
    assert res[0].phys_offsets[0] == written
    while d.step():
        pass
    assert check(cfg).records == 3
    w2.close()


def test_the_few_requests_path_writes_what_the_vector_path_writes(tmp_path, monkeypatch, put_path):
    """The same passes through both paths: identical CommitLog bytes (store timestamps aside),
    offsets and replies, across batches, transaction records, runs of single sends, refusals and
    file rolls."""
    from rocketbox.writer import append
    if put_path == "few":
        pytest.skip("compares both paths itself")

    def passes():
        out = []
        for i in range(120):
            tx = (0, message.TX_PREPARED, message.TX_ROLLBACK, message.TX_COMMIT)[i % 4] if i % 3 == 0 else 0
            reqs = [PutRequest("TBW102", i % 3, [b"m%d-%d" % (i, k) * 150 for k in range(1 + i % 4)],
                               [{"UNIQ_KEY": f"U{i}-{k}"} for k in range(1 + i % 4)], sys_flag=tx, born_ts=1000 + i)]
            if i % 7 == 0:
                reqs += [PutRequest("TBW102", 99, [b"x"], [{}]), PutRequest("NoSuchTopic", 0, [b"x"], [{}])]
            if i % 5 == 0:                      # a run of single sends: one copy on the few path, unless a file rolls
                reqs += [PutRequest("TBW102", k % 3, [b"s%d-%d" % (i, k) * 90], [{"UNIQ_KEY": f"S{i}-{k}"}], born_ts=7 + k)
                         for k in range(7)]
            out.append(reqs)
        return out

    stores = []
    for name, few in (("v", 0), ("f", 10**6)):
        monkeypatch.setattr(append, "FEW_REQUESTS", few)
        cfg = small_config(tmp_path / name, "eq" + name)
        with running_store(cfg) as (sh, w, d, c):
            replies = []
            for reqs in passes():
                replies += [(r.status, r.queue_id, r.queue_offset, r.phys_offsets, r.end_offset) for r in put(w, c, reqs)]
            written = int(sh.control[C.WRITTEN])
            log = bytearray()
            for start in range(0, written, cfg.mappedFileSizeCommitLog):
                mf = w.commitlog.file_for(start)
                log += bytes(mf.mm[:min(cfg.mappedFileSizeCommitLog, written - start)])
        pos = 0
        while pos < len(log):                   # store timestamps differ between the runs
            size, magic = struct.unpack_from(">ii", log, pos)
            if magic == message.BLANK_MAGIC:
                pos += size
                continue
            sys_flag = struct.unpack_from(">i", log, pos + message.SYSFLAG_AT)[0]
            at = pos + message.store_ts_at(sys_flag)
            log[at:at + 8] = bytes(8)
            pos += size
        stores.append((replies, bytes(log), written))
    (rv, lv, wv), (rf, lf, wf) = stores
    assert wv == wf > 128 * 1024                  # past the first file: a roll happened
    assert rv == rf and sum(r[0] == P.SUCCESS for r in rv) == 120 + 24 * 7
    assert lv == lf


def test_struct_built_slabs_and_results_are_the_numpy_bytes(put_path):
    rows = [(11, 0, 3, 0, 1, 1, 0), (12, 2, 1, 0x10, 3, 0, 0)]
    sizes, records = [100, 120, 130, 140], bytes(range(256)) * 2
    arr = np.array(rows, dtype=P.REQUEST)
    assert b"".join(P.slab_bytes(rows, sizes, records, 1234567)) == b"".join(
        bytes(memoryview(p).cast("B")) for p in P.slab_parts(arr, np.array(sizes, dtype="<u4"), records, 1234567))
    results = [(11, 0, 3, 7, 1000, 1100, 123456789, 1, 0), (12, 13, 1, 0, 0, 0, 0, 3, 0)]
    head = np.zeros(1, P.RESULT_HEAD)
    head[0] = (2, 4)
    assert b"".join(P.result_bytes(results, [1000, -1, -1, -1])) == (
        head.tobytes() + np.array(results, dtype=P.RESULT).tobytes() + np.array([1000, -1, -1, -1], "<i8").tobytes())


def test_a_full_queue_table_refuses_first_writes_to_new_queues_and_the_writer_lives_on(tmp_path):
    cfg = small_config(tmp_path / "store", "qf", shmQueueSlots=16)
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Q", 20, 20))
        taken = int(sh.control[C.QUEUE_COUNT])                 # slots boot recovery already gave out
        res = put(w, c, [PutRequest("Q", q, [b"m%d" % q], [{}]) for q in range(20)])
        room = 16 - taken
        assert [r.status for r in res] == [P.SUCCESS] * room + [P.QUEUES_FULL] * (20 - room)
        assert int(sh.control[C.QUEUE_COUNT]) == 16
        written = int(sh.control[C.WRITTEN])
        assert written == res[room - 1].end_offset             # nothing of the refused ones stored
        again = put(w, c, [PutRequest("Q", 3, [b"again"], [{}]), PutRequest("Q", 19, [b"x"], [{}])])
        assert [(r.status, r.queue_offset) for r in again] == [(P.SUCCESS, 1), (P.QUEUES_FULL, 0)]
        assert int(sh.control[C.WRITTEN]) == again[0].end_offset > written


def test_the_writer_refuses_a_topic_past_maxTopicQueueNums_and_makes_none_of_its_directories(rig):
    """Its own check, whatever a reader let through: each queue is a directory made with the topic."""
    cfg, sh, w, d, c = rig
    count = int(sh.control[C.TOPIC_COUNT])
    rid = c.push_topic(topic_config("Huge", 2**31 - 1, 1))
    while w.step():
        pass
    c.poll()
    assert c.topic_replies.pop(rid).status == P.SYSTEM_ERROR
    assert int(sh.control[C.TOPIC_COUNT]) == count and "Huge" not in w.topics.configs
    assert not os.path.exists(os.path.join(cfg.root, "consumequeue", "Huge"))
    rid = c.push_topic(topic_config("Wide", cfg.maxTopicQueueNums, 1))
    while w.step():
        pass
    w.topics.file.wait_idle()
    assert w.step()                    # topics.json has it: published and answered
    c.poll()
    assert c.topic_replies.pop(rid).status == P.SUCCESS
    wide = os.path.join(cfg.root, "consumequeue", "Wide")
    assert sorted(os.listdir(wide), key=int) == [str(q) for q in range(cfg.maxTopicQueueNums)]   # each queue's, empty
    assert not any(os.listdir(os.path.join(wide, q)) for q in os.listdir(wide))


def test_a_topic_is_answered_once_topics_json_has_it_and_sends_meanwhile_are_not_held(rig):
    """The writer hands topics.json to its thread and goes on: a send behind three creations in
    the same pass is answered in that pass; the topics are published and answered at a later one,
    after the file has them, under a dataVersion three higher."""
    cfg, sh, w, d, c = rig
    count, version = int(sh.control[C.TOPIC_COUNT]), int(sh.control[C.TOPICS_DATA_VERSION])
    rids = [c.push_topic(topic_config(f"Made{i}", 2, 2)) for i in range(3)]
    ticket = c.submit([PutRequest("TBW102", 0, [b"meanwhile"], [{}])])
    assert w.step()
    assert [r.status for r in c.collect(ticket, 1)] == [P.SUCCESS]
    assert [c.topic_replies[r] for r in rids] == [None] * 3
    assert int(sh.control[C.TOPIC_COUNT]) == count          # not published before the file has them
    w.topics.file.wait_idle()
    assert w.step()
    c.poll()
    assert [(c.topic_replies[r].status, c.topic_replies[r].queue_id) for r in rids] == \
        [(P.SUCCESS, count), (P.SUCCESS, count + 1), (P.SUCCESS, count + 2)]
    assert int(sh.control[C.TOPIC_COUNT]) == count + 3
    assert int(sh.control[C.TOPICS_DATA_VERSION]) == version + 3
    saved = topicjournal.read(cfg.config_dir)                 # topics.json with its journal
    assert saved["dataVersion"]["counter"] == version + 3
    assert {f"Made{i}" for i in range(3)} <= set(saved["topicConfigTable"])
    assert all(os.path.isdir(os.path.join(cfg.root, "consumequeue", f"Made{i}")) for i in range(3))


def test_a_topic_whose_queue_directory_cannot_be_made_is_refused_and_the_file_never_names_it(rig):
    """The directories come before topics.json: when one cannot be made (here a file stands where
    the topic's must go) the creation is refused, the file is not written, and the directories made
    for it are gone again; the topic made with it in the same write is refused too, and a later
    one goes through."""
    cfg, sh, w, d, c = rig
    path = os.path.join(cfg.config_dir, "topics.json")
    before, count = open(path, "rb").read(), int(sh.control[C.TOPIC_COUNT])
    with open(os.path.join(cfg.root, "consumequeue", "Blocked"), "wb"):
        pass
    rids = [c.push_topic(topic_config(name, 2, 2)) for name in ("Along", "Blocked")]
    assert w.step()
    w.topics.file.wait_idle()
    w.step()
    c.poll()
    assert [c.topic_replies[r].status for r in rids] == [P.SYSTEM_ERROR] * 2
    assert open(path, "rb").read() == before and int(sh.control[C.TOPIC_COUNT]) == count
    assert "Along" not in w.topics.configs and "Blocked" not in w.topics.configs
    assert not os.path.exists(os.path.join(cfg.root, "consumequeue", "Along"))
    assert os.path.isfile(os.path.join(cfg.root, "consumequeue", "Blocked"))   # only what was there
    rid = c.push_topic(topic_config("Later", 1, 1))
    w.step()
    w.topics.file.wait_idle()
    w.step()
    c.poll()
    assert c.topic_replies[rid].status == P.SUCCESS
    table = topicjournal.read(cfg.config_dir)["topicConfigTable"]
    assert "Later" in table and "Along" not in table and "Blocked" not in table


def test_new_queues_taken_on_either_path_get_dense_offsets_on_the_other(tmp_path, monkeypatch, put_path):
    """Queues first written on the few-requests path reach the vector path's sorted keys later, in
    one merge: passes that switch paths, each bringing new queues and writing old ones, give every
    queue the offsets 0, 1, 2, ... in order."""
    from rocketbox.writer import append
    if put_path == "few":
        pytest.skip("switches paths itself")
    cfg = small_config(tmp_path, "nq", shmQueueSlots=512)
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Spread", 200, 200))
        sent: dict[int, int] = {}
        for i in range(24):
            monkeypatch.setattr(append, "FEW_REQUESTS", 10**6 if i % 2 else 0)
            queues = [i * 8 + k for k in range(8)] + [k * 7 % (i * 8 + 1) for k in range(6)]   # new, then old
            got = put(w, c, [PutRequest("Spread", q, [b"%d-%d" % (q, i)], [{}]) for q in queues])
            for q, r in zip(queues, got):
                assert r.status == P.SUCCESS and r.queue_offset == sent.get(q, 0), (i, q, r.queue_offset)
                sent[q] = sent.get(q, 0) + 1
        while d.step():                                      # the dispatcher publishes each queue's max offset
            pass
        table = {(bytes(sh.views["queue_names"][s]).decode(), int(sh.views["queue_ids"][s])): int(sh.views["queue_max"][s])
                 for s in range(sh.queue_count())}
        assert all(table[("Spread", q)] == n for q, n in sent.items())
