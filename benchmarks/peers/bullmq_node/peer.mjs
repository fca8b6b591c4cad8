// BullMQ for Node as a benchmark peer: the same actions as benchmarks/peers/runner.py.
//
//     node benchmarks/peers/bullmq_node/peer.mjs ACTION --url URL [--n N] [--conc C]
//                                                [--rate R] [--seconds S]
//
// Actions print one JSON object on the last line of stdout (`work` runs until killed).
// The handler records its start the way benchmarks/peers/probe.py does: two float64 per job
// (the handler's start and the producer's stamp, both on CLOCK_MONOTONIC, the clock of
// Python's time.monotonic() and of process.hrtime()), appended to a list and written to
// $BENCH_PROBE_DIR/<pid>.rec every 20 ms. BullMQ runs with its defaults (completed jobs kept).

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { Queue, Worker } from "bullmq";

const require = createRequire(import.meta.url);
const QUEUE = "bench";
const CONCURRENCY = 50;
const CHUNK = 1000;

function monotonic() {
  return Number(process.hrtime.bigint()) / 1e9;
}

function parseArgs(argv) {
  const out = { action: argv[0], url: "", n: 1000, conc: 0, rate: 1000, seconds: 3 };
  for (let i = 1; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    out[key] = key === "url" || key === "mode" ? argv[i + 1] : Number(argv[i + 1]);
  }
  return out;
}

function connection(url) {
  const u = new URL(url);
  if (u.hostname !== "127.0.0.1") throw new Error(`loopback only, got ${u.hostname}`);
  const db = Number(u.pathname.replace("/", "") || "0");
  // maxRetriesPerRequest: null is what BullMQ requires of a Worker's connection.
  return { host: u.hostname, port: Number(u.port), db, maxRetriesPerRequest: null };
}

function version(pkg) {
  try {
    return require(`${pkg}/package.json`).version;
  } catch {
    return "missing";
  }
}

class Probe {
  constructor() {
    this.records = [];
    this.fd = -1;
  }

  hit(sent) {
    const now = monotonic();
    if (this.fd < 0) this.open();
    this.records.push(now, sent);
  }

  open() {
    const dir = process.env.BENCH_PROBE_DIR;
    if (!dir) throw new Error("BENCH_PROBE_DIR is not set");
    this.fd = fs.openSync(path.join(dir, `${process.pid}.rec`), "a", 0o644);
    setInterval(() => this.flush(), 20);
  }

  flush() {
    if (this.records.length === 0) return;
    const chunk = this.records;
    this.records = [];
    const buf = Buffer.allocUnsafe(chunk.length * 8);
    for (let i = 0; i < chunk.length; i++) buf.writeDoubleLE(chunk[i], i * 8);
    fs.writeSync(this.fd, buf);
  }
}

const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

async function timed(url, action, n) {
  const queue = new Queue(QUEUE, { connection: connection(url) });
  await queue.waitUntilReady();
  const t0 = monotonic();
  if (action === "enqueue-one") {
    for (let i = 0; i < n; i++) await queue.add("noop", { t: 0.0 });
  } else {
    for (let start = 0; start < n; start += CHUNK) {
      const size = Math.min(CHUNK, n - start);
      const jobs = Array.from({ length: size }, () => ({ name: "noop", data: { t: 0.0 } }));
      await queue.addBulk(jobs);
    }
  }
  const seconds = monotonic() - t0;
  await queue.close();
  return { n, seconds, rate: seconds ? n / seconds : 0 };
}

async function produce(url, rate, seconds) {
  // Open loop: job i is sent at start + i / rate, stamped just before its add.
  const queue = new Queue(QUEUE, { connection: connection(url) });
  await queue.waitUntilReady();
  const total = Math.floor(rate * seconds);
  const start = monotonic();
  let lateMax = 0;
  for (let i = 0; i < total; i++) {
    const due = start + i / rate;
    const wait = due - monotonic();
    if (wait > 0) await sleep(wait);
    const now = monotonic();
    lateMax = Math.max(lateMax, now - due);
    await queue.add("noop", { t: now });
  }
  const elapsed = monotonic() - start;
  await queue.close();
  return { sent: total, seconds: elapsed, late_max_ms: lateMax * 1000 };
}

async function warm(url) {
  const queue = new Queue(QUEUE, { connection: connection(url) });
  await queue.add("noop", { t: -1.0 });
  await queue.close();
  return { sent: 1 };
}

async function work(url, concurrency) {
  const probe = new Probe();
  const worker = new Worker(
    QUEUE,
    async (job) => {
      probe.hit(job.data.t);
    },
    { connection: connection(url), concurrency },
  );
  worker.on("error", (err) => console.error(`worker error: ${err}`));
  const stop = async () => {
    probe.flush();
    await worker.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  await new Promise(() => {}); // until killed
}

function info() {
  return {
    name: "bullmq-node",
    versions: { bullmq: version("bullmq"), ioredis: version("ioredis"), node: process.versions.node },
    model: `Node.js Worker, concurrency=${CONCURRENCY} (completed jobs kept, its default)`,
    bulk: `Queue.addBulk, ${CHUNK.toLocaleString("en-US")} at a time`,
    concurrency: CONCURRENCY,
  };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  let out;
  switch (args.action) {
    case "info":
      out = info();
      break;
    case "work":
      return work(args.url, args.conc || CONCURRENCY);
    case "enqueue-one":
    case "enqueue-bulk":
      out = await timed(args.url, args.action, args.n);
      break;
    case "prefill":
      out = await timed(args.url, "enqueue-bulk", args.n);
      break;
    case "warm":
      out = await warm(args.url);
      break;
    case "produce":
      out = await produce(args.url, args.rate, args.seconds);
      break;
    default:
      throw new Error(`unknown action ${args.action}`);
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
