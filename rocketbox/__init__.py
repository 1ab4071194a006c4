"""rocketbox: a RocketMQ-compatible message broker, and its Python client.

The client speaks RocketMQ's 4.x remoting protocol, so it works with rocketbox and with Apache
RocketMQ alike. It is asyncio first::

    from rocketbox import Message, Producer

    producer = await Producer("my-group", "127.0.0.1:9876").start()
    result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))
    await producer.shutdown()

``docs/CLIENT.md`` shows every message type and consumer kind. Below this package, the
appliance's own modules (``rocketbox.store``, ``rocketbox.writer``, ...) are not the client's API.
"""
from rocketbox.client.admin import Admin
from rocketbox.client.consumer import PullConsumer, PushConsumer
from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.instance import MessageQueue
from rocketbox.client.message import Message, MessageExt, SendResult
from rocketbox.client.producer import Producer

__all__ = ["Admin", "MQBrokerError", "MQClientError", "Message", "MessageExt", "MessageQueue", "Producer",
           "PullConsumer", "PushConsumer", "SendResult"]
