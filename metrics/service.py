"""The metrics role (``appliance run metrics``): ``GET /metrics`` in Prometheus' text format on
``metricsPort`` (5557, the port rocketmq-exporter serves; 0: the role does not run).

Each scrape reads what the other roles already publish (``collect.py``); the role counts nothing
itself and nothing on the send or pull path waits for it.  HTTP is the least a scraper needs: one
request per connection (``Connection: close``), GET or HEAD, ``/metrics`` (``/`` names it), a
request head of at most 8 KiB read within 10 s; anything else gets its 4xx and the connection
closed.  docs/METRICS.md lists the names.
"""
from __future__ import annotations

import asyncio
import logging

from rocketbox.metrics.collect import Collector
from rocketbox.metrics.exposition import CONTENT_TYPE, render
from rocketbox.net.role import ServerRole

log = logging.getLogger("rocketbox.metrics")
MAX_HEAD = 8192
READ_TIMEOUT_S = 10.0
INDEX = b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n"


def answer(head: bytes, scrape) -> bytes:
    """The whole response to a request whose head (request line and headers) is ``head``;
    ``scrape()`` gives the metrics' body when they are asked for."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response(400, "text/plain", b"bad request line\n")
    method, target, _version = parts
    if method not in ("GET", "HEAD"):
        return _response(405, "text/plain", b"only GET and HEAD\n", extra="Allow: GET, HEAD\r\n")
    path = target.split("?", 1)[0]
    if path == "/metrics":
        body = scrape()
        return _response(200, CONTENT_TYPE, body, head_only=method == "HEAD")
    if path == "/":
        return _response(200, "text/html", INDEX, head_only=method == "HEAD")
    return _response(404, "text/plain", b"not found: try /metrics\n")


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error"}


def _response(status: int, content_type: str, body: bytes, head_only: bool = False, extra: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


class MetricsService(ServerRole):
    def __init__(self, cfg, shared):
        super().__init__()
        from rocketbox.appliance.roles import roles_for  # (the role table names this module: imported late)
        self.cfg = cfg
        self.collector = Collector(cfg, shared, [r for r in roles_for(cfg) if r != "metrics"])

    def scrape(self) -> bytes:
        return render(self.collector.families())

    async def serve(self) -> None:
        server = await asyncio.start_server(self._client, "0.0.0.0", self.cfg.metricsPort, limit=MAX_HEAD,
                                            reuse_address=True)
        log.info("metrics on :%d/metrics", self.cfg.metricsPort)
        try:
            while not self.stop_requested:
                await self.sleep(1.0)
        finally:
            server.close()
            await server.wait_closed()
            self.collector.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            try:
                out = answer(head, self.scrape)
            except Exception:                        # a bug in a collector: say so, keep serving
                log.exception("a scrape failed")
                out = _response(500, "text/plain", b"the scrape failed: see the metrics role's log\n")
        except asyncio.LimitOverrunError:
            out = _response(431, "text/plain", b"request head over 8 KiB\n")
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, asyncio.CancelledError):
            writer.close()            # (cancelled: the role stops with this connection still idle)
            return
        try:
            writer.write(out)
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
