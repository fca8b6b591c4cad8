// BullMQ for Node under the fault harness: the actions of benchmarks/faults/agent.py.
//
//     node agent.mjs ACTION --url URL --ledger URL --run RUN [--first N] [--count N]
//                    [--rate R] [--concurrency C] [--job-ms MS] [--every-s S]
//                    [--seconds S] [--width W]
//
// ACTION is info, produce, work (until killed), inspect, cron or fanin. BullMQ and ioredis
// resolve from benchmarks/peers/bullmq_node (the speed benchmark's pinned tree, installed there
// with `npm ci`). The ledger (benchmarks/faults/ledger.py) is written over a separate ioredis
// connection, one command per record, with the same keys: fl:RUN:acked, fl:RUN:finished ...
// The settings are the ones systems/bullmq_node.py reports (SETTINGS): keep the two in step.

import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const PEER = path.resolve(HERE, "../../../peers/bullmq_node");
const require = createRequire(path.join(PEER, "package.json"));
const { FlowProducer, Queue, Worker } = require("bullmq");
const IORedis = require("ioredis");

const QUEUE = "faults";
const LOCK_MS = 3000;
const STALLED_MS = 1000;
const JOB_OPTS = {
  attempts: 25,
  backoff: { type: "exponential", delay: 100 },
  removeOnComplete: { count: 1000 },
  removeOnFail: { count: 5000 },
};
const WORKER_OPTS = {
  lockDuration: LOCK_MS,
  stalledInterval: STALLED_MS,
  maxStalledCount: 25,
  removeOnComplete: { count: 1000 },
  removeOnFail: { count: 5000 },
};

const EVENTS_MAXLEN = 1000000; // the whole run's events stay, for `stale`
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function parseArgs(argv) {
  const out = { action: argv[0], url: "", ledger: "", run: "", first: 0, count: 100,
    rate: 200, concurrency: 4, "job-ms": 50, "every-s": 1, seconds: 10, width: 5 };
  const strings = new Set(["url", "ledger", "run"]);
  for (let i = 1; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    out[key] = strings.has(key) ? argv[i + 1] : Number(argv[i + 1]);
  }
  return out;
}

// ioredis options for a loopback URL; `worker` connections never give up on a command
// (BullMQ requires maxRetriesPerRequest: null of a Worker), a producer's fail fast
// (enableOfflineQueue: false, docs.bullmq.io/patterns/failing-fast-when-redis-is-down).
function connection(url, kind) {
  const u = new URL(url);
  if (u.hostname !== "127.0.0.1") throw new Error(`loopback only, got ${u.hostname}`);
  const opts = { host: u.hostname, port: Number(u.port || 6379),
    db: Number(u.pathname.replace("/", "") || "0") };
  if (u.password) opts.password = decodeURIComponent(u.password);
  if (u.username) opts.username = decodeURIComponent(u.username);
  if (kind === "worker") opts.maxRetriesPerRequest = null;
  if (kind === "producer") opts.enableOfflineQueue = false;
  return opts;
}

// The worker process the harness started (inherited from agent.py): see ledger.py.
const AGENT = process.env.FAULTS_AGENT || "-";
const BOTH = "redis.call('HINCRBY', KEYS[1], ARGV[1], 1) redis.call('HINCRBY', KEYS[2], ARGV[2], 1)";
// A finish also ends the agent's in-flight count (fl:RUN:busy), as ledger.py does.
const END = BOTH + " redis.call('HINCRBY', KEYS[3], ARGV[3], -1)";

class Ledger {
  constructor(url, run) {
    this.run = run;
    this.redis = url ? new IORedis(connection(url, "ledger")) : null;
  }

  key(what) {
    return `fl:${this.run}:${what}`;
  }

  acked(job) { return this.redis.sadd(this.key("acked"), String(job)); }
  refused(job) { return this.redis.sadd(this.key("refused"), String(job)); }
  started(job) {
    return this.redis.eval(BOTH, 2, this.key("started"), this.key("busy"), String(job), AGENT);
  }
  tick(key) { return this.redis.hincrby(this.key("ticks"), String(key), 1); }
  callback(group) { return this.both("callbacks", "callback_runs", String(group)); }
  finished(job) {
    const id = String(job);
    return this.redis.eval(END, 3, this.key("finished"), this.key("runs"), this.key("busy"),
      id, `${id} ${AGENT}`, AGENT);
  }

  // A run and its agent in one command, so a kill cannot land between the two.
  both(counts, runs, id) {
    return this.redis.eval(BOTH, 2, this.key(counts), this.key(runs), id, `${id} ${AGENT}`);
  }

  async close() {
    if (this.redis) await this.redis.quit();
  }
}

// A tick's scheduled second: a job scheduler's job id is `repeat:<scheduler>:<ms>`.
function tickSecond(id) {
  const ms = String(id).split(":").pop();
  return /^\d+$/.test(ms) ? String(Math.floor(Number(ms) / 1000)) : String(id);
}

