"""A topic's configuration record, as ``config/topics.json`` and REGISTER_BROKER carry it
(RocketMQ's TopicConfig, FACTS §5.6): permissions, queue counts and their bounds, rocketbox's own
attributes, and the built-in topics.  Every role reads these; the writer alone writes the file and
the shared table (``writer/topics.py``)."""
from __future__ import annotations

from rocketbox.store.delay import SCHEDULE_QUEUES, SCHEDULE_TOPIC
from rocketbox.store.timer import TIMER_TOPIC
from rocketbox.store.transaction import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC

PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4
PERM_RW = PERM_READ | PERM_WRITE


# rocketbox's own topic attributes, kept in topics.json beside RocketMQ's keys (fastjson, reading
# the file into a TopicConfig, ignores keys it does not know): ``retentionMs``, how long the topic's
# messages stay visible (0: as long as the CommitLog keeps them), ``purgedBeforeMs``, messages
# stored before it are hidden (a purge), and ``purgedQueues``, the same for single queues
# ({"<queue id>": ms}).  An update that does not name them keeps them.
ATTRIBUTES = ("retentionMs", "purgedBeforeMs", "purgedQueues")


def topic_config(name: str, read: int, write: int, perm: int = PERM_RW, sys_flag: int = 0,
                 order: bool = False, filter_type: str = "SINGLE_TAG", **attributes) -> dict:
    tc = {"order": order, "perm": perm, "readQueueNums": read, "topicFilterType": filter_type,
          "topicName": name, "topicSysFlag": sys_flag, "writeQueueNums": write}
    tc.update((k, v if isinstance(v, dict) else int(v)) for k, v in attributes.items()
              if k in ATTRIBUTES and v is not None)
    return tc


class QueueNumsOutOfRange(ValueError):
    """A topic with more read or write queues than ``maxTopicQueueNums`` (or fewer than 0)."""


def check_queue_nums(tc: dict, most: int) -> None:
    """Refuse (QueueNumsOutOfRange) a topic whose read or write queue count is outside 0 to ``most``
    (``maxTopicQueueNums``): each of its queues is a consume-queue directory made with the topic,
    and an entry in every client's route."""
    for key in ("readQueueNums", "writeQueueNums"):
        n = int(tc.get(key, 16))
        if not 0 <= n <= most:
            raise QueueNumsOutOfRange(f"{key} {n} of topic {tc.get('topicName')} is out of range: "
                                      f"a topic has 0 to {most} queues (maxTopicQueueNums)")


def queue_nums(tc: dict) -> int:
    return max(int(tc.get("readQueueNums", 0)), int(tc.get("writeQueueNums", 0)))


def builtin_topics(cfg) -> list[dict]:
    levels = max(SCHEDULE_QUEUES, len(cfg.delay_levels_ms))
    out = [topic_config("SELF_TEST_TOPIC", 1, 1)]
    if cfg.autoCreateTopicEnable:
        out.append(topic_config("TBW102", cfg.defaultTopicQueueNums, cfg.defaultTopicQueueNums, 7))
    out += [topic_config("BenchmarkTest", 1024, 1024),
            topic_config(cfg.brokerClusterName, 16, 16, 7 if cfg.clusterTopicEnable else PERM_INHERIT)]
    if cfg.brokerTopicEnable:
        out.append(topic_config(cfg.brokerName, 1, 1, 7))
    out += [topic_config("OFFSET_MOVED_EVENT", 1, 1),
            topic_config(SCHEDULE_TOPIC, levels, levels),       # a queue a delay level
            topic_config(TIMER_TOPIC, 1, 1),                    # pending timers and their cancellations
            topic_config(f"{cfg.brokerClusterName}_REPLY_TOPIC", 1, 1)]
    if not cfg.rejectTransactionMessage:                # (4.9.8 makes them at the first half message)
        out += [topic_config(HALF_TOPIC, 1, 1), topic_config(OP_TOPIC, 1, 1), topic_config(CHECK_MAX_TOPIC, 1, 1)]
    return out
