#!/usr/bin/env node
// Records N simple root actions over HTTP with the TypeScript client and prints one JSON line:
//   {"ops": N, "seconds": S}
//
//   KINTSUGI_URL=http://127.0.0.1:8000 KINTSUGI_TOKEN=kag_... KINTSUGI_AGENT=bench_ts \
//     node clients/typescript/bench/record.mjs [N]          (N also from KINTSUGI_BENCH_N; default 100)
//
// Each action is one root of KINTSUGI_AGENT (registered in the token's workspace) that writes a fact,
// reads it back and finishes: four requests (open, set, get, finish) call by call, or three with the set
// held back and sent with the get (KINTSUGI_BUFFER, the client's buffer: 0 for call by call, the default).
// With KINTSUGI_READER (a second registered agent) each root is bench agents' writer and reader instead:
// the writer sets two facts and hands off to the reader, which reads both and records an effect (8 ops;
// 10 requests call by call, 7 with the writer's calls riding with its finish); "ops" counts them.
// Nothing is recorded before the clock starts, so the workspace holds exactly N more roots afterwards.
import { Client, Desk } from "../src/index.js";

const url = process.env.KINTSUGI_URL;
const token = process.env.KINTSUGI_TOKEN;
const agent = process.env.KINTSUGI_AGENT || "bench_ts";
const n = Number(process.argv[2] ?? process.env.KINTSUGI_BENCH_N ?? 100);
if (!url || !token || !Number.isInteger(n) || n < 1) {
  process.stderr.write("usage: KINTSUGI_URL=... KINTSUGI_TOKEN=... [KINTSUGI_AGENT=bench_ts] node record.mjs N\n");
  process.exit(2);
}

const buffer = Number(process.env.KINTSUGI_BUFFER ?? 0);
const reader = process.env.KINTSUGI_READER;
const desk = new Desk(new Client(url, token, { buffer }));
if (reader) {
  desk.agent(agent, async (rec, p) => {
    await rec.set(`faq/${p.n}`, `answer ${p.n}`);
    await rec.set("shared", p.n);
    await rec.handoff(reader, { n: p.n, ticket: `t${p.n}` });
    return { n: p.n };
  });
  desk.agent(reader, async (rec, p) => {
    await rec.get(`faq/${p.n}`);
    await rec.get("shared");
    await rec.effect("note", { amount: 0, ticket: p.ticket, external: true }); // the bench has no desk tickets
    return { read: true };
  });
} else {
  desk.agent(agent, async (rec, payload) => {
    await rec.set(`bench/${payload.n}`, `answer ${payload.n}`);
    await rec.get(`bench/${payload.n}`);
    return { n: payload.n };
  });
}

try {
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i += 1) await desk.runRoot(agent, { n: i });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  process.stdout.write(JSON.stringify({ ops: n * (reader ? 8 : 1), seconds: Math.round(seconds * 1000) / 1000 }) + "\n");
} catch (exc) {
  process.stderr.write(`error: ${exc?.message ?? exc}\n`);
  process.exit(1);
}
