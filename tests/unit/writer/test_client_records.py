"""RingClient's stored records: the kept record templates never mix up two producers' fields."""
import pytest

from rocketbox.store import message as m
from tests.unit.writer.rig import running_store, small_config


def test_records_from_kept_templates_are_each_producers_own(tmp_path):
    cfg = small_config(tmp_path / "store", "recs")
    with running_store(cfg) as (_sh, _w, _d, c):
        store_ip, store_port, _ = m.pack_host((cfg.brokerIP1, cfg.listenPort))
        cases = [(("10.0.0.1", 4000), 0, 0), (("10.0.0.2", 4000), 0, 0), (("::1", 5000), 0, 0),
                 (("10.0.0.1", 4000), m.TX_PREPARED, 0), (("10.0.0.1", 4000), 0, 3), (("10.0.0.1", 4000), 0, 0)]
        for i, (host, sys_flag, reconsume) in enumerate(cases * 2):
            got = c.records(b"T", i % 3, sys_flag, [b"body%d" % i], [b"K\x01v"], [i], 1000 + i, host, reconsume)
            one = c.record(b"T", i % 3, sys_flag, b"body%d" % i, b"K\x01v", i, 1000 + i, host, reconsume)
            ip, port, _ = m.pack_host(host)
            want = m.encode_record(topic=b"T", queue_id=i % 3, body=b"body%d" % i, properties=b"K\x01v", flag=i,
                                   sys_flag=sys_flag, born_ts=1000 + i, born_ip=ip, born_port=port, store_ip=store_ip,
                                   store_port=store_port, reconsume_times=reconsume)
            for recs in (got, one):
                assert recs.sizes == [len(want)] and b"".join(recs.parts) == want, (host, sys_flag, reconsume)
        assert len(c.templates) == len({(i % 3, *case) for i, case in enumerate(cases * 2)})
        for i in range(5000):                          # many producers: the kept templates stay bounded
            c.records(b"T", 0, 0, [b"x"], [b""], [0], 1, ("10.0.%d.%d" % (i // 256, i % 256), 1))
        assert len(c.templates) <= 4096


def test_a_single_records_sizes_are_refused_as_in_a_list(tmp_path):
    cfg = small_config(tmp_path / "store", "recs1")
    with running_store(cfg) as (_sh, _w, _d, c):
        for body, props, why in ((b"x" * (cfg.maxMessageSize + 1), b"", "body size exceeded"),
                                 (b"x", b"K\x01" + b"v" * m.PROPERTIES_MAX_LEN, "properties length too long")):
            for call in (lambda: c.record(b"T", 0, 0, body, props, 0, 1, ("10.0.0.1", 1)),
                         lambda: c.records(b"T", 0, 0, [body], [props], [0], 1, ("10.0.0.1", 1))):
                with pytest.raises(m.MessageRejected, match=why) as e:
                    call()
                assert e.value.code == m.MESSAGE_ILLEGAL


@pytest.mark.parametrize("host, v6", [(("10.0.0.1", 1), False), (("::1", 1), True), (("fe80::1", 2), True),
                                      (("::ffff:10.0.0.1", 3), True), (("0.0.0.0", 0), False)])
def test_a_request_row_marks_an_ipv6_born_host_as_its_records_do(host, v6):
    """The writer finds a record's store time by the row's host bits: they must be the record's."""
    from rocketbox.shm.ringclient import RingClient
    row = RingClient.row(3, 1, m.TX_PREPARED, host, 2, True)
    assert row[3] == m.TX_PREPARED | (m.BORNHOST_V6 if v6 else 0) and m.pack_host(host)[2] == v6
    rec = m.decode_record(m.encode_record(topic=b"T", queue_id=1, body=b"b", properties=b"", sys_flag=row[3],
                                          born_ip=m.pack_host(host)[0]))
    assert rec.sys_flag & m.BORNHOST_V6 == row[3] & m.BORNHOST_V6
