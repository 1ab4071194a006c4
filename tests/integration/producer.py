"""A producer process for the integration tests: puts ``count`` messages with unique keys through
the rings and appends each acknowledged key to ``ack_file`` (fsynced), so a test can check that
every acknowledged message survived.  With ``sync_wait`` a message counts as acknowledged only
once the flusher has it on disk (what a SYNC_FLUSH broker answers)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from rocketbox.appliance import config  # noqa: E402
from rocketbox.shm.ringclient import PutRequest, RingClient  # noqa: E402
from rocketbox.shm.state import SharedState  # noqa: E402


def main():
    a = json.loads(sys.argv[1])
    cfg = config.load(a["conf"])
    sh = SharedState(cfg.geometry()).attach()
    client = RingClient(cfg, sh).open()
    ack = open(a["ack_file"], "a")
    sent, i = 0, 0
    while sent < a["count"]:
        reqs, keys = [], []
        for _ in range(min(a["batch"], a["count"] - sent)):
            key = f"{a['name']}-{i}"
            reqs.append(PutRequest(a["topic"], i % a["queues"], [f"body-{key}".encode() * 8],
                                   [{"KEYS": key, "UNIQ_KEY": key.upper(), "TAGS": f"Tag{i % 3}"}]))
            keys.append(key)
            i += 1
        sent += len(reqs)
        try:
            results = client.put(reqs, timeout=30)
        except TimeoutError:
            continue
        done = [k for k, r in zip(keys, results) if r.ok]
        if a["sync_wait"] and done:
            end = max(r.end_offset for r in results if r.ok)
            if not client.wait_flushed(end, 30):
                continue
        if done:
            ack.write("".join(k + "\n" for k in done))
            ack.flush()
            os.fsync(ack.fileno())
        if a["delay_s"]:
            import time
            time.sleep(a["delay_s"])
    client.close()
    sh.close()


if __name__ == "__main__":
    main()
