// What an outside developer needs around the replay server and the API: serveReplays' verify and log
// hooks, the replay's client passed in, the replay secret kept across restarts, and 429s waited out within
// a bound. kintsugi's side is stood in for by small servers here; tests/agents/test_client_hooks.py runs
// the Python client's equivalents against kintsugi itself.
import assert from "node:assert/strict";
import fs from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";

import {
  Client, Desk, KintsugiError, REPLAY_SECRET_ENV, ReplayRefused, keepReplaySecret, loadReplaySecret, signedHeaders,
} from "../src/index.js";

const SECRET = "krs_hooks";
const servers = [];

function serve(handler) {
  const server = http.createServer(handler);
  servers.push(server);
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${server.address().port}`)));
}

function json(res, status, body, headers = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

after(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

let callbackUrl;
before(async () => {
  callbackUrl = await serve((req, res) => {
    req.resume();
    req.on("end", () => json(res, 200, req.url.endsWith("/finish/") ? { action: 7, committed: true, next: null }
      : { key: "policy", value: "30 days", found: true }));
  });
});

function replayBody(purpose, id) {
  return JSON.stringify({ workspace: "ws", agent: "triage", action: 7, payload: { ticket: "t01" }, mode: "replay",
    base_url: callbackUrl, token: "replay-token", purpose, replay_id: id });
}

test("verify and log hooks see each replay's purpose and headers; the replay's calls go through the given client",
  async () => {
    const events = [], verified = [], observed = [], ran = [];
    const desk = new Desk(new Client("http://127.0.0.1:9", "unused"), {
      replaySecret: SECRET,
      replayClient: (baseUrl, token) => {
        const client = new Client(baseUrl, token);
        const call = client.call.bind(client);
        client.call = (action, op, body) => (observed.push(op), call(action, op, body));
        return client;
      },
    });
    desk.agent("triage", async (rec) => (ran.push("triage"), { choice: (await rec.get("policy")) ? "reply" : "escalate" }));
    const server = await desk.serveReplays("127.0.0.1", 0, {
      verify: (request, headers) => {
        verified.push([request.purpose, Object.keys(headers).filter((k) => k.startsWith("x-kintsugi-")).sort()]);
        if (request.purpose === "what_if") throw new ReplayRefused("this desk serves no what-if");
      },
      log: (event) => {
        events.push(event);
        throw new Error("a broken log hook changes nothing");
      },
    });
    const url = `http://127.0.0.1:${server.address().port}/replay`;
    try {
      const post = async (body, headers = {}) => (await fetch(url, { method: "POST", body, headers })).status;
      const repair = replayBody("repair", "h-1");
      assert.equal(await post(repair, signedHeaders(SECRET, repair)), 200);
      const whatIf = replayBody("what_if", "h-2");
      assert.equal(await post(whatIf, signedHeaders(SECRET, whatIf)), 401);
      assert.equal(await post(replayBody("repair", "h-3")), 401); // unsigned: refused before verify is asked
      assert.deepEqual(verified, [["repair", ["x-kintsugi-signature", "x-kintsugi-timestamp"]],
        ["what_if", ["x-kintsugi-signature", "x-kintsugi-timestamp"]]]);
      assert.deepEqual(ran, ["triage"]);
      assert.deepEqual(observed, ["get", "finish"]);
      assert.deepEqual(events.map((e) => [e.outcome, e.status, e.purpose]),
        [["ran", 200, "repair"], ["refused", 401, "what_if"], ["refused", 401, null]]);
      assert.match(events[1].error, /no what-if/);
      assert.ok(!JSON.stringify(events).includes("replay-token"));
    } finally {
      await desk.close();
    }
  });

test("a 429 is waited out for its Retry-After; one asking past the bound is thrown at once", async () => {
  let hits = 0;
  const url = await serve((req, res) => {
    hits += 1;
    if (req.url.startsWith("/slow")) return json(res, 429, { error: { code: "throttled", message: "wait" } }, { "Retry-After": "60" });
    if (hits % 2 === 1) return json(res, 429, { error: { code: "throttled", message: "wait" } }, { "Retry-After": "1" });
    return json(res, 200, { ok: true });
  });
  const client = new Client(url, "t", { maxWaitSeconds: 5 });
  let started = Date.now();
  // The red case before: the first 429 was thrown at once.
  assert.deepEqual(await client.request("GET", "/fast"), { ok: true });
  assert.ok(Date.now() - started >= 900, "waited the Retry-After");
  started = Date.now();
  await assert.rejects(client.request("GET", "/slow"), (exc) => exc instanceof KintsugiError && exc.status === 429
    && exc.retryAfter === 60);
  assert.ok(Date.now() - started < 1000, "not waited: past the bound");
});

test("a restarted desk keeps its replay secret; only a lost one is rotated", async () => {
  const registrations = new Map();
  let rotations = 0;
  const url = await serve((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      const body = JSON.parse(raw || "{}");
      if (req.url.endsWith("/rotate-secret/")) {
        rotations += 1;
        return json(res, 200, { replay_secret: `krs_rotated_${rotations}` });
      }
      const created = !registrations.has(body.name);
      registrations.set(body.name, body.replay_url);
      return json(res, 200, { name: body.name, replay_url: body.replay_url, ...(created ? { replay_secret: "krs_first" } : {}) });
    });
  });
  const client = new Client(url, "t");
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "kintsugi-secret-"));
  const file = path.join(dir, "keys", "triage.krs");
  delete process.env[REPLAY_SECRET_ENV];
  assert.equal(await keepReplaySecret(client, 1, "triage", "http://a/replay", { path: file, reason: "start" }), "krs_first");
  assert.equal((await fs.stat(file)).mode & 0o777, 0o600);
  assert.equal(await keepReplaySecret(client, 1, "triage", "http://b/replay", { path: file, reason: "restart" }), "krs_first");
  assert.equal(rotations, 0);
  process.env[REPLAY_SECRET_ENV] = "krs_from_env";
  try {
    assert.equal(await loadReplaySecret(file), "krs_from_env");
  } finally {
    delete process.env[REPLAY_SECRET_ENV];
  }
  await fs.rm(file);
  assert.equal(await keepReplaySecret(client, 1, "triage", "http://b/replay", { path: file, reason: "lost" }), "krs_rotated_1");
  assert.equal(await loadReplaySecret(file), "krs_rotated_1");
  await fs.rm(dir, { recursive: true });
});
