"""The scheduler against an in-process writer and dispatcher: a delayed message is not delivered
before its time, is delivered once at it into its real topic and queue with its properties and
body, and the level's progress is kept in delayOffset.json in RocketMQ's format."""
import contextlib
import os
import threading
import time

from rocketbox.appliance.inprocess import running_store, small_config
from rocketbox.scheduler.service import IDLE_S, SchedulerService
from rocketbox.shm.ringclient import PutRequest
from rocketbox.store import configfile, message
from rocketbox.store.view import StoreView
from rocketbox.writer.topics import topic_config


@contextlib.contextmanager
def _writer_thread(w, d):
    """The writer and the dispatcher stepped in a thread: the scheduler waits for its puts' replies."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            if not (w.step() | d.step()):
                time.sleep(0.002)
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def _delayed(c, level: int, body: bytes, topic="Real", qid=1, **props):
    """A message as the send path stores a DELAY=level one (readers/send.py, store/delay.py)."""
    p = {"DELAY": str(level), "TAGS": "TagA", "UNIQ_KEY": body.decode().upper(), "REAL_TOPIC": topic,
         "REAL_QID": str(qid), **props}
    (r,) = c.put([PutRequest("SCHEDULE_TOPIC_XXXX", level - 1, [body], [p], born_ts=1234)])
    assert r.ok
    return r


def _real(sh, cfg, topic="Real", qid=1):
    view = StoreView(cfg, sh).open()
    try:
        lo, hi = view.offsets(topic, qid) or (0, 0)
        return view.pull(topic, qid, lo, 100).records() if hi > lo else []
    finally:
        view.close()


def test_a_delayed_message_arrives_in_its_real_queue_when_due_and_not_before(tmp_path):
    cfg = small_config(tmp_path / "store", "sch", messageDelayLevel="1s 2s 1h")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Real", 4, 4))
        s = SchedulerService(cfg, sh).open()
        try:
            with _writer_thread(w, d):
                sent = _delayed(c, 1, b"early")
                later = _delayed(c, 3, b"hour")                      # level 3: an hour away
                time.sleep(0.1)
                due_in = s.step()
                assert 0.5 < due_in <= 1.0 and _real(sh, cfg) == []   # not before its time
                time.sleep(due_in + 0.05)
                assert s.step() == IDLE_S                            # the next is an hour away: the longest sleep
                time.sleep(0.1)
            got = _real(sh, cfg)
            assert [r.body for r in got] == [b"early"]
            r = got[0]
            assert r.topic == "Real" and r.queue_id == 1 and r.born_ts == 1234 and r.flag == 0
            assert r.properties["DELAY"] == "1" and r.properties["REAL_TOPIC"] == "Real"    # as 4.9.8 stores them
            assert r.properties["UNIQ_KEY"] == "EARLY" and r.store_ts - 1000 >= sent.store_ts - 5
            assert s.offsets[1] == 1 and s.offsets[3] == 0 and later.ok
        finally:
            s.close()
        text = open(os.path.join(cfg.config_dir, "delayOffset.json"), "rb").read()
        assert b"\t\t1: 1," in text and b"\t\t3: 0" in text and b'"1"' not in text      # fastjson's unquoted keys
        assert configfile.read(os.path.join(cfg.config_dir, "delayOffset.json"))["offsetTable"]["1"] == 1
        again = SchedulerService(cfg, sh).open()                    # a restart delivers none twice
        try:
            with _writer_thread(w, d):
                again.step()
                time.sleep(0.1)
            assert [r.body for r in _real(sh, cfg)] == [b"early"]
        finally:
            again.close()


def test_messages_for_a_deleted_topic_or_the_half_topic_are_dropped_and_the_level_goes_on(tmp_path):
    cfg = small_config(tmp_path / "store", "sch2", messageDelayLevel="1s")
    with running_store(cfg) as (sh, w, d, c):
        w.topics.upsert(topic_config("Real", 2, 2))
        s = SchedulerService(cfg, sh).open()
        try:
            with _writer_thread(w, d):
                _delayed(c, 1, b"gone", topic="NoSuchTopic", qid=0)
                _delayed(c, 1, b"half", topic="RMQ_SYS_TRANS_HALF_TOPIC", qid=0)
                _delayed(c, 1, b"fine", qid=0)
                time.sleep(1.1)
                s.step()
                time.sleep(0.1)
            assert [r.body for r in _real(sh, cfg, qid=0)] == [b"fine"] and s.offsets[1] == 3
        finally:
            s.close()


def test_a_level_past_the_last_is_the_last_and_real_topic_and_queue_are_recorded():
    from rocketbox.store import delay
    props = delay.scheduled_properties(b"TAGS\x01a\x02DELAY\x0199", 99, 18, "T", 3)
    assert message.parse_properties(props.decode()) == {"TAGS": "a", "DELAY": "18", "REAL_TOPIC": "T", "REAL_QID": "3"}
    assert delay.scheduled_properties(b"DELAY\x012", 2, 18, "T", 0) == b"DELAY\x012\x02REAL_TOPIC\x01T\x02REAL_QID\x010"
    # a message delayed once, delivered, then sent back with a delay: its real topic is the retry topic now
    again = delay.scheduled_properties(b"REAL_TOPIC\x01Orders\x02REAL_QID\x013\x02DELAY\x013", 3, 18, "%RETRY%g", 0)
    assert message.property_value(again, b"REAL_TOPIC") == b"%RETRY%g" and again.count(b"REAL_TOPIC") == 1
