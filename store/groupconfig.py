"""A consumer group's records: its key in the consumer-offset table (``topic@group``, as
consumerOffset.json spells it) and its SubscriptionGroupConfig with RocketMQ's defaults.  Every role
reads these; the writer alone writes the files and the shared tables (``writer/groups.py``)."""
from __future__ import annotations

from rocketbox.shm.layout import OFFSET_KEY_BYTES


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
