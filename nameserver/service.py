"""The name server role (``appliance run nameserver``): routes over the remoting protocol.

Handlers (FACTS §3.6, namesrv:processor/DefaultRequestProcessor.java): REGISTER_BROKER (plain or
zlib-compressed body, optional body CRC), UNREGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC (17 for an
unknown topic; fastjson's unquoted brokerId keys for clients older than 4.9.4 unless they ask for
standard JSON), DELETE_TOPIC_IN_NAMESRV, GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER and the KV config
(namesrv:kvconfig/KVConfigManager.java: kept in ``kvConfigPath`` as ``{"configTable": {namespace:
{key: value}}}``, written after every request that changes it, read at start).  Any other code is
answered REQUEST_CODE_NOT_SUPPORTED — a Java name server stays silent, which only makes clients
wait for their time-out.  Brokers that stop registering expire after 120 s (scanned every 10 s); a
broker whose registering connection closes is dropped at once, as 4.9.8's.
Several name servers run independently: each broker registers with all of them.
"""
from __future__ import annotations

import json
import logging
import re
import struct
import time
import zlib

from rocketbox.nameserver.routes import BROKER_EXPIRE_S, RouteTable
from rocketbox.net.role import ServerRole
from rocketbox.net.server import RemotingServer
from rocketbox.remoting import headers
from rocketbox.remoting.codes import V4_9_4
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import configfile
from rocketbox.store.configfile import loads_tolerant
from rocketbox.store.errors import StoreError
from rocketbox.store.message import body_crc

log = logging.getLogger("rocketbox.nameserver")
SCAN_S = 10.0
_I32 = struct.Struct(">i")
_QUOTED_INT_KEY = re.compile(r'"(-?\d+)":')


def _body(obj, standard: bool = True) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), sort_keys=True)
    return (text if standard else _QUOTED_INT_KEY.sub(r"\1:", text)).encode()


MAX_INFLATED = 64 << 20     # a compressed register body's bound: ~1M topics at ~60 bytes each
_ROUTE_FIELDS = (("perm", 6), ("readQueueNums", 0), ("writeQueueNums", 0), ("topicSysFlag", 0))


def parse_register_body(body: bytes, compressed: bool) -> dict[str, dict[str, int]]:
    """RegisterBrokerBody -> {topic: the TopicConfig fields a route holds, as ints} (FACTS §3.6),
    or ValueError (zlib.error, struct.error) naming what does not fit: checked whole, so a
    broker is registered with all of it or not at all."""
    if not body:
        return {}
    if not compressed:
        data = loads_tolerant(body.decode("utf-8"))
        wrapper = data.get("topicConfigSerializeWrapper") if isinstance(data, dict) else None
        table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
        if not isinstance(table, dict | None):
            raise ValueError("topicConfigTable is not an object")
        return _route_fields(table or {})
    raw, at = _inflate(body), 0

    def chunk():
        nonlocal at
        (n,) = _I32.unpack_from(raw, at)
        at += 4 + n
        return raw[at - n:at].decode("utf-8")

    chunk()                                         # DataVersion JSON
    (count,) = _I32.unpack_from(raw, at)
    at += 4
    out = {}
    for _ in range(count):
        name, read, write, perm, _filter_type = chunk().split(" ")
        out[name] = {"readQueueNums": read, "writeQueueNums": write, "perm": perm}
    return _route_fields(out)


def _inflate(body: bytes) -> bytes:
    """A compressed body, inflated to at most ``MAX_INFLATED`` bytes (RocketMQ sets no bound: 16 MiB
    of zeros would inflate to ~16 GiB); ValueError past it, or for a stream cut short."""
    z = zlib.decompressobj()
    raw = z.decompress(body, MAX_INFLATED + 1)
    if len(raw) > MAX_INFLATED:
        raise ValueError(f"the compressed body inflates past {MAX_INFLATED >> 20} MiB")
    if not z.eof:
        raise ValueError("the compressed body is cut short")
    return raw


def _route_fields(table: dict) -> dict[str, dict[str, int]]:
    out = {}
    for name, tc in table.items():
        if not isinstance(tc, dict):
            raise ValueError(f"the config of topic {name[:100]} is not an object")
        try:
            out[name] = {k: int(tc.get(k, default)) for k, default in _ROUTE_FIELDS}
        except (TypeError, ValueError) as e:
            raise ValueError(f"the config of topic {name[:100]}: {e}") from None
    return out


def _kv_table(data) -> dict | None:
    """The table of a KV config file, ``{"configTable": {namespace: {key: value}}}`` with strings
    for keys and values; None for anything else."""
    table = data.get("configTable") if isinstance(data, dict) else None
    if not isinstance(table, dict) or not all(
            isinstance(kv, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in kv.items())
            for kv in table.values()):
        return None
    return table


