"""rocketbox: a RocketMQ-compatible message broker, and its Python client.

The client speaks RocketMQ's 4.x remoting protocol, so it works with rocketbox and with Apache
RocketMQ alike. It is asyncio first::

    from rocketbox import Message, Producer

    producer = await Producer("my-group", "127.0.0.1:9876").start()
    result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))
    await producer.shutdown()

``docs/CLIENT.md`` shows every message type and consumer kind. The public names are loaded when
first used, so importing a module of the appliance (``rocketbox.store``, ``rocketbox.writer``, ...,
not the client's API) does not load the client.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketbox.client.admin import Admin
    from rocketbox.client.consumer import PullConsumer, PushConsumer
    from rocketbox.client.errors import MQBrokerError, MQClientError
    from rocketbox.client.instance import MessageQueue
    from rocketbox.client.litepull import LitePullConsumer
    from rocketbox.client.message import Message, MessageExt, SendResult
    from rocketbox.client.producer import Producer, create_reply
    from rocketbox.client.sync import SyncLitePullConsumer, SyncProducer
    from rocketbox.client.transaction import TransactionProducer, TransactionSendResult

# public name -> the module that defines it
_PUBLIC = {"Admin": "rocketbox.client.admin", "PullConsumer": "rocketbox.client.consumer",
           "PushConsumer": "rocketbox.client.consumer", "MQBrokerError": "rocketbox.client.errors",
           "MQClientError": "rocketbox.client.errors", "MessageQueue": "rocketbox.client.instance",
           "Message": "rocketbox.client.message", "MessageExt": "rocketbox.client.message",
           "SendResult": "rocketbox.client.message", "Producer": "rocketbox.client.producer",
           "LitePullConsumer": "rocketbox.client.litepull", "SyncProducer": "rocketbox.client.sync",
           "SyncLitePullConsumer": "rocketbox.client.sync", "TransactionProducer": "rocketbox.client.transaction",
           "TransactionSendResult": "rocketbox.client.transaction", "create_reply": "rocketbox.client.producer"}

__all__ = ["Admin", "LitePullConsumer", "MQBrokerError", "MQClientError", "Message", "MessageExt", "MessageQueue",
           "Producer", "PullConsumer", "PushConsumer", "SendResult", "SyncLitePullConsumer", "SyncProducer",
           "TransactionProducer", "TransactionSendResult", "create_reply"]
assert sorted(__all__) == sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
