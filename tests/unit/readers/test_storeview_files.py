"""A reader's view of a queue whose first ConsumeQueue file the dispatcher is making right now:
made empty, then given its size (sparse: blocks are reserved as entries are written)."""
import os

from rocketbox.shm.ringclient import PutRequest
from rocketbox.store.consumequeue import file_size_for, queue_dir
from rocketbox.store.view import FOUND, StoreView
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config


def test_a_reader_looking_while_a_queue_file_is_made_gets_an_answer_then_the_records(tmp_path):
    cfg = small_config(tmp_path / "store", "sf")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Fresh", 1, 1))
        ticket = c.submit([PutRequest("Fresh", 0, [b"m%d" % i for i in range(3)], [{}] * 3)])
        while w.step():
            pass
        assert all(r.ok for r in c.collect(ticket, 1))
        size = file_size_for(cfg.mappedFileSizeConsumeQueue)
        path = os.path.join(queue_dir(cfg.root, "Fresh", 0), f"{0:020d}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:                  # the dispatcher, halfway through making it
            f.truncate(size // 3)
        view = StoreView(cfg, sh).open()
        try:
            assert len(view.entries("Fresh", 0, 0, 1)) == 0       # QUERY_CONSUMER_OFFSET's look: no error
            while d.step():                          # the dispatcher's load finishes the file, then fills it
                pass
            assert os.path.getsize(path) == size
            got = view.pull("Fresh", 0, 0, 32)
            assert got.status == FOUND and [r.body for r in got.records()] == [b"m0", b"m1", b"m2"]
        finally:
            view.close()
