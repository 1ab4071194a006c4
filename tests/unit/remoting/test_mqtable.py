"""Maps keyed by MessageQueue in fastjson's object-literal form (FACTS §3.9)."""
from __future__ import annotations

import pytest

from rocketbox.remoting import mqtable


def test_mqtable_reads_what_it_writes_and_what_fastjson_writes():
    table = {("T", "b", 1): {"maxOffset": 3}, ("T", "b", 0): {"maxOffset": 5}, ("%RETRY%g", "b", 0): {"maxOffset": 1}}
    body = mqtable.encode({"consumeTps": 1.5}, "offsetTable", table)
    assert body.startswith(b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"%RETRY%g"}:')
    assert mqtable.decode(body, "offsetTable") == ({"consumeTps": 1.5}, table)
    # as fastjson spaces it, with an escaped quote in a broker name
    fj = b'{ "offsetTable" : { { "brokerName" : "b\\"x", "queueId" : 7, "topic" : "T" } : { "a" : 1 } } }'
    assert mqtable.decode(fj, "offsetTable") == ({}, {("T", 'b"x', 7): {"a": 1}})
    with pytest.raises(ValueError):
        mqtable.decode(b'{"offsetTable":{{"brokerName":1}:2}}', "offsetTable")
