"""spark/storefiles.py against a store written by the in-process writer and dispatcher: planning
finds each queue's bounds and the offset at a time, and a queue's slice comes back as an Arrow
batch whose every column matches the stored record, decoded the slow way."""
import ipaddress
import time
import zlib

import numpy as np
import pytest

from rocketbox.appliance.inprocess import running_store, small_config
from rocketbox.shm.layout import C
from rocketbox.shm.ringclient import PutRequest
from rocketbox.spark import storefiles
from rocketbox.store import message
from rocketbox.writer.topics import topic_config
from tests.unit.scheduler.test_scheduler import _writer_thread


def _put(w, d, c, reqs):
    """Put and dispatch ``reqs`` (the writer and dispatcher stepped in a thread meanwhile)."""
    with _writer_thread(w, d):
        results = c.put(reqs)
        deadline = time.monotonic() + 10
        while d.sh.control[C.DISPATCHED] < d.sh.control[C.WRITTEN] and time.monotonic() < deadline:
            time.sleep(0.01)
    return results


def test_a_queue_slice_reads_back_field_by_field(tmp_path):
    cfg = small_config(tmp_path / "store", "sf")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Sparked", 2, 2))
        reqs = [PutRequest("Sparked", i % 2, [b"body-%d" % i * (1 + i % 5)],
                           [{"TAGS": f"T{i % 3}", "KEYS": f"k{i} shared", "UNIQ_KEY": f"U{i:04d}", "EMPTY": ""}],
                           born_ts=1_700_000_000_000 + i) for i in range(40)]
        compressed = zlib.compress(b"z" * 500)
        reqs.append(PutRequest("Sparked", 0, [compressed], [{"TAGS": "Z"}], sys_flag=message.COMPRESSED))
        results = _put(w, d, c, reqs)
        assert all(r.ok for r in results)
        store = storefiles.Store(cfg.root)
        assert "Sparked" in store.topics() and store.queues("Sparked") == [0, 1]
        assert store.bounds("Sparked", 0) == (0, 21) and store.bounds("Sparked", 1) == (0, 20)
        batch = storefiles.read_batch(cfg.root, "Sparked", 0, 0, 21).to_pylist()
        assert [r["queueOffset"] for r in batch] == list(range(21))
        for row, res in zip(batch, [r for r in results if r.queue_id == 0]):
            rec = message.decode_record(bytes(open(f"{cfg.commitlog_dir}/{0:020d}", "rb").read()[res.phys_offsets[0]:]))
            assert row["physicalOffset"] == res.phys_offsets[0] and row["msgId"] == rec.msg_id
            assert row["storeTimestamp"].timestamp() * 1000 == rec.store_ts and row["bornTimestamp"].timestamp() * 1000 == rec.born_ts
            assert row["bornHost"] == f"{ipaddress.ip_address(rec.born_ip)}:{rec.born_port}"
            assert row["storeHost"] == f"{ipaddress.ip_address(rec.store_ip)}:{rec.store_port}"
            assert dict(row["properties"]) == {k: v for k, v in rec.properties.items() if v}
            assert row["tags"] == rec.properties.get("TAGS") and row["keys"] == rec.properties.get("KEYS")
            assert row["uniqKey"] == rec.properties.get("UNIQ_KEY") and row["sysFlag"] == rec.sys_flag
            assert row["bodyCRC"] == rec.body_crc and row["reconsumeTimes"] == rec.reconsume_times
            assert row["body"] == (zlib.decompress(rec.body) if rec.sys_flag & message.COMPRESSED else rec.body)
            assert row["topic"] == "Sparked" and row["queueId"] == 0
        assert batch[-1]["body"] == b"z" * 500 and batch[-1]["tags"] == "Z" and batch[0]["keys"] == "k0 shared"
        mid = batch[10]["storeTimestamp"].timestamp() * 1000
        assert store.offset_at_time("Sparked", 0, int(mid), 0, 21) <= 10
        assert storefiles.read_batch(cfg.root, "Sparked", 1, 5, 8).num_rows == 3
        time.sleep(0.01)
        _put(w, d, c, [PutRequest("Sparked", 1, [b"later"], [{}]) for _ in range(3)])      # stored after ``mid``
        assert store.bounds("Sparked", 1) == (0, 23)
        cut = storefiles.read_batch(cfg.root, "Sparked", 1, 0, 23, flushed_ts=int(mid))   # the flushed prefix
        assert cut.column("queueOffset").to_pylist() == list(range(20))


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(storefiles.NotAStore, match="not a RocketMQ store"):
        storefiles.Store(str(tmp_path))
    cfg = small_config(tmp_path / "store", "sf2")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Flip", 1, 1))
        r, _ = _put(w, d, c, [PutRequest("Flip", 0, [b"x" * 64], [{}]), PutRequest("Flip", 0, [b"y" * 64], [{}])])
        store = storefiles.Store(cfg.root)
        with pytest.raises(ValueError, match="topic Nope does not exist"):
            store.matching("Flip,Nope")
        assert store.matching(pattern="Fl.p") == ["Flip"]
        with open(f"{cfg.commitlog_dir}/{0:020d}", "r+b") as f:      # the first record's magic flipped
            f.seek(r.phys_offsets[0] + 4)
            f.write(b"\xff")
        with pytest.raises(storefiles.CorruptRecord, match=f"{0:020d} at offset {r.phys_offsets[0]}"):
            storefiles.read_batch(cfg.root, "Flip", 0, 0, 2)
        kept = storefiles.read_batch(cfg.root, "Flip", 0, 0, 2, on_corrupt="skip")
        assert kept.column("body").to_pylist() == [b"y" * 64] and np.all(kept.column("queueOffset").to_numpy() == [1])


def test_a_commitlog_kept_elsewhere_and_queues_over_several_files_read_back(tmp_path):
    """storePathCommitLog on another disk: run/store.json (written at start) says where, and the
    job reads there; a queue over several consume-queue files has its bounds and slices right
    (each file read up to its first invalid entry, never mapped)."""
    from rocketbox.appliance.supervisor import write_store_info
    cfg = small_config(tmp_path / "store", "sf3", storePathCommitLog=str(tmp_path / "fast" / "commitlog"),
                       mappedFileSizeConsumeQueue=20 * 300)
    with running_store(cfg) as (sh, w, d, c):
        write_store_info(cfg)
        w.topics.upsert(topic_config("Far", 1, 1))
        results = _put(w, d, c, [PutRequest("Far", 0, [b"far-%d" % i], [{}]) for i in range(700)])
        assert all(r.ok for r in results)
    assert not (tmp_path / "store" / "commitlog").exists()
    store = storefiles.Store(cfg.root)
    assert store.commitlog == str(tmp_path / "fast" / "commitlog")
    assert len(storefiles._files(f"{cfg.root}/consumequeue/Far/0")) == 3 and store.bounds("Far", 0) == (0, 700)
    assert store.entries("Far", 0, 295, 305)["phys"].tolist() == [r.phys_offsets[0] for r in results[295:305]]
    got = storefiles.read_batch(cfg.root, "Far", 0, 290, 610).column("body").to_pylist()
    assert got == [b"far-%d" % i for i in range(290, 610)]
    (tmp_path / "store" / "run" / "store.json").unlink()           # a copy without it: root/commitlog, named
    with pytest.raises(storefiles.NotAStore, match=f"no CommitLog directory at {cfg.root}/commitlog"):
        storefiles.Store(cfg.root)
