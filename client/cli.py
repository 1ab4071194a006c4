"""``appliance produce`` and ``appliance consume``: send to and tail a topic from a terminal."""
from __future__ import annotations

import asyncio
import sys

from client.consumer import PushConsumer
from client.errors import MQClientError
from client.message import Message
from client.producer import Producer


def add_arguments(sub) -> None:
    p = sub.add_parser("produce", help="send messages (arguments, else one per stdin line)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--tags")
    p.add_argument("--keys")
    p.add_argument("-n", "--namesrv", help="name servers (default: namesrvAddr of the config)")
    p.add_argument("-c", "--config")
    p.add_argument("messages", nargs="*")
    p = sub.add_parser("consume", help="print a topic's messages as they arrive, until Ctrl-C")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="rocketbox_cli")
    p.add_argument("-e", "--expression", default="*", help="tags, e.g. 'TagA || TagB'")
    p.add_argument("--from-first", action="store_true", help="a new group starts at the oldest message")
    p.add_argument("--orderly", action="store_true",
                   help="consume each queue in order under the broker's queue lock (MessageListenerOrderly)")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")


async def _produce(args, namesrv: str) -> int:
    bodies = args.messages or (line.rstrip("\n") for line in sys.stdin)
    async with Producer("rocketbox_cli", namesrv) as p:
        for body in bodies:
            r = await p.send(Message(args.topic, body.encode(), tags=args.tags, keys=args.keys))
            print(f"{r.status} msgId={r.msg_id} queue={r.queue.queue_id} offset={r.queue_offset}", flush=True)
    return 0


async def _consume(args, namesrv: str) -> int:
    def show(msgs):
        for m in msgs:
            print(f"queue={m.queue_id} offset={m.queue_offset} msgId={m.msg_id} tags={m.tags or ''} "
                  f"{m.body.decode(errors='replace')}", flush=True)
        return True
    c = PushConsumer(args.group, namesrv,
                     consume_from="CONSUME_FROM_FIRST_OFFSET" if args.from_first else "CONSUME_FROM_LAST_OFFSET",
                     orderly=args.orderly)
    await c.subscribe(args.topic, args.expression).register(show).start()
    try:
        await asyncio.Event().wait()
    finally:
        await c.shutdown()
    return 0


def main(args, cfg) -> int:
    namesrv = args.namesrv or cfg.namesrvAddr
    if not namesrv:
        print("appliance: no name server: pass --namesrv or set namesrvAddr", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_produce(args, namesrv) if args.cmd == "produce" else _consume(args, namesrv))
    except KeyboardInterrupt:
        return 0
    except MQClientError as e:
        maybe = "; a try went unanswered, so the message may be stored all the same" if e.may_be_stored else ""
        print(f"appliance {args.cmd}: {e}{maybe}", file=sys.stderr)
        return 1
