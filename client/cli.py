"""``appliance produce`` and ``appliance consume``: send to and tail a topic from a terminal;
``appliance cluster``, ``topic-status``, ``progress``, ``connections`` and ``consumer-status``: the
brokers and their traffic, a topic's queues and the groups that consume it, how far behind a
consumer group is, who its members are and what each says of itself (``mqadmin clusterList``,
``topicStatus``, ``consumerProgress``, ``consumerConnection`` and ``consumerStatus``); ``resend``:
one member consumes a stored message again (``mqadmin queryMsgById -d``); ``reset-offset``: a group
starts over from a time (``mqadmin resetOffsetByTime``); ``delayed``: delayed messages waiting by
level, and pending timers; ``timer-cancel``: a timer never delivered; ``dlq`` and ``dlq-resend``:
what a group gave up on, and sending one back to its topic."""
from __future__ import annotations

import argparse
import asyncio
import datetime
import signal
import sys
import threading
import time

from rocketbox.client import running
from rocketbox.client.admin import END_OF_TIME, Admin
from rocketbox.client.consumer import PushConsumer
from rocketbox.client.errors import MQBrokerError, MQClientError
from rocketbox.client.message import Message
from rocketbox.client.producer import Producer
from rocketbox.remoting.codes import ResponseCode as RC

