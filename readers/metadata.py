"""What a slave copies from its master every 10 s (4.9.8's SlaveSynchronize, FACTS-wave2 §1), as
broker:processor/AdminBrokerProcessor.java answers it: GET_ALL_CONSUMER_OFFSET (43, the committed
offsets, fastjson's unquoted queue-id keys), GET_ALL_DELAY_OFFSET (45, delayOffset.json as it is)
and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201, subscriptionGroup.json).  GET_ALL_TOPIC_CONFIG (21) is
the admin's (``readers/admin.py``)."""
from __future__ import annotations

import os
import time

from rocketbox.remoting.codes import RequestCode as R
from rocketbox.store import configfile

EMPTY_DELAY = b'{"offsetTable":{}}'


class MetadataProcessor:
    def __init__(self, broker):
        self.cfg, self.offsets, self.ctl = broker.cfg, broker.offsets, broker.sh.control

    def handlers(self) -> dict:
        return {R.GET_ALL_CONSUMER_OFFSET: self.consumer_offsets, R.GET_ALL_DELAY_OFFSET: self.delay_offsets,
                R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.subscription_groups}

    def consumer_offsets(self, cmd, _conn):
        return cmd.response(body=configfile.unquote_queue_ids(configfile.dumps({"offsetTable": self.offsets.table()})))

    def delay_offsets(self, cmd, _conn):
        return cmd.response(body=self._file("delayOffset.json") or EMPTY_DELAY)

    def subscription_groups(self, cmd, _conn):
        body = self._file("subscriptionGroup.json")
        if body is None:
            body = configfile.dumps({"dataVersion": {"counter": 0, "timestamp": int(time.time() * 1000)},
                                     "subscriptionGroupTable": {}})
        return cmd.response(body=body)

    def _file(self, name: str) -> bytes | None:
        try:
            with open(os.path.join(self.cfg.config_dir, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
