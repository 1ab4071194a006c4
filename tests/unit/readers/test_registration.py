"""The broker's registration with name servers: one that fails is tried again after a back-off
that doubles from 1 s to the 30 s period, and the back-off starts over once all succeed."""
import asyncio
import socket
import time

from appliance import config
from readers.registration import PERIOD_S, RETRY_FIRST_S, Registrar


def _closed_port() -> int:
    with socket.socket() as s:          # bound, never listening: a connect is refused at once
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failing_name_server_is_retried_after_a_doubling_back_off(tmp_path):
    port = _closed_port()
    cfg = config.load(None, {"namesrvAddr": f"127.0.0.1:{port}", "storePathRootDir": str(tmp_path)})
    reg = Registrar(cfg)
    assert not reg.retry_due()                       # nothing failed yet

    async def attempts(n: int) -> list[float]:
        waits = []
        for _ in range(n):
            t = time.monotonic()
            await reg.register_all()
            waits.append(round(reg.retry_at - t))
            assert reg.failing == {f"127.0.0.1:{port}"} and not reg.retry_due()
        return waits

    try:
        assert asyncio.run(attempts(7)) == [RETRY_FIRST_S * 2 ** i for i in range(5)] + [PERIOD_S] * 2
        reg.retry_at = time.monotonic() - 0.001
        assert reg.retry_due()
        reg.failing.clear()                          # as after a successful round
        assert not reg.retry_due()
    finally:
        reg.close()
