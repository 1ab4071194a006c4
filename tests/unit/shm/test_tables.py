"""The readers' cache of the shared topic table: rows come from shared memory again once the
writer has changed a topic; TopicChanges finds the rows made or changed since its last look."""
from rocketbox.shm.layout import T
from rocketbox.shm.tables import TopicChanges
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config


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


def test_topic_changes_are_the_rows_made_or_changed_since_the_last_look(tmp_path):
    cfg = small_config(tmp_path / "store", "changes")
    with running_store(cfg) as (sh, w, _d, _c):
        changes = TopicChanges(sh.views, sh.control)
        assert {name for name, _row in changes.take()} >= {"TBW102", "SELF_TEST_TOPIC"}   # all, first
        assert changes.take() == []
        w.topics.upsert(topic_config("New", 4, 2))
        w.topics.upsert(topic_config("TBW102", 16, 16, 7))
        got = dict(changes.take())
        assert list(got) == ["TBW102", "New"]        # in table order
        assert got["New"][:3] == [4, 2, 6] and got["TBW102"][:3] == [16, 16, 7]
        w.topics.upsert(topic_config("New", 4, 2))   # the same row again: no change
        assert changes.take() == []
        sh.views["topic_meta"][w.topics.index["New"]][T.LIVE] = 0    # a row no longer live is not told
        assert changes.take() == []
