"""The readers' client details, published for the other processes: one JSON file per ring slot
in a directory beside the shared segments (``SharedState.roster_dir``), written by that slot's
reader alone, a temp file renamed over the last so that whoever reads it gets one whole version
(``{"pid", "port", "consumers", "producers"}``). A file whose pid is not its slot's owner's, a dead
or replaced reader's, is ignored. Readers answer admin requests from them (``readers/roster.py``);
the scheduler finds there which reader holds a producer group's connections (transaction checks).
"""
from __future__ import annotations

import contextlib
import logging
import os

import orjson

from rocketbox.store.configfile import loads_object

log = logging.getLogger("rocketbox.roster")
HOP = "rocketboxForwardedBy"    # extField of a request another process forwards to a reader (its slot) for
                                # the reader's own clients: a client never sends it
GROUP = "group"                 # with HOP: the producer or consumer group it is for


class Roster:
    def __init__(self, directory: str, slot: int):
        self.dir, self.slot = directory, slot
        os.makedirs(directory, exist_ok=True)
        self.path = self._path(slot)

    def _path(self, slot: int) -> str:
        return os.path.join(self.dir, f"slot{slot}.json")

    def publish(self, doc: dict) -> None:
        """This reader's details now: ``{"pid", "port", "consumers", "producers"}``."""
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(orjson.dumps(doc))
            os.replace(tmp, self.path)
        except OSError as e:            # the others then read the last version: logged, not fatal
            log.warning("publishing this reader's clients to %s failed: %s", self.path, e)

    def others(self, owners: dict[int, int]) -> list[dict]:
        """What the live readers ``owners`` (slot -> pid) other than this one published."""
        return published(self.dir, {slot: pid for slot, pid in owners.items() if slot != self.slot})

    def close(self) -> None:
        for path in (self.path, self.path + ".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def published(directory: str, owners: dict[int, int]) -> list[dict]:
    """What the live readers ``owners`` (slot -> pid) published, in slot order."""
    out = []
    for slot, pid in sorted(owners.items()):
        try:
            with open(os.path.join(directory, f"slot{slot}.json"), "rb") as f:
                doc = loads_object(f.read())
        except (OSError, ValueError):
            continue
        if doc.get("pid") == pid:
            out.append(doc)
    return out
