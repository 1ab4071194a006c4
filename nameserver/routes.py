"""The name server's route table, pure state (namesrv:routeinfo/RouteInfoManager.java).

    clusters   cluster name -> set of broker names
    brokers    broker name  -> {"cluster", "brokerAddrs": {brokerId: "ip:port"}}
    live       broker addr  -> (last registration, monotonic s; haServerAddr)
    topics     topic        -> {broker name -> QueueData}
    kv         namespace    -> {key: value}

Written only by the name server's event loop (one thread), read by its handlers.  A master's
registration adds or updates the queue data of each topic it carries and leaves its other topics
be, as RocketMQ 4.x's ``registerBroker`` does: a Java broker registers a topic an admin created
with that topic alone (``registerIncrementBrokerData``), which must not take the broker's other
routes away.  A route goes with DELETE_TOPIC_IN_NAMESRV (an admin's topic deletion), or with its
broker: brokers that have not registered for ``BROKER_EXPIRE_S`` are dropped by ``expire`` as if
they had unregistered.  No I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field

BROKER_EXPIRE_S = 120.0


@dataclass
class RouteTable:
    clusters: dict[str, set] = field(default_factory=dict)
    brokers: dict[str, dict] = field(default_factory=dict)
    live: dict[str, tuple] = field(default_factory=dict)
    topics: dict[str, dict] = field(default_factory=dict)
    kv: dict[str, dict] = field(default_factory=dict)

    def register(self, cluster: str, name: str, addr: str, broker_id: int, ha_addr: str,
                 topic_configs: dict, now: float) -> tuple[str | None, str | None]:
        """-> (master addr, master HA addr) for a slave, (None, None) for a master."""
        self.clusters.setdefault(cluster, set()).add(name)
        bd = self.brokers.setdefault(name, {"cluster": cluster, "brokerAddrs": {}})
        bd["cluster"] = cluster
        addrs = bd["brokerAddrs"]
        for bid in [b for b, a in addrs.items() if a == addr and b != broker_id]:
            del addrs[bid]                  # same address under a new id (a slave promoted...)
        addrs[broker_id] = addr
        self.live[addr] = (now, ha_addr)
        if broker_id == 0:
            for topic, fields in topic_configs.items():
                self.topics.setdefault(topic, {})[name] = {"brokerName": name, **fields}
            return None, None
        master = addrs.get(0)
        return master, (self.live[master][1] if master in self.live else None)

    def unregister(self, name: str, addr: str, broker_id: int) -> None:
        self.live.pop(addr, None)
        bd = self.brokers.get(name)
        if bd is None:
            return
        if bd["brokerAddrs"].get(broker_id) == addr:
            del bd["brokerAddrs"][broker_id]
        if not bd["brokerAddrs"]:
            del self.brokers[name]
            names = self.clusters.get(bd["cluster"], set())
            names.discard(name)
            if not names:
                self.clusters.pop(bd["cluster"], None)
            for topic in [t for t, q in self.topics.items() if name in q]:
                self._drop_queue(topic, name)

    def delete_topic(self, topic: str) -> None:
        """DELETE_TOPIC_IN_NAMESRV: the topic's route, on every broker."""
        self.topics.pop(topic, None)

    def _drop_queue(self, topic: str, name: str) -> None:
        del self.topics[topic][name]
        if not self.topics[topic]:
            del self.topics[topic]

    def expire(self, now: float) -> list[str]:
        """Unregister every broker silent for more than BROKER_EXPIRE_S; -> their addresses."""
        gone = [addr for addr, (seen, _ha) in self.live.items() if now - seen > BROKER_EXPIRE_S]
        for addr in gone:
            for name, bd in list(self.brokers.items()):
                for bid, a in list(bd["brokerAddrs"].items()):
                    if a == addr:
                        self.unregister(name, addr, bid)
            self.live.pop(addr, None)
        return gone

    def route(self, topic: str) -> dict | None:
        """TopicRouteData (FACTS §3.9) or None when no broker serves the topic."""
        queues = self.topics.get(topic)
        if not queues:
            return None
        brokers = [{"brokerAddrs": dict(self.brokers[n]["brokerAddrs"]), "brokerName": n,
                    "cluster": self.brokers[n]["cluster"]} for n in sorted(queues) if n in self.brokers]
        return {"brokerDatas": brokers, "filterServerTable": {},
                "queueDatas": [queues[n] for n in sorted(queues)]}

    def cluster_info(self) -> dict:
        return {"brokerAddrTable": {n: {"brokerAddrs": dict(bd["brokerAddrs"]), "brokerName": n, "cluster": bd["cluster"]}
                                    for n, bd in sorted(self.brokers.items())},
                "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.clusters.items())}}
