"""Consumer-group membership across all readers (FACTS §3.9 HeartbeatData, ClientManageProcessor).

Each reader owns the client rows of its ring slot in shared memory (group, client id, last
heartbeat) and bumps its slot's ``members_version`` when they change; a group's members are the
union of every live reader's fresh rows.  So GET_CONSUMER_LIST_BY_GROUP answers the same on every
reader, and a reader that sees another's version move re-reads the groups its own connections are
in and sends NOTIFY_CONSUMER_IDS_CHANGED to them when the member set changed — which is how a
client on reader 0 learns that one on reader 1 joined.  A reader whose rows change posts the other
readers' wakers, so they look at once (a wake compares the versions' bytes, ~0.26 µs) rather than at
their next 1 s tick: members of one group on two readers that rebalanced on different views both
consumed the queues they disagreed on for up to that second.

Subscriptions (topic, tag codes, subVersion) stay with the reader that got the heartbeat: a client
sends heartbeats and pulls on the same connection.  What admin tools ask of a group's members
(their addresses, languages and versions; the group's consume type, model and subscriptions:
GET_CONSUMER_CONNECTION_LIST) is each reader's too, and is published for the others by
``readers.roster`` (``Members.details``).
"""
from __future__ import annotations

import time

import numpy as np
import psutil

from rocketbox.shm.layout import CLIENT, S
from rocketbox.store.configfile import loads_object

CHANNEL_EXPIRE_MS = 120_000       # a client silent this long is gone (ClientHousekeepingService)
GROUP_MAX_BYTES = 255             # RocketMQ's Validators.CHARACTER_MAX_LENGTH
CLIENT_ID_MAX_BYTES = CLIENT["client_id"].itemsize   # ip@instanceName[@unitName]: never cut short, or a
                                  # client would not find itself among its group's members


class MembersFull(RuntimeError):
    """This reader's client rows are all taken: a new (group, client) pair is refused."""


# Java's enums, in ordinal order: a heartbeat may name them or give the ordinal (the C++ client)
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")


class Heartbeat:
    """A HEART_BEAT's HeartbeatData: the client, its consumer groups, its producer groups."""
    __slots__ = ("client_id", "consumers", "producers")

    def __init__(self, client_id: str, consumers: list["ConsumerData"], producers: list[str]):
        self.client_id, self.consumers, self.producers = client_id, consumers, producers


class ConsumerData:
    """One consumerDataSet entry: a group, how it consumes, what it subscribes to."""
    __slots__ = ("group", "consume_type", "model", "consume_from", "subs")

    def __init__(self, d: dict):
        if not isinstance(d, dict):
            raise ValueError(f"consumerDataSet entry {str(d)[:80]} is not an object")
        self.group = _group_name(d.get("groupName"), "consumer")
        self.consume_type = _enum(d, "consumeType", CONSUME_TYPES, self.group)
        self.model = _enum(d, "messageModel", MESSAGE_MODELS, self.group)
        self.consume_from = _enum(d, "consumeFromWhere", CONSUME_FROM, self.group)
        self.subs = [Subscription(sd) for sd in _list(d, "subscriptionDataSet", f"group {self.group}")]

    def as_json(self) -> dict:
        """Its ConsumerConnection fields (ConsumerGroupInfo's), those the client gave."""
        out = {"consumeFromWhere": self.consume_from, "consumeType": self.consume_type, "messageModel": self.model,
               "subscriptionTable": {s.topic: s.as_json() for s in self.subs}}
        return {k: v for k, v in out.items() if v is not None}


def parse_heartbeat(body: bytes) -> Heartbeat:
    """A HEART_BEAT's body, or ValueError naming what does not fit HeartbeatData."""
    data = loads_object(body)
    client_id = data.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise ValueError("no clientID")
    if len(client_id.encode()) > CLIENT_ID_MAX_BYTES:
        raise ValueError(f"clientID '{client_id[:200]}' is longer than {CLIENT_ID_MAX_BYTES} bytes")
    consumers = [ConsumerData(c) for c in _list(data, "consumerDataSet", "the heartbeat")]
    producers = []
    for p in _list(data, "producerDataSet", "the heartbeat"):
        if not isinstance(p, dict):
            raise ValueError(f"producerDataSet entry {str(p)[:80]} is not an object")
        producers.append(_group_name(p.get("groupName"), "producer"))
    return Heartbeat(client_id, consumers, producers)


def _group_name(group, kind: str) -> str:
    if not isinstance(group, str) or not group or len(group.encode()) > GROUP_MAX_BYTES:
        raise ValueError(f"{kind} group name '{str(group)[:200]}' is empty or longer than {GROUP_MAX_BYTES} bytes")
    return group


def _enum(d: dict, key: str, names: tuple[str, ...], group: str) -> str | None:
    """A Java enum's name, given as its name or its ordinal; None when absent."""
    v = d.get(key)
    if v is None or v in names:
        return v
    if type(v) is int and 0 <= v < len(names):
        return names[v]
    raise ValueError(f"{key} {str(v)[:80]} of group {group} is not one of {', '.join(names)} (or their ordinals)")


