"""PULL_MESSAGE (11) with long polling (FACTS §3.3, §3.4, §10; broker:processor/PullMessageProcessor).

The store side is ``StoreView.pull``: consume-queue entries as a numpy view, the tag filter as one
vector op over their tag codes, the records as views of the CommitLog mmap joined into the body.
A pull that finds nothing new (PULL_NOT_FOUND) with the SUSPEND flag is held (``shm/holds.py``)
until the queue grows by a message its tag filter takes or ``suspendTimeoutMillis`` passes, then
run once more and answered with the request's opaque.

Subscription: from the header when the SUBSCRIPTION flag is set, else from the group's heartbeat on
this reader. A TAG one filters on the consume queue's tag codes; an SQL92 one (with
``enablePropertyFilter``; else refused 1, as 4.9.8) on each candidate record's properties, its
expression compiled once (``sql_filter``; one that does not parse: 23). A retry topic's pulls are
filtered by tag alone unless ``filterSupportRetry``, as 4.9.8. A pull whose heartbeat went to a
reader that has since died (the client reconnected here and has not sent its next heartbeat yet)
is served unfiltered rather than refused with SUBSCRIPTION_NOT_EXIST: clients re-check tags on
strings, so the result is the same and the consumer does not stall for a heartbeat period.
"""
from __future__ import annotations

import functools
import time

from rocketbox.net.server import DEFERRED
from rocketbox.readers.offsets import offset_key
from rocketbox.remoting import codec, headers, sql92
from rocketbox.remoting.codes import FAQ
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.holds import HeldPulls
from rocketbox.shm.layout import S, T
from rocketbox.store import view as SV
from rocketbox.store.filters import sql_filter, tag_codes
from rocketbox.store.topicconfig import PERM_READ

COMMIT_OFFSET, SUSPEND, SUBSCRIPTION = 0x1, 0x2, 0x4
UNCOUNTED_MAX = 4096       # (topic@group, queue)s counted ahead of their offset slot; more are not counted
_ANSWER = codec.ResponseTemplate(("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"), {})


class PullProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.view = broker, broker.cfg, broker.link, broker.view
        self.topics, self.offsets = broker.topics, broker.offsets
        row = broker.sh.slots[broker.slot]
        self.polls = HeldPulls(self.view.queues, broker.loop, row, self.view.tags)   # long polls
        self.disk_limits = (self.cfg.maxTransferCountOnMessageInDisk, self.cfg.maxTransferBytesOnMessageInDisk)
        self.slave = self.cfg.slave
        # what a pull counts (shm/stats.py): its slot's row, and its row of the groups' counts, as
        # memoryviews (an int read and written per count, ~3x cheaper than a numpy scalar's)
        self.counts = memoryview(row)
        self.group_pulls = memoryview(broker.sh.views["offset_pulls"][broker.slot])
        # messages found for a (topic@group, queue) with no offset slot yet (before the group's first
        # commit there): added to the slot's count once it has one
        self.uncounted: dict[tuple[bytes, int], int] = {}

    def handlers(self) -> dict:
        return {R.PULL_MESSAGE: self.pull}

    def settle(self) -> None:
        """On a wake: answer the held pulls whose queues grew (or that timed out)."""
        if self.polls:
            self.polls.settle()

    def pull(self, cmd, conn):
        h = headers.decode(cmd)
        topic, qid, group = h["topic"], h["queueId"], h["consumerGroup"]
        meta = self.topics.live(topic)[1]
        if meta is None:
            return cmd.response(RC.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! {FAQ}")
        if not meta[T.PERM] & PERM_READ:
            return cmd.response(RC.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        read_nums = meta[T.READ_QUEUE_NUMS]
        if not 0 <= qid < read_nums:
            return cmd.response(RC.SYSTEM_ERROR, f"queueId[{qid}] is illegal, topic:[{topic}] "
                                                 f"topicConfig.readQueueNums:[{read_nums}] consumer:[{conn.peer}]")
        if not self.b.group_exists(group):
            return cmd.response(RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
        kind, keep = h["expressionType"] or "TAG", None
        if h["sysFlag"] & SUBSCRIPTION:
            codes = tag_codes(h["subscription"]) if kind == "TAG" else None
            expression = h["subscription"]
        else:
            sub = self.b.members.subscription(group, topic)
            if sub is not None and sub.sub_version < h["subVersion"]:
                return cmd.response(RC.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            codes = sub.tag_codes if sub is not None and sub.expression_type == "TAG" else None
            if sub is not None and kind == "TAG":
                kind = sub.expression_type
            expression = sub.expression if sub is not None else None
        if kind != "TAG" and (self.cfg.filterSupportRetry or not topic.startswith("%RETRY%")):
            if kind != "SQL92" or not self.cfg.enablePropertyFilter:
                return cmd.response(RC.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {kind}")
            try:
                keep = sql_filter(expression or "")
            except sql92.SQLError:
                return cmd.response(RC.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")
        key = offset_key(topic, group)
        if h["sysFlag"] & COMMIT_OFFSET and not self.slave:
            self.link.commit_offset(key, qid, h["commitOffset"])
        counter = self._counter(key, qid)
        sg = self.b.group(group) if self.cfg.slaveReadEnable or self.slave else None
        code, pieces = self._run(cmd, topic, qid, h["queueOffset"], h["maxMsgNums"], codes, counter, keep, sg)
        if code == RC.PULL_NOT_FOUND and h["sysFlag"] & SUSPEND and h["suspendTimeoutMillis"] > 0:
            self.polls.hold(topic, qid, h["queueOffset"], codes, h["suspendTimeoutMillis"] / 1000, functools.partial(
                self._held, cmd, conn, topic, qid, h["queueOffset"], h["maxMsgNums"], codes, key, keep, sg))
        else:
            conn.reply_pieces(cmd, pieces)
        return DEFERRED

    def _held(self, cmd, conn, topic, qid, offset, max_nums, codes, key, keep, sg, _grew: bool) -> None:
        """A held pull's end (the queue grew, or the time-out): run it once more and answer."""
        try:
            _code, pieces = self._run(cmd, topic, qid, offset, max_nums, codes, self._counter(key, qid), keep, sg)
        except Exception as e:
            pieces = [codec.encode(conn.failure(cmd, e))]
        conn.reply_pieces(cmd, pieces)

    def _counter(self, key: bytes, qid: int) -> int | tuple[bytes, int]:
        """Where a pull of ``key`` (topic@group) on queue ``qid`` counts the messages it finds: the
        group's consumer offset slot on the queue (what it found there before the slot existed
        added now), or, with no slot yet, (key, qid) in ``uncounted``."""
        slot = self.offsets.slot(key, qid)
        if slot is None:
            return key, qid
        if self.uncounted:
            self.group_pulls[slot] += self.uncounted.pop((key, qid), 0)
        return slot

    def count_uncounted(self) -> None:
        """On the reader's tick: the counts kept for (topic@group, queue)s that have an offset
        slot now (the group committed there) go to it."""
        for key, qid in list(self.uncounted):
            self._counter(key, qid)

    def _run(self, cmd, topic: str, qid: int, offset: int, max_nums: int, codes,
             counter: int | tuple[bytes, int], keep=None, sg: dict | None = None) -> tuple[int, list]:
        """The pull's answer now: (response code, the response in pieces: its head, then the
        records as views of the CommitLog); the messages found counted where ``counter`` says
        (``_counter``).  ``sg``: the group's config, given when the answer suggests a broker
        (``slaveReadEnable``) or comes from a slave."""
        count = max(1, min(max_nums, self.cfg.maxTransferCountOnMessageInMemory))
        began = time.monotonic_ns()
        p = self.view.pull(topic, qid, offset, count, codes, self.cfg.maxTransferBytesOnMessageInMemory,
                           self.disk_limits, keep)
        row = self.counts                # (getTransferedTps, getFoundTps, getMissTps, consumeTps)
        if (took_ms := (time.monotonic_ns() - began) // 1_000_000) > row[S.PULL_MS_MAX]:
            row[S.PULL_MS_MAX] = took_ms         # (getMessageEntireTimeMax)
        if p.status == SV.FOUND:
            code, status = RC.SUCCESS, "FOUND"
            row[S.PULLED_MSGS] += p.count
            row[S.PULLED_BYTES] += sum(map(len, p.parts))
            row[S.PULLS_FOUND] += 1
            if isinstance(counter, int):
                self.group_pulls[counter] += p.count
            elif counter in self.uncounted or len(self.uncounted) < UNCOUNTED_MAX:
                self.uncounted[counter] = self.uncounted.get(counter, 0) + p.count
        elif p.status == SV.NO_MATCHED:
            code, status = RC.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"
        elif p.status == SV.NO_NEW:
            code, status = RC.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE"
        elif p.status == SV.NO_QUEUE:
            code, status = (RC.PULL_OFFSET_MOVED if offset else RC.PULL_NOT_FOUND), "NO_MATCHED_LOGIC_QUEUE"
        elif p.max_offset == 0:
            code, status = RC.PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE"
        else:
            code = RC.PULL_OFFSET_MOVED
            status = "OFFSET_TOO_SMALL" if offset < p.min_offset else "OFFSET_OVERFLOW_BADLY"
        if p.status != SV.FOUND:
            row[S.PULLS_MISSED] += 1
        suggest, next_offset = 0, p.next_offset
        if sg is not None:
            if self.cfg.slaveReadEnable:          # a consumer far behind is sent to the slave, else to the group's broker
                far = p.status == SV.FOUND and self.view.on_disk(p.last)
                suggest = int(sg.get("whichBrokerWhenConsumeSlowly", 1) if far else sg.get("brokerId", 0))
            if self.slave and code == RC.PULL_OFFSET_MOVED:     # a slave never moves a consumer's offset
                code, suggest, next_offset = RC.PULL_RETRY_IMMEDIATELY, int(sg.get("brokerId", 0)), offset
        values = (str(suggest), str(next_offset), str(p.min_offset), str(p.max_offset))
        return code, _ANSWER.encode_pieces(cmd, code, status, values, p.parts)
