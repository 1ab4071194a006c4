"""RocketMQ 5.x's gRPC protocol (``apache.rocketmq.v2``, apache/rocketmq-apis), taken as a
dependency: the message types are built at run time from the descriptors that the official Python
client's wheel ships (``rocketmq-python-client``, pinned in ``PROTOCOL``), read from its generated
``definition_pb2.py`` and ``service_pb2.py`` without importing them.

Why not import them: the wheel's top-level package is ``rocketmq``, the name the 4.x C++ client's
wheel (a test peer) also takes, so it is installed apart, in ``<venv>/rocketmq5`` (``install.sh``),
and its generated modules import themselves as ``rocketmq.grpc_protocol``.  Reading the serialized
file descriptors into a pool of our own keeps both clients installable and leaves the default
pool alone.  ``load`` -> ``Protocol``: each message class by its proto name, and the service's
methods (name, request class, response class, streaming or not) for a generic gRPC handler.
"""
from __future__ import annotations

import ast
import functools
import os
import sys
from dataclasses import dataclass

from google.protobuf import descriptor_pool, duration_pb2, message_factory, timestamp_pb2

from rocketbox.grpcfront import PROTOCOL

PACKAGE = "apache.rocketmq.v2"
SERVICE = f"{PACKAGE}.MessagingService"
FILES = ("definition_pb2.py", "service_pb2.py")   # in dependency order


class ProtocolMissing(RuntimeError):
    """The protocol's wheel is not installed where it is looked for."""


def default_dir() -> str:
    """Where ``install.sh`` puts the wheel: ``<venv>/rocketmq5``."""
    return os.path.join(sys.prefix, "rocketmq5")


def serialized_descriptor(path: str) -> bytes:
    """The serialized FileDescriptorProto a protoc-generated ``*_pb2.py`` adds to its pool
    (``AddSerializedFile(b'...')``), read from its source."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "AddSerializedFile"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, bytes)):
            return node.args[0].value
    raise ProtocolMissing(f"{path} adds no serialized file descriptor (not a protoc-generated module?)")


@dataclass(frozen=True)
class Method:
    name: str
    request: type
    response: type
    client_streaming: bool
    server_streaming: bool


class Protocol:
    def __init__(self, pool: descriptor_pool.DescriptorPool):
        self.pool = pool
        service = pool.FindServiceByName(SERVICE)
        self.methods = [Method(m.name, self.message_class(m.input_type.full_name), self.message_class(m.output_type.full_name),
                               m.client_streaming, m.server_streaming) for m in service.methods]
        self.Code = pool.FindEnumTypeByName(f"{PACKAGE}.Code")

    def message_class(self, full_name: str) -> type:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))

    def __getattr__(self, name: str) -> type:
        """A message of the package by its short name: ``proto.SendMessageRequest`` (looked up once,
        then an attribute of this object)."""
        try:
            cls = self.message_class(f"{PACKAGE}.{name}")
        except KeyError:
            raise AttributeError(name) from None
        setattr(self, name, cls)
        return cls

    @functools.lru_cache(maxsize=None)          # (one Protocol a process: its few names, kept)
    def code(self, name: str) -> int:
        """A value of ``apache.rocketmq.v2.Code`` by its name."""
        return self.Code.values_by_name[name].number

    @functools.lru_cache(maxsize=None)
    def enum(self, enum: str, name: str) -> int:
        """A value of one of the package's enums by its name: ``enum("MessageType", "FIFO")``."""
        return self.pool.FindEnumTypeByName(f"{PACKAGE}.{enum}").values_by_name[name].number

    def enum_name(self, enum: str, number: int) -> str | None:
        """The name of a value of one of the package's enums; None for a number it does not have."""
        value = self.pool.FindEnumTypeByName(f"{PACKAGE}.{enum}").values_by_number.get(number)
        return None if value is None else value.name


@functools.lru_cache(maxsize=None)
def load(directory: str | None = None) -> Protocol:
    """The protocol from the wheel in ``directory`` (default: ``default_dir()``)."""
    d = os.path.join(directory or default_dir(), "rocketmq", "grpc_protocol")
    if not os.path.isdir(d):
        raise ProtocolMissing(f"RocketMQ 5.x's protocol is not installed at {d}: ./install.sh installs {PROTOCOL} there")
    pool = descriptor_pool.DescriptorPool()
    for wkt in (duration_pb2, timestamp_pb2):
        pool.AddSerializedFile(wkt.DESCRIPTOR.serialized_pb)
    for name in FILES:
        pool.AddSerializedFile(serialized_descriptor(os.path.join(d, name)))
    return Protocol(pool)