def _list(d: dict, key: str, where: str) -> list:
    got = d.get(key) or []
    if not isinstance(got, list):
        raise ValueError(f"{key} of {where} is not a list")
    return got


class Subscription:
    """One SubscriptionData of a heartbeat (C++ clients send subVersion as a string)."""
    __slots__ = ("topic", "expression", "codes", "sub_version", "expression_type", "tags")

    def __init__(self, d: dict):
        if not isinstance(d, dict):
            raise ValueError(f"subscriptionDataSet entry {str(d)[:80]} is not an object")
        self.topic, self.expression = d.get("topic"), d.get("subString") or "*"
        if not isinstance(self.topic, str) or not isinstance(self.expression, str):
            raise ValueError(f"subscription {str(d)[:120]} has no topic or a subString that is not text")
        self.expression_type = d.get("expressionType") if isinstance(d.get("expressionType"), str) else "TAG"
        tags = d.get("tagsSet")
        self.tags = ([t for t in tags if isinstance(t, str)] if isinstance(tags, list)
                     else [t.strip() for t in self.expression.split("||") if t.strip() and t.strip() != "*"])
        try:
            self.codes = [int(c) for c in _list(d, "codeSet", f"topic {self.topic}")]
            if any(not -2**31 <= c < 2**31 for c in self.codes):
                raise ValueError(f"codeSet {self.codes[:8]} holds a value past 32 bits")
            self.sub_version = int(d.get("subVersion") or 0)
        except (TypeError, ValueError) as e:
            raise ValueError(f"subscription to {self.topic}: {e}") from None

    @property
    def tag_codes(self) -> list[int] | None:
        """Codes to filter on, None for all messages."""
        return None if self.expression.strip() in ("", "*") or not self.codes else self.codes

    def as_json(self) -> dict:
        """As Java's SubscriptionData is written (tagsSet as the client sent it, else its tags)."""
        return {"classFilterMode": False, "codeSet": self.codes, "expressionType": self.expression_type,
                "subString": self.expression, "subVersion": self.sub_version, "tagsSet": self.tags,
                "topic": self.topic}


