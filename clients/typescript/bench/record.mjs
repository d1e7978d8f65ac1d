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
// Nothing is recorded before the clock starts, so the workspace holds exactly N more actions afterwards.
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
const desk = new Desk(new Client(url, token, { buffer }));
desk.agent(agent, async (rec, payload) => {
  await rec.set(`bench/${payload.n}`, `answer ${payload.n}`);
  await rec.get(`bench/${payload.n}`);
  return { n: payload.n };
});

try {
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i += 1) await desk.runRoot(agent, { n: i });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  process.stdout.write(JSON.stringify({ ops: n, seconds: Math.round(seconds * 1000) / 1000 }) + "\n");
} catch (exc) {
  process.stderr.write(`error: ${exc?.message ?? exc}\n`);
  process.exit(1);
}
