// Replay signing: kintsugi signs every replay POST it makes to an agent's replay endpoint, and the
// endpoint refuses, before any agent code runs, what it cannot prove came from kintsugi just now and once.
//
//   X-Kintsugi-Timestamp: <unix seconds>
//   X-Kintsugi-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body bytes)>
//
// The body carries `purpose` ("repair" | "verification" | "what_if") and a unique `replay_id`.
import { createHmac, timingSafeEqual } from "node:crypto";

export const TIMESTAMP_HEADER = "X-Kintsugi-Timestamp";
export const SIGNATURE_HEADER = "X-Kintsugi-Signature";
export const SIGNATURE_VERSION = "v1";
export const TOLERANCE_SECONDS = 300;
export const PURPOSES = Object.freeze(["repair", "verification", "what_if"]);

/** A replay request that is not admitted; `reason` is a fixed phrase, never the request's own text. */
export class ReplayRefused extends Error {
  constructor(reason) {
    super(`replay refused: ${reason}`);
    this.name = "ReplayRefused";
    this.reason = reason;
    this.status = 401;
  }
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

function bytes(body) {
  if (typeof body === "string") return Buffer.from(body, "utf8");
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError("the raw body must be a string, Buffer or Uint8Array");
}

/** `v1=<hex>`: the signature of `rawBody` sent at `timestamp` (unix seconds). */
export function sign(secret, timestamp, rawBody) {
  if (!secret) throw new TypeError("a replay secret is required to sign");
  const mac = createHmac("sha256", secret);
  mac.update(`${timestamp}.`, "utf8");
  mac.update(bytes(rawBody));
  return `${SIGNATURE_VERSION}=${mac.digest("hex")}`;
}

/** The two headers of a signed replay request. */
export function signedHeaders(secret, rawBody, { now = nowSeconds() } = {}) {
  const timestamp = String(Math.floor(now));
  return { [TIMESTAMP_HEADER]: timestamp, [SIGNATURE_HEADER]: sign(secret, timestamp, rawBody) };
}

function header(headers, name) {
  if (!headers) return undefined;
  if (typeof headers.get === "function") return headers.get(name) ?? undefined; // fetch's Headers
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === wanted) return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
}

/**
 * Check a request's signature and freshness; throws ReplayRefused, returns nothing.
 * Limits: says nothing about uniqueness (a ReplayGuard remembers replay ids).
 */
export function verify(secret, headers, rawBody, { now = nowSeconds(), toleranceSeconds = TOLERANCE_SECONDS } = {}) {
  if (!secret) throw new TypeError("a replay secret is required to verify");
  const timestamp = header(headers, TIMESTAMP_HEADER);
  const signature = header(headers, SIGNATURE_HEADER);
  if (!timestamp || !signature) throw new ReplayRefused("missing signature headers");
  if (!/^\d{1,15}$/.test(timestamp)) throw new ReplayRefused("malformed timestamp");
  // The signature is checked before the clock so that a forged request learns nothing about our clock.
  const expected = Buffer.from(sign(secret, timestamp, rawBody), "utf8");
  const given = Buffer.from(String(signature).trim(), "utf8");
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    throw new ReplayRefused("bad signature");
  }
  if (Math.abs(now - Number(timestamp)) > toleranceSeconds) throw new ReplayRefused("stale timestamp");
}

/**
 * Admits each signed replay request once: verify, then parse the body and remember its replay_id for as
 * long as its timestamp could still pass (ids older than that are refused by the clock anyway).
 *
 * `secret` is one secret for every agent, or a map of agent name to that agent's own secret: then the
 * request must be signed with the secret of the agent its body names.
 */
export class ReplayGuard {
  constructor(secret, { toleranceSeconds = TOLERANCE_SECONDS, clock = nowSeconds } = {}) {
    const perAgent = secret && typeof secret === "object" && !(secret instanceof Uint8Array);
    this.secrets = perAgent ? new Map(Object.entries(secret).filter(([, s]) => s)) : new Map([[null, secret]]);
    if (!secret || this.secrets.size === 0 || [...this.secrets.values()].some((s) => !s)) {
      throw new TypeError("a replay secret is required");
    }
    this.toleranceSeconds = toleranceSeconds;
    this.clock = clock;
    this.seen = new Map(); // replay_id -> the timestamp it came with
  }

  /** The parsed request if it is signed, fresh and new; otherwise throws ReplayRefused. */
  admit(headers, rawBody) {
    const now = this.clock();
    const signer = this.#signer(headers, rawBody, now);
    let request;
    try {
      request = JSON.parse(bytes(rawBody).toString("utf8"));
    } catch {
      throw new ReplayRefused("the signed body is not JSON");
    }
    if (request === null || typeof request !== "object" || Array.isArray(request)) {
      throw new ReplayRefused("the signed body is not a JSON object");
    }
    if (signer !== null && request.agent !== signer) throw new ReplayRefused("signed for another agent");
    if (typeof request.replay_id !== "string" || request.replay_id.length === 0 || request.replay_id.length > 200) {
      throw new ReplayRefused("missing replay_id");
    }
    if (!PURPOSES.includes(request.purpose)) throw new ReplayRefused("unknown purpose");
    this.#forgetOld(now);
    if (this.seen.has(request.replay_id)) throw new ReplayRefused("replay_id already seen");
    this.seen.set(request.replay_id, Number(header(headers, TIMESTAMP_HEADER)));
    return request;
  }

  // The agent whose secret signed the request (null for a single secret); every secret is tried, so the
  // time taken does not tell which agent's secret came closest.
  #signer(headers, rawBody, now) {
    let signer, refusal;
    for (const [agent, secret] of this.secrets) {
      try {
        verify(secret, headers, rawBody, { now, toleranceSeconds: this.toleranceSeconds });
        if (signer === undefined) signer = agent;
      } catch (exc) {
        if (!(exc instanceof ReplayRefused)) throw exc;
        refusal ??= exc;
      }
    }
    if (signer === undefined) throw refusal;
    return signer;
  }

  #forgetOld(now) {
    for (const [id, timestamp] of this.seen) {
      if (Math.abs(now - timestamp) > this.toleranceSeconds) this.seen.delete(id);
    }
  }
}
