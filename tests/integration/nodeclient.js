// A real client written elsewhere: the Node package ali-ons (3.12.0), unmodified, as test_nodeclient.py
// drives it.  One scenario per run; prints one JSON line with what it saw.
//   node nodeclient.js '{"do": "produce", "namesrv": "...", "topic": "...", "count": 20}'
//   node nodeclient.js '{"do": "push", "namesrv": "...", "topic": "...", "group": "...", "expr": "TagA", "expect": 10, "seconds": 30}'
'use strict';
const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');

const args = JSON.parse(process.argv[2]);
const auth = { httpclient, accessKeyId: 'unused', accessKeySecret: 'unused', nameSrv: args.namesrv };

async function produce() {
  const producer = new Producer({ ...auth, producerGroup: 'node-producers' });
  await producer.ready();
  const sent = [];
  for (let i = 0; i < args.count; i++) {
    const msg = new Message(args.topic, i % 2 ? 'TagB' : 'TagA', `node-${i}`);
    msg.keys = [`key-${i}`];
    const r = await producer.send(msg);
    sent.push({ status: r.sendStatus, msg_id: r.msgId, queue: Number(r.messageQueue.queueId), offset: Number(r.queueOffset) });
  }
  await producer.close();
  return { sent };
}

async function push() {
  const consumer = new Consumer({ ...auth, consumerGroup: args.group, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
  const seen = [];
  consumer.subscribe(args.topic, args.expr, async msg => {
    seen.push({ body: msg.body.toString(), tags: msg.tags, keys: msg.keys, msg_id: msg.msgId });
  });
  consumer.on('error', () => {});           // ali-ons reports the missing %RETRY% route here; not our test
  const t0 = Date.now();
  while (seen.length < args.expect && Date.now() - t0 < args.seconds * 1000) {
    await new Promise(r => setTimeout(r, 100));
  }
  await new Promise(r => setTimeout(r, 1000));   // anything past what was expected would show now
  await consumer.close();
  return { seen };
}

(args.do === 'produce' ? produce() : push())
  .then(res => { console.log(JSON.stringify(res)); process.exit(0); })
  .catch(err => { console.error(err && err.stack || err); process.exit(2); });
