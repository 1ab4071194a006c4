"""topics.json's journal (store/topicjournal.py): a topic change is durable as one synced line, and
topics.json, RocketMQ's file byte for byte, is rewritten whole only now and then; whoever reads
the topics (and a boot after a crash) sees every acknowledged change."""
import os

from rocketbox.appliance import recovery
from rocketbox.shm.layout import C
from rocketbox.shm.state import SharedState
from rocketbox.store import configfile, topicjournal
from rocketbox.writer import topics as topics_mod
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config


def _file(cfg) -> dict:
    return configfile.read(os.path.join(cfg.config_dir, "topics.json"))


def _journal_lines(cfg) -> list[bytes]:
    with open(topicjournal.path_of(cfg.config_dir), "rb") as f:
        return f.read().splitlines()


def test_each_creation_is_one_journal_line_and_topics_json_is_rewritten_whole_once_they_stop(tmp_path, monkeypatch):
    cfg = small_config(tmp_path, "tj")
    with running_store(cfg) as (sh, w, _d, _c):
        before = open(os.path.join(cfg.config_dir, "topics.json"), "rb").read()
        for i in range(5):
            assert w.topics.upsert(topic_config(f"J{i}", 2, 2)) is not None
        assert open(os.path.join(cfg.config_dir, "topics.json"), "rb").read() == before      # not rewritten
        lines = _journal_lines(cfg)
        assert [topicjournal.changes(cfg.config_dir)[k][1]["topicName"] for k in range(5)] == [f"J{i}" for i in range(5)]
        assert len(lines) == 5 and all(b'"topicName":"J%d"' % i in lines[i] for i in range(5))
        seen = topicjournal.read(cfg.config_dir)                     # what every reader of topics.json reads
        assert {f"J{i}" for i in range(5)} <= set(seen["topicConfigTable"])
        assert seen["dataVersion"]["counter"] == int(sh.control[C.TOPICS_DATA_VERSION])
        w.topics.persist()                                          # changes came less than a second ago
        w.topics.file.wait_idle()
        assert len(_journal_lines(cfg)) == 5
        monkeypatch.setattr(topics_mod, "REWRITE_AFTER_S", 0.0)
        w.topics.persist()
        w.topics.file.wait_idle()
        w.topics.settle()
        assert os.path.getsize(topicjournal.path_of(cfg.config_dir)) == 0
        raw = open(os.path.join(cfg.config_dir, "topics.json"), "rb").read()
        assert raw == configfile.dumps(seen)                        # RocketMQ's layout, every topic in it
        assert not w.topics.rewriting and w.topics.journal.held == 0
        w.close()                                                   # and running_store's close after it: a no-op


def test_a_journal_at_its_limit_has_topics_json_rewritten_with_the_change(tmp_path, monkeypatch):
    monkeypatch.setattr(topicjournal, "JOURNAL_MAX", 3)
    cfg = small_config(tmp_path, "tk")
    with running_store(cfg) as (_sh, w, _d, _c):
        for i in range(3):
            w.topics.upsert(topic_config(f"K{i}", 1, 1))
        assert len(_journal_lines(cfg)) == 3 and "K2" not in _file(cfg)["topicConfigTable"]
        w.topics.upsert(topic_config("K3", 1, 1))                  # the fourth: topics.json whole, journal emptied
        assert os.path.getsize(topicjournal.path_of(cfg.config_dir)) == 0
        assert {f"K{i}" for i in range(4)} <= set(_file(cfg)["topicConfigTable"])
        w.topics.upsert(topic_config("K4", 1, 1))
        assert len(_journal_lines(cfg)) == 1


def test_a_crash_keeps_every_journaled_change_and_a_line_cut_short_is_not_one(tmp_path):
    """Killed without a stop: the next boot lays the journal over topics.json, up to a line a
    crash cut short, folds it into the file and empties the journal."""
    cfg = small_config(tmp_path, "tc")
    sh = SharedState(cfg.geometry()).create()
    try:
        recovery.recover(cfg, sh)
        from rocketbox.writer.service import WriterService
        w = WriterService(cfg, sh).open()
        for i in range(4):
            w.topics.upsert(topic_config(f"C{i}", 3, 3))
        w.topics.upsert(topic_config("C1", 5, 5))                  # an update: the later line wins
        version = int(sh.control[C.TOPICS_DATA_VERSION])
        w.topics.file.wait_idle()                                  # and no close: the crash
    finally:
        sh.close()
        sh.unlink()
    with open(topicjournal.path_of(cfg.config_dir), "ab") as f:
        f.write(b'{"dataVersion":{"counter":999,"timestamp":1},"topicConfig":{"topicName":"Torn"')
    assert "C0" not in (_file(cfg) or {}).get("topicConfigTable", {})
    sh = SharedState(cfg.geometry()).create()
    try:
        recovery.recover(cfg, sh)
        table = _file(cfg)["topicConfigTable"]
        assert {f"C{i}" for i in range(4)} <= set(table) and "Torn" not in table
        assert table["C1"]["readQueueNums"] == 5 and table["C0"]["readQueueNums"] == 3
        assert _file(cfg)["dataVersion"]["counter"] == version == int(sh.control[C.TOPICS_DATA_VERSION])
        assert os.path.getsize(topicjournal.path_of(cfg.config_dir)) == 0
        names = {bytes(sh.views["topic_names"][i]).decode() for i in range(int(sh.control[C.TOPIC_COUNT]))}
        assert {f"C{i}" for i in range(4)} <= names and "Torn" not in names
    finally:
        sh.close()
        sh.unlink()


def test_a_line_that_does_not_parse_ends_the_journal_with_a_warning(tmp_path, caplog):
    cfg = small_config(tmp_path, "tw")
    os.makedirs(cfg.config_dir)
    good = [topicjournal.line({"counter": i + 1, "timestamp": 5}, topic_config(f"W{i}", 1, 1)) for i in range(3)]
    with open(topicjournal.path_of(cfg.config_dir), "wb") as f:
        f.write(good[0] + good[1] + b"{not json\n" + good[2])
    data = topicjournal.read(cfg.config_dir)
    assert sorted(data["topicConfigTable"]) == ["W0", "W1"] and data["dataVersion"]["counter"] == 2
    assert "a line that does not parse ends the journal (2 changes before it)" in caplog.text
