"""The readers' cache of the shared topic table: rows come from shared memory again once the
writer has changed a topic."""
from shm.layout import T
from tests.unit.writer.rig import running_store, small_config
from writer.topics import topic_config


def test_a_cached_topic_row_follows_the_writers_changes(tmp_path):
    cfg = small_config(tmp_path / "store", "tables")
    with running_store(cfg) as (_sh, w, _d, c):
        w.topics.upsert(topic_config("Cached", 4, 2))
        topics = c.topics
        i = topics.lookup("Cached")
        row = topics.row(i)
        assert (row[T.READ_QUEUE_NUMS], row[T.WRITE_QUEUE_NUMS], row[T.PERM], row[T.LIVE]) == (4, 2, 6, 1)
        assert topics.queue_nums(i) == 4 and topics.row(i) is row          # cached while nothing changed
        w.topics.upsert(topic_config("Cached", 8, 8, 4))                   # read-only now, more queues
        row = topics.row(i)
        assert (row[T.READ_QUEUE_NUMS], row[T.WRITE_QUEUE_NUMS], row[T.PERM]) == (8, 8, 4)
        assert topics.queue_nums(i) == 8 and topics.lookup("Other") is None
        assert topics.live("Cached") == (i, row) and topics.live("Other") == (None, None)
        row[T.LIVE] = 0                                                    # a row that is not live
        assert topics.live("Cached") == (None, None) and topics.lookup("Cached") is None