class NameServer(ServerRole):
    def __init__(self, host: str, port: int, kv_path: str):
        super().__init__()
        self.host, self.port, self.kv_path = host, port, kv_path
        self.routes = RouteTable()
        self.channels: dict[object, set] = {}      # connection -> (name, addr, id) registered through it
        self.channel_of: dict[str, object] = {}    # broker addr -> the connection it last registered through
        self.handlers = {
            R.REGISTER_BROKER: self.register_broker, R.UNREGISTER_BROKER: self.unregister_broker,
            R.GET_ROUTEINFO_BY_TOPIC: self.route, R.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list, R.PUT_KV_CONFIG: self.put_kv,
            R.GET_KV_CONFIG: self.get_kv, R.DELETE_KV_CONFIG: self.delete_kv,
            R.GET_KVLIST_BY_NAMESPACE: self.kv_list, R.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
        }

    # ------------------------------------------------------------ handlers
    def register_broker(self, cmd, conn):
        h = headers.decode(cmd)
        if h["bodyCrc32"] and h["bodyCrc32"] != body_crc(cmd.body):      # UtilAll.crc32, as the body CRC
            return cmd.response(RC.SYSTEM_ERROR, "crc32 not match")
        try:
            topics = parse_register_body(cmd.body, bool(h["compressed"]))
        except (ValueError, zlib.error, struct.error) as e:
            return cmd.response(RC.SYSTEM_ERROR, f"register body does not parse: {e}")
        master, master_ha = self.routes.register(h["clusterName"], h["brokerName"], h["brokerAddr"], h["brokerId"],
                                                 h["haServerAddr"], topics, time.monotonic())
        self.channels.setdefault(conn, set()).add((h["brokerName"], h["brokerAddr"], h["brokerId"]))
        self.channel_of[h["brokerAddr"]] = conn
        return cmd.response(ext=headers.encode({"haServerAddr": master_ha, "masterAddr": master}))

    def closed(self, conn) -> None:
        """A connection ended: the brokers that registered through it (and not since through
        another) are gone, as 4.9.8's BrokerHousekeepingService (``onChannelDestroy``): a killed
        master leaves the routes at once, and its clients turn to its slave."""
        for name, addr, broker_id in self.channels.pop(conn, ()):
            if self.channel_of.get(addr) is conn:
                del self.channel_of[addr]
                self.routes.unregister(name, addr, broker_id)
                log.warning("broker %s (%s, id %d): its connection closed; unregistered", addr, name, broker_id)

    def unregister_broker(self, cmd, _conn):
        h = headers.decode(cmd)
        self.routes.unregister(h["brokerName"], h["brokerAddr"], h["brokerId"])
        self.channel_of.pop(h["brokerAddr"], None)        # (gone already: its connection's close says nothing)
        return cmd.response()

    def route(self, cmd, _conn):
        h = headers.decode(cmd)
        data = self.routes.route(h["topic"])
        if data is None:
            return cmd.response(RC.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {h['topic']}")
        return cmd.response(body=_body(data, cmd.version >= V4_9_4 or bool(h["acceptStandardJsonOnly"])))

    def delete_topic(self, cmd, _conn):
        self.routes.delete_topic(headers.decode(cmd)["topic"])
        return cmd.response()

    def cluster_info(self, cmd, _conn):
        return cmd.response(body=_body(self.routes.cluster_info()))

    def topic_list(self, cmd, _conn):
        return cmd.response(body=_body({"topicList": sorted(self.routes.topics)}))

    def put_kv(self, cmd, _conn):
        h = headers.decode(cmd)
        if self.routes.kv.get(h["namespace"], {}).get(h["key"]) != h["value"]:
            self._set_kv(h["namespace"], h["key"], h["value"])
        return cmd.response()

    def get_kv(self, cmd, _conn):
        h = headers.decode(cmd)
        value = self.routes.kv.get(h["namespace"], {}).get(h["key"])
        if value is None:
            return cmd.response(RC.QUERY_NOT_FOUND, f"No config item, Namespace: {h['namespace']} Key: {h['key']}")
        return cmd.response(ext={"value": value})

    def delete_kv(self, cmd, _conn):
        h = headers.decode(cmd)
        if h["key"] in self.routes.kv.get(h["namespace"], {}):
            self._set_kv(h["namespace"], h["key"], None)
        return cmd.response()

    def kv_list(self, cmd, _conn):
        h = headers.decode(cmd)
        table = self.routes.kv.get(h["namespace"])
        if not table:
            return cmd.response(RC.QUERY_NOT_FOUND, f"No config item, Namespace: {h['namespace']}")
        return cmd.response(body=_body({"table": table}))

    def _set_kv(self, namespace: str, key: str, value: str | None) -> None:
        """One entry set (deleted when ``value`` is None), on disk before in the table: when the
        file cannot be written the request is answered SYSTEM_ERROR and nothing has changed."""
        kv = {ns: dict(table) for ns, table in self.routes.kv.items()}
        table = kv.setdefault(namespace, {})
        if value is None:
            del table[key]
            if not table:
                del kv[namespace]
        else:
            table[key] = value
        configfile.write(self.kv_path, {"configTable": kv})
        self.routes.kv = kv

    # ------------------------------------------------------------ lifecycle
    def open(self) -> "NameServer":
        """Read the KV config; a file that is not ``{"configTable": {namespace: {key: value}}}``
        (strings all) stops the start, naming the file."""
        data = configfile.read(self.kv_path)
        table = {} if data is None else _kv_table(data)
        if table is None:
            raise StoreError(f"{self.kv_path}: not a KV config ({{\"configTable\": {{namespace: {{key: value}}}}}})")
        self.routes.kv = table
        if self.routes.kv:
            log.info("KV config: %d entries in %d namespaces from %s", sum(map(len, self.routes.kv.values())),
                     len(self.routes.kv), self.kv_path)
        return self

    async def serve(self) -> None:
        server = await RemotingServer("nameserver", self.handlers, on_close=self.closed).start(self.host, self.port)
        log.info("name server listening on %s:%d", self.host, server.port)
        try:
            while not self.stop_requested:
                await self.sleep(SCAN_S)
                for addr in self.routes.expire(time.monotonic()):
                    log.warning("broker %s expired: no registration for %.0f s", addr, BROKER_EXPIRE_S)
        finally:
            await server.close()
