// Replay signing: the accepted case and each way a request is refused.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ReplayGuard, ReplayRefused, sign, signedHeaders, verify } from "../src/index.js";

const SECRET = "whsec_test";
const BODY = '{"purpose":"repair","replay_id":"r-1"}';
const NOW = 1_700_000_000;

const refused = (reason) => (exc) => exc instanceof ReplayRefused && exc.reason === reason && exc.status === 401;

test("the signature is HMAC-SHA256 over '<timestamp>.' and the raw body, as the server computes it", () => {
  // The vector comes from `openssl dgst -sha256 -hmac whsec_test`, not from this code.
  assert.equal(sign(SECRET, NOW, BODY), "v1=c408feddfcde74187298003ca2fe1b924e2c183f9a06104cecef5811679f0a40");
  assert.equal(sign(SECRET, String(NOW), Buffer.from(BODY)), sign(SECRET, NOW, BODY));
});

test("a signed, fresh request verifies, whatever the case of its header names", () => {
  const headers = signedHeaders(SECRET, BODY, { now: NOW });
  assert.equal(headers["X-Kintsugi-Timestamp"], String(NOW));
  verify(SECRET, headers, BODY, { now: NOW + 299 });
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  verify(SECRET, lower, Buffer.from(BODY), { now: NOW - 299 });
  verify(SECRET, new Headers(headers), BODY, { now: NOW });
});

test("missing headers are refused", () => {
  const headers = signedHeaders(SECRET, BODY, { now: NOW });
  assert.throws(() => verify(SECRET, {}, BODY, { now: NOW }), refused("missing signature headers"));
  assert.throws(() => verify(SECRET, { "X-Kintsugi-Signature": headers["X-Kintsugi-Signature"] }, BODY, { now: NOW }),
    refused("missing signature headers"));
  assert.throws(() => verify(SECRET, { "X-Kintsugi-Timestamp": String(NOW) }, BODY, { now: NOW }),
    refused("missing signature headers"));
});

test("a bad signature is refused: another secret, a changed body, a changed timestamp, a truncated digest", () => {
  const headers = signedHeaders(SECRET, BODY, { now: NOW });
  assert.throws(() => verify("another-secret", headers, BODY, { now: NOW }), refused("bad signature"));
  assert.throws(() => verify(SECRET, headers, BODY.replace("r-1", "r-2"), { now: NOW }), refused("bad signature"));
  assert.throws(() => verify(SECRET, { ...headers, "X-Kintsugi-Timestamp": String(NOW + 1) }, BODY, { now: NOW }),
    refused("bad signature"));
  assert.throws(() => verify(SECRET, { ...headers, "X-Kintsugi-Signature": headers["X-Kintsugi-Signature"].slice(0, -2) },
    BODY, { now: NOW }), refused("bad signature"));
  assert.throws(() => verify(SECRET, { ...headers, "X-Kintsugi-Signature": headers["X-Kintsugi-Signature"].replace("v1=", "v0=") },
    BODY, { now: NOW }), refused("bad signature"));
  assert.throws(() => verify(SECRET, { ...headers, "X-Kintsugi-Timestamp": "17e8" }, BODY, { now: NOW }),
    refused("malformed timestamp"));
});

test("a timestamp more than 300 s from now is refused, in the past or in the future", () => {
  const headers = signedHeaders(SECRET, BODY, { now: NOW });
  assert.throws(() => verify(SECRET, headers, BODY, { now: NOW + 301 }), refused("stale timestamp"));
  assert.throws(() => verify(SECRET, headers, BODY, { now: NOW - 301 }), refused("stale timestamp"));
  verify(SECRET, headers, BODY, { now: NOW + 300 });
});

test("the guard admits a replay_id once; a replayed request is refused", () => {
  let now = NOW;
  const guard = new ReplayGuard(SECRET, { clock: () => now });
  const headers = signedHeaders(SECRET, BODY, { now });
  assert.deepEqual(guard.admit(headers, BODY), { purpose: "repair", replay_id: "r-1" });
  assert.throws(() => guard.admit(headers, BODY), refused("replay_id already seen"));
  // Re-signed later with a fresh timestamp, the same replay_id is still the same replay.
  now += 200;
  assert.throws(() => guard.admit(signedHeaders(SECRET, BODY, { now }), BODY), refused("replay_id already seen"));
  // Once the first timestamp is out of the window the id is forgotten, and its old request is stale anyway.
  now += 200;
  assert.throws(() => guard.admit(headers, BODY), refused("stale timestamp"));
});

test("the guard refuses a signed body without a replay_id or with an unknown purpose, and remembers nothing forged", () => {
  const guard = new ReplayGuard(SECRET, { clock: () => NOW });
  const admit = (body, secret = SECRET) => guard.admit(signedHeaders(secret, body, { now: NOW }), body);
  assert.throws(() => admit('{"purpose":"repair"}'), refused("missing replay_id"));
  assert.throws(() => admit('{"purpose":"rollback","replay_id":"r-9"}'), refused("unknown purpose"));
  assert.throws(() => admit("[1, 2]"), refused("the signed body is not a JSON object"));
  assert.throws(() => admit("not json"), refused("the signed body is not JSON"));
  assert.throws(() => admit('{"purpose":"what_if","replay_id":"r-5"}', "forged"), refused("bad signature"));
  assert.equal(guard.seen.size, 0);
  for (const purpose of ["repair", "verification", "what_if"]) admit(`{"purpose":"${purpose}","replay_id":"${purpose}"}`);
  assert.equal(guard.seen.size, 3);
});

test("signing without a secret is a programming error, not an empty key", () => {
  assert.throws(() => sign("", NOW, BODY), TypeError);
  assert.throws(() => new ReplayGuard(undefined), TypeError);
});

test("with a secret per agent, a request must be signed with the secret of the agent its body names", () => {
  const guard = new ReplayGuard({ triage: "triage-secret", refund: "refund-secret" }, { clock: () => NOW });
  const body = (agent, id) => JSON.stringify({ agent, purpose: "repair", replay_id: id });
  const triage = body("triage", "p-1");
  assert.equal(guard.admit(signedHeaders("triage-secret", triage, { now: NOW }), triage).agent, "triage");
  const refund = body("refund", "p-2");
  assert.equal(guard.admit(signedHeaders("refund-secret", refund, { now: NOW }), refund).agent, "refund");
  // The triage agent's secret cannot sign a replay of the refund agent.
  const crossed = body("refund", "p-3");
  assert.throws(() => guard.admit(signedHeaders("triage-secret", crossed, { now: NOW }), crossed),
    refused("signed for another agent"));
  assert.throws(() => guard.admit(signedHeaders("nobody's", crossed, { now: NOW }), crossed), refused("bad signature"));
  assert.throws(() => guard.admit({}, crossed), refused("missing signature headers"));
  assert.throws(() => new ReplayGuard({}), TypeError);
});