class Members:
    def __init__(self, shared, slot: int):
        self.sh, self.slot = shared, slot
        self.all_rows = shared.views["clients"]
        self.rows = self.all_rows[slot]
        self.rows[:] = np.zeros(len(self.rows), CLIENT)       # a new owner: whatever was here is stale
        self.version = shared.slots[:, S.MEMBERS_VERSION]
        self.bump()
        self.row_of: dict[tuple[str, str], int] = {}         # (group, client id) -> row
        self.conns: dict[str, dict[str, object]] = {}        # group -> client id -> connection
        self.data: dict[str, ConsumerData] = {}              # group -> its last heartbeat's ConsumerData
        self.who: dict[tuple[str, str], dict] = {}           # (group, client id) -> its Connection (admin's)
        self.details_changed = True                          # ``details`` differs from what was published
        self.known: dict[str, frozenset] = {}                # group -> member ids (bytes) last notified about
        self.seen_versions = self.version.tobytes()

    def bump(self) -> None:
        """This reader's rows changed: its version moves, and every other live reader is woken."""
        self.version[self.slot] += 1
        owners = self.sh.slots[:, S.OWNER_PID]
        for i in np.flatnonzero(owners > 0).tolist():
            if i != self.slot:
                self.sh.slot_wakers[i].post()

    # ------------------------------------------------------------ local changes
    def heartbeat(self, conn, client_id: str, data: ConsumerData, now_ms: int, who: dict) -> bool:
        """Register one consumer group of a HEART_BEAT (``parse_heartbeat``), sent over ``conn``
        by a client ``who`` is (its Connection: clientAddr, clientId, language, version); True
        when the group's membership changed.  The group's subscriptions are its last heartbeat's,
        as in RocketMQ's ConsumerGroupInfo."""
        group = data.group
        key = (group, client_id)
        row = self.row_of.get(key)
        changed = row is None or self.conns.get(group, {}).get(client_id) is not conn
        if row is None:
            free = np.flatnonzero(self.rows["heartbeat_ms"] == 0)
            if not len(free):
                raise MembersFull(f"this reader already holds {len(self.rows)} consumer group members (a consumer "
                                  f"takes one per group it is in): consumer {client_id} of group {group} is not "
                                  f"registered; raise shmClientRows, or readerProcessNums")
            row = self.row_of[key] = int(free[0])
            self.rows[row] = (group.encode(), client_id.encode(), now_ms)
            self.bump()
        else:
            self.rows["heartbeat_ms"][row] = now_ms
        old = self.data.get(group)
        if old is not None:
            # as 4.9.8's ConsumerGroupInfo.updateSubscription: a topic's subscription is replaced only
            # by a newer version, so the members of a group, whose versions differ, do not undo each
            # other's (a pull carrying the newest would be answered SUBSCRIPTION_NOT_LATEST for ever)
            kept = {sub.topic: sub for sub in old.subs}
            data.subs = [sub if sub.topic not in kept or sub.sub_version > kept[sub.topic].sub_version
                         else kept[sub.topic] for sub in data.subs]
        if old is None or old.as_json() != data.as_json():
            self.details_changed = True
        self.data[group] = data
        if self.who.get(key) != who:
            self.who[key] = who
            self.details_changed = True
        self.conns.setdefault(group, {})[client_id] = conn
        return changed

    def remove(self, group: str, client_id: str) -> bool:
        row = self.row_of.pop((group, client_id), None)
        members = self.conns.get(group, {})
        members.pop(client_id, None)
        if self.who.pop((group, client_id), None) is not None:
            self.details_changed = True
        if not members:
            self.conns.pop(group, None)
            self.data.pop(group, None)
        if row is None:
            return False
        self.rows["heartbeat_ms"][row] = 0
        self.bump()
        return True

    def drop_connection(self, conn) -> list[str]:
        """A connection closed: forget its clients; -> the groups that lost a member."""
        gone = [(g, c) for g, m in self.conns.items() for c, ch in m.items() if ch is conn]
        return sorted({g for g, c in gone if self.remove(g, c)})

    def expire(self, now_ms: int) -> list[tuple[str, str, object]]:
        """Clients whose last heartbeat is older than 120 s: removed; -> (group, client, conn)."""
        out = []
        for (g, c), row in list(self.row_of.items()):
            if now_ms - int(self.rows["heartbeat_ms"][row]) > CHANNEL_EXPIRE_MS:
                out.append((g, c, self.conns.get(g, {}).get(c)))
                self.remove(g, c)
        return out

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """The group's subscription to ``topic`` as its last heartbeat here gave it."""
        data = self.data.get(group)
        for sub in data.subs if data is not None else ():
            if sub.topic == topic:
                return sub
        return None

    def details(self) -> dict:
        """This reader's consumer groups as admin tools see them, for ``readers.roster``: group
        -> its ConsumerConnection fields and the Connection of each member here."""
        out = {}
        for (group, _client), who in sorted(self.who.items()):
            if group not in out:
                out[group] = {**self.data[group].as_json(), "connectionSet": []}
            out[group]["connectionSet"].append(who)
        return out

    # ------------------------------------------------------------ the shared view
    def live_slots(self) -> list[int]:
        """The ring slots of the live readers (this one's included); a dead reader's are not."""
        owners = self.sh.slots[:, S.OWNER_PID]
        return [i for i in np.flatnonzero(owners > 0).tolist() if i == self.slot or psutil.pid_exists(int(owners[i]))]

    def _live_rows(self):
        """The client rows of every live reader's slot."""
        for i in self.live_slots():
            yield self.all_rows[i]

    def group_members(self, group: str, now_ms: int | None = None) -> list[str]:
        """Client ids of the group on every live reader, sorted as Java's String.compareTo would."""
        fresh_after = (now_ms or int(time.time() * 1000)) - CHANNEL_EXPIRE_MS
        want = group.encode()
        out: set[str] = set()
        for rows in self._live_rows():
            hit = (rows["group"] == want) & (rows["heartbeat_ms"] > fresh_after)
            out.update(c.decode() for c in rows["client_id"][hit].tolist())
        return sorted(out, key=lambda s: s.encode("utf-16-be"))

    def changed_groups(self) -> list[str]:
        """Local groups whose member set differs from what their connections were last told.
        Every group's members are read in one pass over the rows (a pass per group cost ~30 µs
        each: 30 ms per membership change on a reader with 1,000 groups)."""
        fresh_after = int(time.time() * 1000) - CHANNEL_EXPIRE_MS
        by_group: dict[bytes, set[bytes]] = {}
        for rows in self._live_rows():
            fresh = np.flatnonzero(rows["heartbeat_ms"] > fresh_after)
            for g, c in zip(rows["group"][fresh].tolist(), rows["client_id"][fresh].tolist()):
                by_group.setdefault(g, set()).add(c)
        out = []
        for group in list(self.conns):
            now = frozenset(by_group.get(group.encode(), ()))
            if self.known.get(group) != now:
                self.known[group] = now
                out.append(group)
        for group in [g for g in self.known if g not in self.conns]:
            del self.known[group]
        return out

    def others_moved(self) -> bool:
        """True when any reader's rows changed since the last call (on every wake: bytes compared,
        not ``np.array_equal``'s ~1.7 µs)."""
        now = self.version.tobytes()
        if now == self.seen_versions:
            return False
        self.seen_versions = now
        return True

    def close(self) -> None:
        self.rows["heartbeat_ms"] = 0
        self.bump()
