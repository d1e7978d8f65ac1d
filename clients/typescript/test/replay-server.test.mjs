// The replay server over real HTTP: a signed request reaches the agent; every refused one is answered
// 401 before any agent code runs. kintsugi's side of a replay (the callback server that serves the
// agent's calls) is stood in for by a small server here; tests/agents/test_typescript_desk.py runs the
// whole thing against kintsugi itself.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, beforeEach, test } from "node:test";

import { Client, Desk, signedHeaders } from "../src/index.js";

const SECRET = "whsec_replays";
let callback, callbackUrl, calls, ran, desk, replayUrl;

function listen(server) {
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${server.address().port}`)));
}

before(async () => {
  callback = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      calls.push({ path: req.url, auth: req.headers.authorization, body: JSON.parse(raw || "{}") });
      const answer = req.url.endsWith("/get/") ? { key: "policy", value: "full refund", found: true }
        : req.url.endsWith("/finish/") ? { action: 7, committed: false, next: null } : {};
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify(answer));
    });
  });
  callbackUrl = await listen(callback);
  const build = (options) => {
    const d = new Desk(new Client("http://127.0.0.1:9", "unused"), options);
    d.agent("triage", async (rec, payload) => {
      ran.push(payload.ticket);
      const policy = await rec.get("policy");
      return { choice: policy === "full refund" ? "refund" : "reply" };
    });
    d.agent("broken", async () => {
      ran.push("broken");
      throw new Error("the model is down");
    });
    return d;
  };
  desk = build({ replaySecret: SECRET });
  const server = await desk.serveReplays("127.0.0.1", 0);
  replayUrl = `http://127.0.0.1:${server.address().port}/replay`;
});

after(async () => {
  await desk.close();
  callback.closeAllConnections();
  await new Promise((resolve) => callback.close(resolve));
});

beforeEach(() => {
  calls = [];
  ran = [];
});

let counter = 0;
function replayBody(overrides = {}) {
  counter += 1;
  return JSON.stringify({ workspace: "ws", agent: "triage", action: 7, payload: { ticket: "t01" }, mode: "replay",
    base_url: callbackUrl, token: "replay-token", purpose: "repair", replay_id: `rp-${process.pid}-${counter}`,
    ...overrides });
}

async function post(url, body, headers = {}) {
  const response = await fetch(url, { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } });
  return { status: response.status, body: await response.json() };
}

test("a signed replay runs the agent, its calls go to the callback with the replay's token", async () => {
  const body = replayBody();
  const answer = await post(replayUrl, body, signedHeaders(SECRET, body));
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.deepEqual(answer.body, { action: 7, committed: false, next: null });
  assert.deepEqual(ran, ["t01"]);
  assert.deepEqual(calls.map((c) => c.path), ["/api/v1/recording/actions/7/get/", "/api/v1/recording/actions/7/finish/"]);
  assert.ok(calls.every((c) => c.auth === "Bearer replay-token"));
  assert.deepEqual(calls[1].body, { decision: { choice: "refund" } });
});

test("an unsigned replay is refused with 401 before the agent runs", async () => {
  const answer = await post(replayUrl, replayBody());
  assert.equal(answer.status, 401);
  assert.match(answer.body.error, /missing signature headers/);
  assert.deepEqual(ran, []);
  assert.deepEqual(calls, []);
});

test("a replay signed with another secret, or whose body was changed after signing, is refused with 401", async () => {
  const body = replayBody();
  const forged = await post(replayUrl, body, signedHeaders("not-the-secret", body));
  assert.equal(forged.status, 401);
  assert.match(forged.body.error, /bad signature/);
  const tampered = await post(replayUrl, body.replace('"t01"', '"t99"'), signedHeaders(SECRET, body));
  assert.equal(tampered.status, 401);
  assert.deepEqual(ran, []);
  assert.deepEqual(calls, []);
});

test("a replay signed more than 300 s ago is refused with 401", async () => {
  const body = replayBody();
  const answer = await post(replayUrl, body, signedHeaders(SECRET, body, { now: Date.now() / 1000 - 301 }));
  assert.equal(answer.status, 401);
  assert.match(answer.body.error, /stale timestamp/);
  assert.deepEqual(ran, []);
});

test("the same signed replay sent twice runs once; the second is refused with 401", async () => {
  const body = replayBody();
  const headers = signedHeaders(SECRET, body);
  assert.equal((await post(replayUrl, body, headers)).status, 200);
  const again = await post(replayUrl, body, headers);
  assert.equal(again.status, 401);
  assert.match(again.body.error, /replay_id already seen/);
  assert.deepEqual(ran, ["t01"]);
});

test("a signed replay for an agent this desk lacks is 404, and an agent that throws is 500", async () => {
  const unknown = replayBody({ agent: "refund" });
  assert.equal((await post(replayUrl, unknown, signedHeaders(SECRET, unknown))).status, 404);
  const broken = replayBody({ agent: "broken" });
  const answer = await post(replayUrl, broken, signedHeaders(SECRET, broken));
  assert.equal(answer.status, 500);
  assert.equal(answer.body.error, "Error: the model is down");
  assert.deepEqual(ran, ["broken"]);
});

test("a desk without a replay secret refuses to serve replays at all", async () => {
  const unsigned = new Desk(new Client("http://127.0.0.1:9", "unused"));
  await assert.rejects(unsigned.serveReplays("127.0.0.1", 0), /needs replaySecret/);
  assert.equal(unsigned.server, null);
});

test("a body past the limit is refused with 413, and the agent does not run", async () => {
  const body = replayBody({ payload: { ticket: "t01", pad: "x".repeat(600 * 1024) } });
  const answer = await post(replayUrl, body, signedHeaders(SECRET, body));
  assert.equal(answer.status, 413);
  assert.deepEqual(ran, []);
});