CLI_GROUP = "rocketbox_cli"     # the consumer group of ``consume`` without -g, and the producer group
MAX_BODY = 200                  # bytes of a body ``consume`` shows by default


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
    p.add_argument("-g", "--group", default=CLI_GROUP, help=f"consumer group (default {CLI_GROUP}: every "
                                                              f"consume without -g shares its offsets)")
    p.add_argument("-e", "--expression", default="*", help="tags, e.g. 'TagA || TagB'")
    p.add_argument("--max-body", type=int, default=MAX_BODY, metavar="N",
                   help=f"show at most N bytes of a body, then how much was cut (default {MAX_BODY}; 0: all)")
    p.add_argument("--from-first", action="store_true", help="a new group starts at the oldest message")
    p.add_argument("--orderly", action="store_true",
                   help="consume each queue in order under the broker's queue lock (MessageListenerOrderly)")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("topic-status", help="each queue of a topic: min and max offset, last store time")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("progress", help="a consumer group's committed offsets and how far behind each queue is")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", help="only this topic (default: every topic the group has offsets on)")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("retention", help="a topic's own retention time, or a purge: its older messages are hidden "
                                         "(min offsets move) though the CommitLog keeps them until it expires")
    p.add_argument("-t", "--topic", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--hours", type=float, help="keep the topic's messages visible this long (0: as the CommitLog)")
    g.add_argument("--purge", action="store_true", help="hide every message stored until now")
    p.add_argument("-q", "--queue", type=int, help="with --purge: this queue only")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("topic-create", help="create or update a topic on every master of a cluster (-c, as mqadmin "
                                            "updateTopic -c) or on one broker (-b)")
    p.add_argument("-t", "--topic", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("-c", "--cluster", help="every master of this cluster (the config file: --config)")
    g.add_argument("-b", "--broker", help="this broker's address, host:port")
    p.add_argument("-r", "--read-queues", type=int, default=8)
    p.add_argument("-w", "--write-queues", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 both")
    p.add_argument("-o", "--order", action="store_true", help="an ordered topic")
    p.add_argument("-n", "--namesrv")
    p.add_argument("--config")
    p = sub.add_parser("cluster", help="every broker the name servers know: address, version, in and out TPS, "
                                       "messages today and yesterday, disk use")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("connections", help="a consumer group's members (address, language, version) and "
                                           "subscriptions")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("consumer-status", help="what each member of a consumer group says of itself: its queues, "
                                               "their offsets and held messages, pull and consume rates")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-i", "--client-id", help="only this member (default: every member)")
    p.add_argument("-s", "--jstack", action="store_true", help="also each member's threads and tasks")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("resend", help="have one member of a consumer group consume a stored message now "
                                      "(its offsetMsgId), and print how that went")
    p.add_argument("-m", "--msg-id", required=True, help="the message's offsetMsgId")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-i", "--client-id", required=True)
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("reset-offset", help="move a consumer group's offsets on a topic to a time; its members "
                                            "start over from there")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", required=True, type=_timestamp,
                   help="now (each queue's end), ms since the epoch, or yyyy-MM-dd#HH:mm:ss:SSS (local time)")
    p.add_argument("-f", "--force", default="true", choices=("true", "false"),
                   help="false: only move offsets back (default true)")
    p.add_argument("--cpp", action="store_true", help="the members are C++ clients (mqadmin -c)")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    _add_delay_commands(sub)


def _add_delay_commands(sub) -> None:
    p = sub.add_parser("delayed", help="delayed messages by level (stored, delivered, waiting) and pending timers")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("timer-cancel", help="cancel a pending timer (TIMER_DELAY_SEC/_MS, TIMER_DELIVER_MS): "
                                            "it is never delivered")
    p.add_argument("-m", "--msg-id", required=True, help="its msgId, as its send returned it, or its offsetMsgId")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("dlq", help="the messages a consumer group gave up on (its %%DLQ%% topic)")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("--max-body", type=int, default=MAX_BODY, metavar="N")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("query", help="messages by key, by msgId (UNIQ_KEY) or by offsetMsgId: where and when "
                                     "each is stored, and its body")
    by = p.add_mutually_exclusive_group(required=True)
    by.add_argument("--key", help="one of the message's keys (-t needed)")
    by.add_argument("--uniq-key", help="the msgId its send returned (-t needed)")
    by.add_argument("--id", help="its offsetMsgId (the store's id: broker address and CommitLog offset)")
    p.add_argument("-t", "--topic")
    p.add_argument("--begin", type=_timestamp, default=0, help="stored at or after: now, ms, or yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument("--end", type=_timestamp, default=END_OF_TIME, help="stored at or before (default: no end)")
    p.add_argument("--max", type=int, default=64, help="at most this many from each broker (64 at most)")
    p.add_argument("--max-body", type=int, default=MAX_BODY, metavar="N")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")
    p = sub.add_parser("dlq-resend", help="send a dead-lettered message again to the topic it was first sent to")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-m", "--msg-id", required=True, help="its msgId (UNIQ_KEY) or offsetMsgId, as `dlq` prints them")
    p.add_argument("-n", "--namesrv")
    p.add_argument("-c", "--config")


def _timestamp(text: str) -> int:
    """``mqadmin resetOffsetByTime -s``: "now" (-1), ms, or a local yyyy-MM-dd#HH:mm:ss:SSS."""
    text = text.strip()
    if text == "now":
        return -1
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return int(datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f").timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not now, ms, or yyyy-MM-dd#HH:mm:ss:SSS") from None


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3] if ms > 0 else "N/A"


async def _topic_status(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        queues = await admin.topic_status(args.topic)
        groups = await admin.consumed_by(args.topic)
    print(f"{'#Broker Name':<32} {'#QID':>4} {'#Min Offset':>20} {'#Max Offset':>20} #Last Updated")
    for mq, q in queues.items():
        print(f"{mq.broker_name:<32} {mq.queue_id:>4} {q.min_offset:>20} {q.max_offset:>20} {_when(q.last_update_ms)}")
    print(f"\nConsumed by: {' '.join(groups) if groups else '(no group)'}")
    return 0


async def _retention(args, namesrv: str) -> int:
    attrs = ({"purgedBeforeMs": int(time.time() * 1000)} if args.purge
             else {"retentionMs": int(args.hours * 3_600_000)})
    if args.queue is not None:
        if not args.purge:
            print("appliance retention: --queue goes with --purge", file=sys.stderr)
            return 2
        attrs["purgeQueueId"] = args.queue
    async with Admin(namesrv) as admin:
        await admin.topic_attributes(args.topic, **attrs)
    where = f"{args.topic} queue {args.queue}" if args.queue is not None else args.topic
    print(f"{where}: " + ("purged: messages stored before now are hidden" if args.purge else
                              f"messages stay visible {args.hours:g} h" if args.hours else "no retention of its own") +
          " (min offsets move within the dispatcher's next pass, cleanResourceInterval)")
    return 0


async def _topic_create(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        done = await admin.create_topic(args.topic, args.read_queues, args.write_queues, args.perm, args.order,
                                        cluster=args.cluster, broker=args.broker)
    for addr in done:
        print(f"create topic to {addr} success.")
    print(f"TopicConfig [topicName={args.topic}, readQueueNums={args.read_queues}, writeQueueNums={args.write_queues}, "
          f"perm={args.perm}, order={str(args.order).lower()}]")
    return 0


async def _cluster(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        brokers = await admin.cluster()
    print(f"{'#Cluster Name':<22} {'#Broker Name':<22} {'#BID':<4} {'#Addr':<22} {'#Version':<10} {'#InTPS':>10} "
          f"{'#OutTPS':>10} {'#InToday':>12} {'#OutToday':>12} {'#InYest':>12} {'#OutYest':>12} {'#Hour':>8} "
          f"{'#SPACE':<7} #LAG (a slave: bytes, ms behind its master)")
    now = datetime.datetime.now().timestamp() * 1000
    for b in brokers:
        if b.down:
            print(f"{b.cluster:<22} {b.broker_name:<22} {b.broker_id:<4} {b.addr:<22} not answering: {b.down}")
            continue
        hours = (now - b.earliest_ms) / 3_600_000 if b.earliest_ms > 0 else 0.0
        lag = "-" if b.lag_bytes is None else f"{b.lag_bytes} B" + ("" if b.lag_ms is None else f", {b.lag_ms} ms")
        print(f"{b.cluster:<22} {b.broker_name:<22} {b.broker_id:<4} {b.addr:<22} {b.version:<10} {b.in_tps:>10.2f} "
              f"{b.out_tps:>10.2f} {b.in_today:>12} {b.out_today:>12} {b.in_yesterday:>12} {b.out_yesterday:>12} "
              f"{hours:>8.2f} {b.disk_ratio:<7.4f} {lag}")
    return 0


async def _connections(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        cc = await admin.consumer_connection(args.group)
    print(f"{'#':<3} {'#ClientId':<48} {'#ClientAddr':<22} {'#Language':<10} #Version")
    for i, c in enumerate(cc.connections, 1):
        print(f"{i:<3} {c.client_id:<48} {c.client_addr:<22} {c.language:<10} {c.version}")
    print("\nBelow is subscription:")
    for i, (topic, expression) in enumerate(cc.subscriptions.items(), 1):
        print(f"{i:<3} Topic: {topic:<48} SubExpression: {expression}")
    print(f"\nConsumeType: {cc.consume_type}\nMessageModel: {cc.message_model}\nConsumeFromWhere: {cc.consume_from}")
    return 0


def _print_running_info(client_id: str, info: running.RunningInfo) -> None:
    """As ConsumerRunningInfo.formatString lays it out."""
    print(f"#Consumer {client_id}\n#Consumer Properties#")
    for k, v in info.properties.items():
        print(f"{k:<40}: {v}")
    print("\n#Consumer Subscription#")
    for i, sd in enumerate(info.subscriptions, 1):
        print(f"{i:03d} Topic: {sd.get('topic', ''):<40} ClassFilter: {str(sd.get('classFilterMode', False)).lower():<8} "
              f"SubExpression: {sd.get('subString', '')}")
    print(f"\n#Consumer Offset#\n{'#Topic':<32}  {'#Broker Name':<32}  {'#QID':<4}  #Consumer Offset")
    for mq, pq in info.queues.items():
        print(f"{mq.topic:<32}  {mq.broker_name:<32}  {mq.queue_id:<4}  {pq.get('commitOffset', -1)}")
    print(f"\n#Consumer MQ Detail#\n{'#Topic':<32}  {'#Broker Name':<32}  {'#QID':<4}  #ProcessQueueInfo")
    for mq, pq in info.queues.items():
        detail = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in pq.items())
        print(f"{mq.topic:<32}  {mq.broker_name:<32}  {mq.queue_id:<4}  ProcessQueueInfo [{detail}]")
    print(f"\n#Consumer RT&TPS#\n{'#Topic':<32}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} "
          f"{'#ConsumeOK TPS':>14} {'#ConsumeFailed TPS':>18} {'#ConsumeFailedMsgsInHour':>25}")
    for topic, st in info.status.items():
        print(f"{topic:<32}  {float(st.get('pullRT', 0)):>14.2f} {float(st.get('pullTPS', 0)):>14.2f} "
              f"{float(st.get('consumeRT', 0)):>14.2f} {float(st.get('consumeOKTPS', 0)):>14.2f} "
              f"{float(st.get('consumeFailedTPS', 0)):>18.2f} {int(st.get('consumeFailedMsgs', 0)):>25}")
    if info.jstack:
        print(f"\n#Consumer jstack#\n{info.jstack}")


async def _consumer_status(args, namesrv: str) -> int:
    """Each member's running info, then what ``mqadmin consumerStatus`` checks across them: the
    same subscriptions everywhere, and no push consumer's queue stuck."""
    async with Admin(namesrv) as admin:
        ids = [args.client_id] if args.client_id else [c.client_id for c in
                                                       (await admin.consumer_connection(args.group)).connections]
        infos = {cid: await admin.consumer_running_info(args.group, cid, args.jstack) for cid in ids}
    for cid, info in infos.items():
        _print_running_info(cid, info)
        print()
    subs = {cid: sorted((s.get("topic"), s.get("subString")) for s in info.subscriptions) for cid, info in infos.items()}
    same = len({tuple(v) for v in subs.values()}) <= 1
    print("Same subscription in the same group of consumer" if same else
          "WARN: Different subscription in the same group of consumer!!!")
    problems = [p for cid, info in infos.items() for p in info.problems(cid)]
    print("\n".join(problems) if problems else "Rebalance OK")
    return 0 if same and not problems else 1


async def _resend(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        r = await admin.consume_message_directly(args.group, args.client_id, args.msg_id)
    print(f"{r.get('consumeResult')} in {r.get('spentTimeMills')} ms" + (f": {r['remark']}" if r.get("remark") else ""))
    return 0 if r.get("consumeResult") == "CR_SUCCESS" else 1


async def _reset_offset(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        table = await admin.reset_offsets(args.group, args.topic, args.timestamp, args.force == "true", args.cpp)
    print(f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], force[{args.force}], "
          f"timestamp[{args.timestamp}]")
    print(f"{'#brokerName':<40}  {'#queueId':<40}  #offset")
    for mq, offset in table.items():
        print(f"{mq.broker_name:<40}  {mq.queue_id:<40}  {offset}")
    return 0


async def _progress(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        p = await admin.consume_progress(args.group, args.topic)
    print(f"{'#Topic':<32} {'#Broker Name':<32} {'#QID':>4} {'#Broker Offset':>20} {'#Consumer Offset':>20} "
          f"{'#Diff':>12} #LastTime")
    for mq, q in p.queues.items():
        print(f"{mq.topic:<32} {mq.broker_name:<32} {mq.queue_id:>4} {q.broker_offset:>20} {q.consumer_offset:>20} "
              f"{q.diff:>12} {_when(q.last_ms)}")
    print(f"\nConsume TPS: {p.consume_tps:.2f}\nDiff Total: {p.diff_total}")
    return 0


def _stop_on_signals() -> asyncio.Event:
    """An event Ctrl-C (or SIGTERM) sets.  The commands that run until stopped wait on it rather
    than being cancelled: Python 3.11's ``asyncio.wait_for`` can swallow the one cancellation
    ``asyncio.run`` makes of a Ctrl-C, and the command then runs on.  A second Ctrl-C ends the
    process at once."""
    loop, stop = asyncio.get_running_loop(), asyncio.Event()

    def on_signal():
        if stop.is_set():
            raise SystemExit(130)
        stop.set()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    return stop


async def _stdin_lines(stop: asyncio.Event):
    """stdin's lines as they come, until its end or ``stop``.  A thread reads them (a blocking read
    would hold the loop, and Ctrl-C with it); it is a daemon, so an exit does not wait for it."""
    if sys.stdin.isatty():
        print("reading one message per line until Ctrl-D (Ctrl-C stops at once)", file=sys.stderr, flush=True)
    loop, lines = asyncio.get_running_loop(), asyncio.Queue[str | None]()

    def pump():
        try:
            for line in sys.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)
        except RuntimeError:        # the loop has closed: the command is over
            pass
    threading.Thread(target=pump, name="stdin", daemon=True).start()
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            got = asyncio.ensure_future(lines.get())
            await asyncio.wait({got, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not got.done():
                got.cancel()
                return
            line = got.result()
            if line is None:
                return
            yield line.rstrip("\n")
    finally:
        stopped.cancel()


async def _produce(args, namesrv: str) -> int:
    stop = _stop_on_signals()
    async with Producer(CLI_GROUP, namesrv) as p:
        async for body in _each(args.messages) if args.messages else _stdin_lines(stop):
            if stop.is_set():
                break
            r = await p.send(Message(args.topic, body.encode(), tags=args.tags, keys=args.keys))
            print(f"{r.status} msgId={r.msg_id} queue={r.queue.queue_id} offset={r.queue_offset} "
                  f"offsetMsgId={r.offset_msg_id}", flush=True)
    return 0


async def _each(items):
    for item in items:
        yield item


def shown_body(body: bytes, most: int) -> str:
    """A body as ``consume`` prints it: decoded, its first ``most`` bytes only, with a marker
    saying how many were left out (0: whole)."""
    if most <= 0 or len(body) <= most:
        return body.decode(errors="replace")
    return f"{body[:most].decode(errors='replace')}...[{len(body) - most} more bytes, {len(body)} in all]"


async def _consume(args, namesrv: str) -> int:
    stop = _stop_on_signals()

    def show(msgs):
        for m in msgs:
            print(f"queue={m.queue_id} offset={m.queue_offset} msgId={m.msg_id} tags={m.tags or ''} "
                  f"{shown_body(m.body, args.max_body)}", flush=True)
        return True
    c = PushConsumer(args.group, namesrv,
                     consume_from="CONSUME_FROM_FIRST_OFFSET" if args.from_first else "CONSUME_FROM_LAST_OFFSET",
                     orderly=args.orderly)
    try:
        await c.subscribe(args.topic, args.expression).register(show).start()
        await stop.wait()
    finally:
        await c.shutdown()
    return 0


async def _delayed(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        levels = await admin.delayed()
        timers = await admin.timers()
    names = args.delay_names
    print(f"{'#Broker Name':<24} {'#Level':>6} {'#Delay':>7} {'#Stored':>12} {'#Delivered':>12} {'#Waiting':>10}")
    for broker, level, done, stored in levels:
        label = names[level - 1] if level <= len(names) else "?"
        print(f"{broker:<24} {level:>6} {label:>7} {stored:>12} {done:>12} {max(stored - done, 0):>10}")
    print(f"{'#Broker Name':<24} {'#Timers':>14} {'#Next Due'}")
    for broker, pending, next_ms in timers:
        print(f"{broker:<24} {pending:>14} {_when(next_ms) if pending else '-'}")
    return 0


async def _timer_cancel(args, namesrv: str) -> int:
    async with Admin(namesrv) as admin:
        try:
            remark = await admin.cancel_timer(args.msg_id)
        except MQBrokerError as e:
            print(f"appliance timer-cancel: {e}", file=sys.stderr)
            return 1
    print(remark)
    return 0


async def _dead_letters(namesrv: str, group: str) -> list:
    """Every message of the group's %DLQ% topic, read from the start without committing."""
    from rocketbox.client.consumer import PullConsumer
    pc = await PullConsumer(CLI_GROUP + "_dlq", namesrv).start()
    out = []
    try:
        for mq in await pc.queues("%DLQ%" + group):
            await pc.assign([mq])
            pc.seek(mq, 0)
            while (res := await pc.pull(mq, 32)).messages:
                out += res.messages
    finally:
        await pc.shutdown()
    return out


async def _dlq(args, namesrv: str) -> int:
    msgs = await _dead_letters(namesrv, args.group)
    for m in msgs:
        print(f"msgId={m.msg_id} offsetMsgId={m.offset_msg_id} topic={m.properties.get('RETRY_TOPIC', '')} "
              f"reconsumeTimes={m.reconsume_times} born={_when(m.born_timestamp)} {shown_body(m.body, args.max_body)}")
    print(f"{len(msgs)} dead-lettered messages of group {args.group}")
    return 0


async def _query(args, namesrv: str) -> int:
    if args.id is None and not args.topic:
        print("appliance query: --key and --uniq-key need the topic (-t)", file=sys.stderr)
        return 2
    now = int(time.time() * 1000)
    begin, end = (now if t == -1 else t for t in (args.begin, args.end))
    async with Admin(namesrv) as admin:
        try:
            if args.id is not None:
                msgs = [await admin.view_message(args.id)]
            elif args.uniq_key is not None:
                msgs = [await admin.query_unique(args.topic, args.uniq_key)]
            else:
                msgs = await admin.query_messages(args.topic, args.key, args.max, begin, end)
        except MQBrokerError as e:
            if e.code != RC.QUERY_NOT_FOUND:
                raise
            msgs = []
    for m in msgs:
        print(f"msgId={m.msg_id} offsetMsgId={m.offset_msg_id} topic={m.topic} broker={m.broker_name or '-'} "
              f"queue={m.queue_id} offset={m.queue_offset} keys={','.join(m.keys) or '-'} tags={m.tags or '-'} "
              f"stored={_when(m.store_timestamp)} born={_when(m.born_timestamp)} {shown_body(m.body, args.max_body)}")
    print(f"{len(msgs)} messages")
    return 0 if msgs else 1


# what the broker and the consumer added to a message on its way to the DLQ: left out of a resend
_RETRY_PROPERTIES = {"RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DELAY", "REAL_TOPIC", "REAL_QID", "WAIT", "RECONSUME_TIME",
                     "MAX_RECONSUME_TIMES", "CLUSTER", "MIN_OFFSET", "MAX_OFFSET"}


async def _dlq_resend(args, namesrv: str) -> int:
    found = [m for m in await _dead_letters(namesrv, args.group) if args.msg_id in (m.msg_id, m.offset_msg_id)]
    if not found:
        print(f"appliance dlq-resend: no message {args.msg_id} in %DLQ%{args.group}", file=sys.stderr)
        return 1
    m = found[0]
    topic = m.properties.get("RETRY_TOPIC") or m.topic
    props = {k: v for k, v in m.properties.items() if k not in _RETRY_PROPERTIES}
    async with Producer(CLI_GROUP, namesrv) as p:
        r = await p.send(Message(topic, m.body, properties=props, flag=m.flag))
    print(f"{r.status} to {topic}: msgId={r.msg_id} queue={r.queue.queue_id} offset={r.queue_offset}")
    return 0


COMMANDS = {"produce": _produce, "consume": _consume, "topic-status": _topic_status, "progress": _progress,
            "connections": _connections, "cluster": _cluster, "topic-create": _topic_create, "consumer-status": _consumer_status,
            "resend": _resend, "reset-offset": _reset_offset, "retention": _retention, "delayed": _delayed,
            "dlq": _dlq, "dlq-resend": _dlq_resend, "timer-cancel": _timer_cancel, "query": _query}


def main(args, cfg) -> int:
    namesrv = args.namesrv or cfg.namesrvAddr
    if not namesrv:
        print("appliance: no name server: pass --namesrv or set namesrvAddr", file=sys.stderr)
        return 2
    args.delay_names = cfg.messageDelayLevel.split()     # the levels as this config names them (``delayed``)
    try:
        return asyncio.run(COMMANDS[args.cmd](args, namesrv))
    except KeyboardInterrupt:
        return 0
    except MQClientError as e:
        maybe = "; a try went unanswered, so the message may be stored all the same" if e.may_be_stored else ""
        print(f"appliance {args.cmd}: {e}{maybe}", file=sys.stderr)
        return 1
