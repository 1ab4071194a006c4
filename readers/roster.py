"""What admin tools ask about the appliance's clients, whichever reader they ask
(broker:processor/AdminBrokerProcessor.java): GET_CONSUMER_CONNECTION_LIST (203, ``mqadmin
consumerConnection``), GET_PRODUCER_CONNECTION_LIST (204, ``mqadmin producerConnection``) and
QUERY_TOPIC_CONSUME_BY_WHO (300); and where to ask a consumer itself (GET_CONSUMER_RUNNING_INFO, 307):
the port of the reader its heartbeats come to.

A client's details (its address, language and version; a consumer group's consume type, model
and subscriptions; its producer groups) are known only to the reader its heartbeats come to, so
each reader publishes its own (``shm/roster.py``), at the end of a loop turn in which they
changed; a heartbeat that changes nothing writes nothing (each client sends one every 30 s). A
request reads the files of the other live readers and this reader's details from memory. Which
consumers are a group's members stays the shared client rows' answer (``Members.group_members``),
as for GET_CONSUMER_LIST_BY_GROUP: the files only describe them.
"""
from __future__ import annotations


def consumer_connection(group: str, docs: list[dict], members: list[str]) -> dict | None:
    """The ConsumerConnection of ``group`` from the readers' ``docs`` (this reader's first), its
    connections those of its live ``members`` (each once; a member whose details are not
    published yet is listed by its id alone); None when it has no member."""
    if not members:
        return None
    live, body = set(members), None
    conns: dict[str, dict] = {}
    for doc in docs:
        got = (doc.get("consumers") or {}).get(group)
        if not got:
            continue
        if body is None:                # the group's fields: the first reader's that has it
            body = {k: v for k, v in got.items() if k != "connectionSet"}
        else:                           # subscriptions: every reader's
            for topic, sub in (got.get("subscriptionTable") or {}).items():
                body.setdefault("subscriptionTable", {}).setdefault(topic, sub)
        for c in got.get("connectionSet") or ():
            if c.get("clientId") in live:
                conns.setdefault(c["clientId"], c)
    for client_id in members:
        conns.setdefault(client_id, {"clientAddr": "", "clientId": client_id, "language": "OTHER", "version": 0})
    body = body or {"subscriptionTable": {}}
    body.setdefault("subscriptionTable", {})
    return {"connectionSet": [conns[c] for c in sorted(conns)], **dict(sorted(body.items()))}


def producer_connection(group: str, docs: list[dict]) -> dict | None:
    """The ProducerConnection of ``group``; None when no reader has a client of it."""
    conns: dict[str, dict] = {}
    for doc in docs:
        for c in (doc.get("producers") or {}).get(group) or ():
            conns.setdefault(c.get("clientId"), c)
    return {"connectionSet": [conns[c] for c in sorted(conns)]} if conns else None


def groups_subscribed(topic: str, docs: list[dict]) -> set[str]:
    """The consumer groups with a member that subscribes to ``topic`` (ConsumerManager's
    queryTopicConsumeByWho)."""
    return {group for doc in docs for group, got in (doc.get("consumers") or {}).items()
            if topic in (got.get("subscriptionTable") or {})}


def holder(group: str, client_id: str, docs: list[dict]) -> int | None:
    """The port of the reader whose ``docs`` list ``client_id`` as a member of ``group``."""
    for doc in docs:
        got = (doc.get("consumers") or {}).get(group) or {}
        if any(c.get("clientId") == client_id for c in got.get("connectionSet") or ()):
            return doc.get("port")
    return None
