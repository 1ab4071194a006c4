"""A full disk: appends are refused with SERVICE_NOT_AVAILABLE (14) before any byte is placed;
everything acknowledged before is intact.  Uses a real small tmpfs (needs root to mount)."""
import os

import pytest

from rocketbox.appliance import recovery
from rocketbox.appliance.check import check
from rocketbox.dispatcher.service import DispatcherService
from rocketbox.shm.layout import C
from rocketbox.shm.ringclient import PutRequest, RingClient
from rocketbox.shm.state import SharedState
from rocketbox.writer.service import WriterService
from tests.unit.writer.rig import small_config


@pytest.fixture
def small_fs(tmpfs):
    return tmpfs("3m")


def test_full_disk_refuses_cleanly_and_loses_nothing(small_fs):
    cfg = small_config(small_fs / "store", "d", mappedFileSizeCommitLog=1024 * 1024, maxMessageSize=8192,
                       maxIndexNum=2000, mappedFileSizeConsumeQueue=20000)
    sh = SharedState(cfg.geometry()).create()
    try:
        recovery.recover(cfg, sh)
        w, d = WriterService(cfg, sh).open(), DispatcherService(cfg, sh).open()
        c = RingClient(cfg, sh).open()
        acked, refused = [], []
        for i in range(200):
            ticket = c.submit([PutRequest("TBW102", 0, [f"m{i}-".encode() * 1000], [{"UNIQ_KEY": f"U{i:04d}"}])
                            for _ in range(4)])
            while w.step():
                pass
            for r in c.collect(ticket, 1):
                (acked if r.ok else refused).append(r)
            if refused:
                break
        assert refused and {r.status for r in refused} == {14}
        assert len(acked) >= 4
        written = int(sh.control[C.WRITTEN])
        assert not w.step()                         # refusing left no half-written batch behind
        while d.step():
            pass
        c.close()
        w.close()
        d.close()
        rep = check(cfg, verify_index=False)
        assert rep.clean and rep.records == len(acked) and rep.end_offset == written
    finally:
        sh.close()
        sh.unlink()


def test_a_topic_whose_topics_json_cannot_be_written_is_refused_and_undone(small_fs):
    """topics.json's journal cannot take the change (the disk is full): the creation is answered
    SYSTEM_ERROR, the topic is not published, the part of its line that was written is taken out
    again, and neither the files nor the next write have it; once there is room again the next
    creation goes through."""
    from rocketbox.shm import protocol as P
    from rocketbox.store import configfile, topicjournal
    from rocketbox.writer.topics import topic_config

    cfg = small_config(small_fs / "store", "t", mappedFileSizeCommitLog=1024 * 1024)
    path = os.path.join(cfg.config_dir, "topics.json")

    def create(name, **extra):
        rid = c.push_topic(topic_config(name, 1, 1, **extra))
        while w.step():
            pass
        w.topics.file.wait_idle()
        w.step()
        c.poll()
        return c.topic_replies.pop(rid)

    sh = SharedState(cfg.geometry()).create()
    try:
        recovery.recover(cfg, sh)
        w, c = WriterService(cfg, sh).open(), RingClient(cfg, sh).open()
        assert create("Kept").status == P.SUCCESS
        count, version = int(sh.control[C.TOPIC_COUNT]), int(sh.control[C.TOPICS_DATA_VERSION])
        before = open(path, "rb").read()
        filler = small_fs / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        lost = create("Lost", purgedQueues={str(q): 1 for q in range(2000)})    # its line: more than a page
        assert lost.status == P.SYSTEM_ERROR
        assert int(sh.control[C.TOPIC_COUNT]) == count and w.topics.index.get("Lost") is None
        assert "Lost" not in w.topics.configs and int(sh.control[C.TOPICS_DATA_VERSION]) == version
        assert open(path, "rb").read() == before and "Lost" not in topicjournal.read(cfg.config_dir)["topicConfigTable"]
        assert not os.path.exists(os.path.join(cfg.root, "consumequeue", "Lost"))
        os.unlink(filler)
        later = create("Later")
        assert later.status == P.SUCCESS and later.queue_id == count
        table = topicjournal.read(cfg.config_dir)["topicConfigTable"]      # (Lost's cut line gone: Later parses)
        assert "Later" in table and "Kept" in table and "Lost" not in table
        w.close()                                                      # the stop: topics.json whole again
        table = configfile.read(path)["topicConfigTable"]
        assert "Later" in table and "Kept" in table and "Lost" not in table
        assert os.path.getsize(topicjournal.path_of(cfg.config_dir)) == 0
        c.close()
    finally:
        sh.close()
        sh.unlink()