function processor(ledger, jobMs) {
  return async (job) => {
    if (job.name === "callback") {
      await ledger.callback(job.data.group);
    } else if (job.name === "tick") {
      await ledger.tick(tickSecond(job.id));
    } else {
      await ledger.started(job.data.id);
      await sleep(jobMs);
      await ledger.finished(job.data.id);
    }
  };
}

function worker(url, ledger, concurrency, jobMs) {
  const w = new Worker(QUEUE, processor(ledger, jobMs),
    { connection: connection(url, "worker"), concurrency, ...WORKER_OPTS });
  w.on("error", (err) => console.error(`worker error: ${err}`));
  return w;
}

const jobId = (n) => `J${String(n).padStart(12, "0")}`;

// A Queue whose events stream keeps the whole run (streams.events.maxLen, which the Queue
// writes to the queue's meta once connected: awaited before the first add).
async function openQueue(url, kind) {
  const q = new Queue(QUEUE, { connection: connection(url, kind),
    streams: { events: { maxLen: EVENTS_MAXLEN } } });
  await q.waitUntilReady();
  await q.queueMetaInitialized;
  return q;
}

async function produce(a, ledger) {
  let queue;
  try {
    queue = await openQueue(a.url, "producer");
  } catch {
    for (let n = a.first; n < a.first + a.count; n++) await ledger.refused(n);
    return { produced: a.count }; // the server was down from the start: all refused
  }
  const start = performance.now();
  for (let i = 0; i < a.count; i++) {
    const wait = start + (i * 1000) / a.rate - performance.now();
    if (wait > 0) await sleep(wait);
    const n = a.first + i;
    try {
      await queue.add("job", { id: n }, { ...JOB_OPTS, jobId: jobId(n) });
    } catch {
      await ledger.refused(n);
      continue;
    }
    await ledger.acked(n);
  }
  await queue.close();
  return { produced: a.count };
}

async function work(a, ledger) {
  const w = worker(a.url, ledger, a.concurrency, a["job-ms"]);
  const stop = async () => {
    await w.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  await new Promise(() => {}); // until killed
}

async function counts(q, ...types) {
  const c = await q.getJobCounts(...types);
  return Object.values(c).reduce((s, v) => s + Number(v || 0), 0);
}

// Jobs with more than one `completed` event: a completion accepted from a worker whose lock
// had lapsed (BullMQ refuses those with "Missing lock"; a refusal is recorded nowhere).
async function completedTwice(url) {
  const redis = new IORedis(connection(url, "ledger"));
  const seen = new Map();
  let start = "-";
  for (;;) {
    const page = await redis.xrange(`bull:${QUEUE}:events`, start, "+", "COUNT", 10000);
    for (const [, fields] of page) {
      const f = {};
      for (let i = 0; i < fields.length; i += 2) f[fields[i]] = fields[i + 1];
      if (f.event === "completed") seen.set(f.jobId, (seen.get(f.jobId) || 0) + 1);
    }
    if (page.length < 10000) break;
    start = "(" + page[page.length - 1][0];
  }
  await redis.quit();
  return [...seen.values()].filter((n) => n > 1).length;
}

async function inspect(a) {
  const q = new Queue(QUEUE, { connection: connection(a.url, "worker"), skipMetasUpdate: true });
  const out = {
    inflight: await counts(q, "active"),
    waiting: await counts(q, "wait", "paused", "prioritized", "delayed", "waiting-children"),
    stale: { accepted: await completedTwice(a.url), refused: null },
  };
  await q.close();
  return out;
}

async function cron(a, ledger) {
  const queue = await openQueue(a.url, "worker");
  await queue.upsertJobScheduler("tick", { every: Math.round(a["every-s"] * 1000) },
    { name: "tick", data: {}, opts: JOB_OPTS });
  const w = worker(a.url, ledger, 1, 0);
  await sleep(a.seconds * 1000);
  await w.close();
  await queue.close();
  return undefined; // agent.py prints nothing after a cron
}

async function fanin(a) {
  await (await openQueue(a.url, "worker")).close(); // the events stream keeps the run
  const flows = new FlowProducer({ connection: connection(a.url, "producer") });
  for (let g = a.first; g < a.first + a.count; g++) {
    const children = [];
    for (let i = 0; i < a.width; i++) {
      const n = g * 1000 + i;
      children.push({ name: "job", queueName: QUEUE, data: { id: n },
        opts: { ...JOB_OPTS, jobId: jobId(n) } });
    }
    await flows.add({ name: "callback", queueName: QUEUE, data: { group: g },
      opts: { ...JOB_OPTS, jobId: `G${String(g).padStart(12, "0")}` }, children });
  }
  await flows.close();
  return { groups: a.count };
}

function info() {
  const version = (pkg) => require(`${pkg}/package.json`).version;
  return { bullmq: version("bullmq"), ioredis: version("ioredis"), node: process.versions.node };
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const ledger = new Ledger(a.ledger, a.run);
  const actions = { info, produce, work, inspect, cron, fanin };
  const action = actions[a.action];
  if (!action) throw new Error(`unknown action ${a.action}`);
  const out = await action(a, ledger);
  await ledger.close();
  if (out !== undefined) process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
