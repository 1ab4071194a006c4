"""A consumer group's records: its key in the consumer-offset table (``topic@group``, as
consumerOffset.json spells it) and its SubscriptionGroupConfig with RocketMQ's defaults.  Every role
reads these; the writer alone writes the files and the shared tables (``writer/groups.py``)."""
from __future__ import annotations

import os

from rocketbox.shm.layout import OFFSET_KEY_BYTES
from rocketbox.store import configfile, message

RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"


def offset_key(topic: str, group: str) -> bytes:
    """The table key, as consumerOffset.json spells it: ``topic@group``."""
    key = f"{topic}@{group}".encode()
    if len(key) >= OFFSET_KEY_BYTES:
        raise ValueError(f"topic@group is {len(key)} bytes; the offset table holds at most {OFFSET_KEY_BYTES - 1}")
    return key


def subscription_group(name: str) -> dict:
    """A SubscriptionGroupConfig with RocketMQ's defaults (``broker:subscription``)."""
    return {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True, "consumeFromMinEnable": True,
            "groupName": name, "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16,
            "retryQueueNums": 1, "whichBrokerWhenConsumeSlowly": 1}


class GroupTable:
    """The consumer groups as a role that does not write them reads them: subscriptionGroup.json
    (the writer's), read again when it changes."""

    def __init__(self, cfg):
        self.cfg = cfg
        self._mtime, self._groups = -1.0, {}

    def group(self, name: str) -> dict | None:
        """A consumer group's SubscriptionGroupConfig: the file's, else RocketMQ's defaults when
        groups are created on demand (autoCreateSubscriptionGroup), else None."""
        path = os.path.join(self.cfg.config_dir, "subscriptionGroup.json")
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = -1.0
        if mtime != self._mtime:
            data = (configfile.read(path) or {}) if mtime >= 0 else {}
            self._groups, self._mtime = data.get("subscriptionGroupTable") or {}, mtime
        found = self._groups.get(name)
        if found is None and self.cfg.autoCreateSubscriptionGroup:
            return subscription_group(name)
        return found


def returned_properties(head: message.Header, topic: bytes, props: bytes, level: int) -> bytes:
    """The properties of a consumed message's copy stored again for a retry or the dead-letter
    queue (4.9.8's send-back): ``RETRY_TOPIC`` (the topic it was first sent to) and
    ``ORIGIN_MESSAGE_ID`` (the first stored copy's offsetMsgId) added when missing, ``WAIT`` false
    and ``DELAY`` the level (0: none)."""
    origin = message.offset_msg_id(head.store_ip, head.store_port, head.phys_offset)
    props = message.with_properties(props, {b"RETRY_TOPIC": topic, b"ORIGIN_MESSAGE_ID": origin.encode()},
                                    only_if_absent=frozenset({b"RETRY_TOPIC", b"ORIGIN_MESSAGE_ID"}))
    return message.with_properties(props, {b"WAIT": b"false", b"DELAY": b"%d" % level})
