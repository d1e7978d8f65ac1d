// The in-process Recorder's methods, each one call of the recording protocol, sending in the background
// what the agent needs no answer to.
//
// set and handoff answer nothing the agent uses, so they are held back (up to `client.buffer` of them)
// and sent with the next call whose answer the agent awaits (ingest, get, effect, finish), in one request
// of the several-calls form, in the order they were made; once the buffer is full they are sent at once,
// without the agent waiting. The protocol sees the same calls in the same order: what is recorded is what
// call by call records. A held-back call the server refuses is never lost silently: the refusal
// (KintsugiError, naming the call) is thrown by the action's next call, its finish, or flush(), and by
// every call after it. Calls still held when the process runs out of work ("beforeExit") are sent then;
// a refusal there is written to stderr. process.exit() and a crash leave no turn of the event loop to send
// in: what was still unsent is named on stderr then (await flushHeld() before process.exit). Await each
// call before the next: the order is the agent's.
import { KintsugiError } from "./client.js";

const HOLDING = new Set(); // recorders with calls not yet sent, or on their way
let sentAtExit = false;

function sendAtExit() {
  if (sentAtExit) return;
  sentAtExit = true;
  process.on("beforeExit", async () => {
    for (const rec of [...HOLDING]) {
      try {
        await rec.flush();
      } catch (err) {
        console.error(`kintsugi: calls of action ${rec.actionId} held back at exit were refused: ${err.message}`);
      }
    }
  });
  process.on("exit", () => {
    for (const rec of HOLDING) {
      console.error(`kintsugi: ${rec.pending} held-back call(s) of action ${rec.actionId} never sent: the process `
        + "exited before they could be (await flushHeld() before process.exit)");
    }
  });
}

/** Send what every recorder of this process holds back, and wait for it; rejects with the first refusal
 *  (after trying them all). The client does this itself when the process runs out of work. */
export async function flushHeld() {
  const failures = [];
  for (const rec of [...HOLDING]) {
    try {
      await rec.flush();
    } catch (err) {
      failures.push(err);
    }
  }
  if (failures.length) throw failures[0];
}

export class RemoteRecorder {
  #effectCount = 0;
  #held = [];
  #sending = null; // at most one batch in flight: the buffer stays bounded
  #inFlight = 0;
  #failure = null;
  #limit;

  constructor(client, action, payload = {}, { buffer } = {}) {
    this.client = client;
    this.actionId = action;
    this.ticket = payload?.ticket;
    this.effects = []; // the answers, in order: each says whether to perform it
    this.#limit = buffer ?? client.buffer ?? 0;
  }

  /** A source's content; null when the source is masked (a repair) or quarantined (flagged). */
  async ingest(sourceId) {
    return (await this.#answer("ingest", { source: sourceId })).content;
  }

  async get(key, defaultValue = null) {
    return (await this.#answer("get", { key, default: defaultValue })).value;
  }

  /** Several reads in one request (the several-calls form), each recorded as its own get, in order. */
  async getMany(keys, defaultValue = null) {
    if (keys.length <= 1) return keys.length ? [await this.get(keys[0], defaultValue)] : [];
    const answers = await this.calls(keys.map((key) => ({ op: "get", key, default: defaultValue })));
    return answers.map((a) => a.value);
  }

  async set(key, value, { validFrom, validUntil, observedAt } = {}) {
    const body = { key, value };
    if (validFrom != null) body.valid_from = validFrom;
    if (validUntil != null) body.valid_until = validUntil;
    if (observedAt != null) body.observed_at = observedAt;
    await this.#hold("set", body);
  }

  async handoff(agent, payload) {
    await this.#hold("handoff", { agent, payload });
  }

  /**
   * Record the effect before it leaves. Perform it only if the answer's `perform` is true (false while
   * kintsugi replays this action in a repair: the effect is held for a person). `external`: the ticket is
   * not one of the workspace's desk tickets (otherwise a live effect must name one).
   */
  async effect(kind, { amount = 0, ticket, currency = "USD", idempotencyKey, external, ...details } = {}) {
    this.#effectCount += 1;
    const body = {
      kind, amount, currency, details,
      idempotency_key: idempotencyKey ?? `action-${this.actionId}-effect-${this.#effectCount}`,
    };
    if (ticket != null) body.ticket = ticket;
    if (external != null) body.external = external;
    const answer = await this.#answer("effect", body);
    this.effects.push(answer);
    return answer;
  }

  /** Finish the action with its decision (a JSON object without fractional numbers). */
  finish(decision) {
    return this.#answer("finish", { decision });
  }

  /** Several calls of this action in one request (each `{ op, ...body }`), after what is held back. */
  async calls(calls) {
    await this.#settle();
    const held = this.#take();
    if (!held.length) return this.client.calls(this.actionId, calls);
    return (await this.#send([...held, ...calls])).slice(held.length);
  }

  /** Send what is held back now and wait for it; throws a refusal of any of it. */
  async flush() {
    await this.#settle();
    const held = this.#take();
    if (held.length) await this.#send(held);
  }

  /** How many of this action's calls are held back or on their way, not yet taken by kintsugi. */
  get pending() {
    return this.#held.length + this.#inFlight;
  }

  /** Drop what is held back (the agent failed: its action is never finished, so nothing of it lands). */
  discard() {
    this.#take();
  }

  async #hold(op, body) {
    this.#raise();
    if (this.#limit <= 0) {
      await this.client.call(this.actionId, op, body);
      return;
    }
    this.#held.push({ op, ...body });
    HOLDING.add(this);
    sendAtExit();
    if (this.#held.length >= this.#limit) {
      await this.#settle(); // the batch before this one has landed
      const batch = this.#take();
      this.#inFlight = batch.length;
      HOLDING.add(this); // on its way: still named if the process exits before it lands
      // Kept in #failure and thrown by the action's next call.
      this.#sending = this.#send(batch).catch(() => {}).finally(() => {
        this.#inFlight = 0;
        if (!this.#held.length) HOLDING.delete(this);
      });
    }
  }

  async #answer(op, body) {
    await this.#settle();
    const held = this.#take();
    if (!held.length) return this.client.call(this.actionId, op, body); // as call by call: one plain request
    try {
      return (await this.client.calls(this.actionId, [...held, { op, ...body }])).at(-1);
    } catch (err) {
      if (!(err instanceof KintsugiError && err.details?.call === held.length)) {
        this.#failure ??= err; // a held-back call was refused, or may not have landed: stop here
        throw err;
      }
    }
    // Only the call that needs an answer was refused (nothing of the request landed): the held calls land
    // alone, and the call is made alone, answered or refused as call by call would be.
    await this.#send(held);
    return this.client.call(this.actionId, op, body);
  }

  async #send(calls) {
    try {
      return await this.client.calls(this.actionId, calls);
    } catch (err) {
      this.#failure ??= err;
      throw err;
    }
  }

  async #settle() {
    const sending = this.#sending;
    this.#sending = null;
    if (sending) await sending;
    this.#raise();
  }

  #raise() {
    if (!this.#failure) return;
    // Told to the program now: what is still held can never land (nothing is recorded past the gap), and
    // the exit has nothing left to tell.
    this.#held = [];
    if (!this.#inFlight) HOLDING.delete(this);
    throw this.#failure;
  }

  #take() {
    const held = this.#held;
    this.#held = [];
    if (!this.#inFlight) HOLDING.delete(this);
    return held;
  }
}
