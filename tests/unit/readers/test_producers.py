"""Producer groups' clients on a reader (readers/producers.py): registered by heartbeats, forgotten
when their connection closes, when they unregister, or after 120 s without a heartbeat."""
from rocketbox.readers.producers import Producers

WHO = {"clientAddr": "10.0.0.1:5000", "clientId": "c1", "language": "JAVA", "version": 399}


def test_producers_come_and_go():
    p, conn, other = Producers(), object(), object()
    p.heartbeat(conn, "c1", ["pg", "CLIENT_INNER_PRODUCER"], 1_000, WHO)
    p.heartbeat(other, "c2", ["pg"], 1_000, {**WHO, "clientId": "c2"})
    assert p.details() == {"CLIENT_INNER_PRODUCER": [WHO], "pg": [WHO, {**WHO, "clientId": "c2"}]}
    p.details_changed = False
    p.heartbeat(conn, "c1", ["pg"], 60_000, WHO)            # a repeat: nothing to publish
    assert not p.details_changed
    assert sorted(p.expire(122_000)) == [("CLIENT_INNER_PRODUCER", "c1"), ("pg", "c2")]   # silent since 1 s
    assert p.details() == {"pg": [WHO]} and p.details_changed
    assert not p.remove("pg", "nobody") and p.remove("pg", "c1") and p.details() == {}
    p.heartbeat(conn, "c1", ["pg"], 1_000, WHO)
    p.drop_connection(other)
    assert p.details() == {"pg": [WHO]}
    p.drop_connection(conn)
    assert p.details() == {}
