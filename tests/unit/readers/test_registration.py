"""The broker's registration with name servers: one that fails is tried again after a back-off
that doubles from 1 s to the 30 s period, and the back-off starts over once all succeed; a
registration after a change carries the changed topics alone, under topics.json's new dataVersion."""
import asyncio
import json
import socket
import time

from rocketbox.readers.registration import PERIOD_S, RETRY_FIRST_S, Registrar
from rocketbox.store import topicjournal
from rocketbox.writer.topics import topic_config
from tests.unit.writer.rig import running_store, small_config


def _closed_port() -> int:
    with socket.socket() as s:          # bound, never listening: a connect is refused at once
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failing_name_server_is_retried_after_a_doubling_back_off(tmp_path):
    port = _closed_port()
    cfg = small_config(tmp_path / "store", "reg", namesrvAddr=f"127.0.0.1:{port}")

    async def attempts(reg: Registrar, n: int) -> list[float]:
        waits = []
        for _ in range(n):
            t = time.monotonic()
            await reg.register_all()
            waits.append(round(reg.retry_at - t))
            assert reg.failing == {f"127.0.0.1:{port}"} and not reg.retry_due()
        return waits

    with running_store(cfg) as (sh, _w, _d, _c):
        reg = Registrar(cfg, sh.views)
        assert not reg.retry_due()                   # nothing failed yet
        try:
            assert asyncio.run(attempts(reg, 7)) == [RETRY_FIRST_S * 2 ** i for i in range(5)] + [PERIOD_S] * 2
            reg.retry_at = time.monotonic() - 0.001
            assert reg.retry_due()
            reg.failing.clear()                      # as after a successful round
            assert not reg.retry_due()
        finally:
            reg.close()


def _table(body: bytes) -> tuple[dict, dict]:
    wrapper = json.loads(body)["topicConfigSerializeWrapper"]
    return wrapper["dataVersion"], wrapper["topicConfigTable"]


def test_a_registration_after_a_change_carries_the_changed_topics_alone(tmp_path):
    cfg = small_config(tmp_path / "store", "regd", namesrvAddr="127.0.0.1:9")
    with running_store(cfg) as (sh, w, _d, _c):
        w.topics.upsert(topic_config("Before", 2, 2))
        reg = Registrar(cfg, sh.views)
        assert reg._changed() is None                # what was there when it started goes whole
        w.topics.upsert(topic_config("Made", 4, 2))
        version, table = _table(reg._changed())
        on_disk = topicjournal.read(cfg.config_dir)
        assert version == on_disk["dataVersion"] and version["counter"] >= 2
        assert table == {"Made": topic_config("Made", 4, 2)}
        assert reg._changed() is None                # registered: nothing new
        w.topics.upsert(topic_config("Before", 2, 2, perm=4, order=True))     # changed in place
        w.topics.upsert(topic_config("Other", 1, 1))
        version, table = _table(reg._changed())
        assert table == {"Before": topic_config("Before", 2, 2, perm=4, order=True),
                         "Other": topic_config("Other", 1, 1)}
        assert version["counter"] == on_disk["dataVersion"]["counter"] + 2
        w.topics.upsert(topic_config("Other", 1, 1))                          # the same again
        assert reg._changed() is None
        # the whole table is topics.json's, and what it covered is not sent again
        w.topics.upsert(topic_config("Late", 3, 3))
        version, table = _table(reg._whole())
        on_disk = topicjournal.read(cfg.config_dir)
        assert table == on_disk["topicConfigTable"] and "Late" in table and version == on_disk["dataVersion"]
        assert reg._changed() is None
