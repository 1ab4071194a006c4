"""Producer groups' clients on this reader (broker:client/ProducerManager.java), for
GET_PRODUCER_CONNECTION_LIST (``mqadmin producerConnection``).

A client's heartbeat names the producer groups it sends for (a Java client names its own
``CLIENT_INNER_PRODUCER`` too, as RocketMQ then lists it); it is registered under each, with the
connection it came over, and forgotten when that connection closes, when it unregisters
(UNREGISTER_CLIENT with its producerGroup), or after 120 s without a heartbeat, as RocketMQ's
ProducerManager forgets it.  Nothing on the send path looks here.  What a reader holds is
published for the other readers by ``readers.roster``.
"""
from __future__ import annotations

from rocketbox.readers.members import CHANNEL_EXPIRE_MS


class Producers:
    def __init__(self):
        self.groups: dict[str, dict[str, tuple]] = {}   # group -> client id -> (conn, its Connection, last heartbeat ms)
        self.details_changed = True                     # ``details`` differs from what was published

    def heartbeat(self, conn, client_id: str, groups: list[str], now_ms: int, who: dict) -> None:
        for group in groups:
            clients = self.groups.setdefault(group, {})
            old = clients.get(client_id)
            if old is None or old[0] is not conn or old[1] != who:
                self.details_changed = True
            clients[client_id] = (conn, who, now_ms)

    def remove(self, group: str, client_id: str) -> bool:
        clients = self.groups.get(group, {})
        if clients.pop(client_id, None) is None:
            return False
        if not clients:
            del self.groups[group]
        self.details_changed = True
        return True

    def drop_connection(self, conn) -> None:
        for group, client_id in [(g, c) for g, clients in self.groups.items()
                                 for c, (ch, _who, _ms) in clients.items() if ch is conn]:
            self.remove(group, client_id)

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Clients silent for 120 s: forgotten; -> (group, client id)."""
        gone = [(g, c) for g, clients in self.groups.items() for c, (_ch, _who, ms) in clients.items()
                if now_ms - ms > CHANNEL_EXPIRE_MS]
        for group, client_id in gone:
            self.remove(group, client_id)
        return gone

    def details(self) -> dict:
        """group -> the Connection of each of its clients here."""
        return {g: [who for _c, (_ch, who, _ms) in sorted(clients.items())] for g, clients in sorted(self.groups.items())}
