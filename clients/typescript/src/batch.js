// A whole finished recording built in your process and recorded in one request (client.recordBatch):
// an agent that records after the fact, or uploads a trace it kept. Actions go in the order the
// in-process recorder runs them (depth first, each handoff opened after its parent finishes, the last
// handoff first); kintsugi records all of it or nothing, and names the action and call it refused.
import { randomUUID } from "node:crypto";

export class BatchAction {
  #effectCount = 0;

  constructor(batch, index, spec) {
    this.batch = batch;
    this.index = index;
    this.spec = spec;
  }

  #call(op, body) {
    if (this.spec.calls.at(-1)?.op === "finish") throw new Error(`action ${this.index} (${this.spec.agent}) is finished`);
    this.spec.calls.push({ op, ...body });
    return this;
  }

  ingest(sourceId) { return this.#call("ingest", { source: sourceId }); }

  get(key, defaultValue = null) { return this.#call("get", { key, default: defaultValue }); }

  set(key, value, { validFrom, validUntil, observedAt } = {}) {
    const body = { key, value };
    if (validFrom != null) body.valid_from = validFrom;
    if (validUntil != null) body.valid_until = validUntil;
    if (observedAt != null) body.observed_at = observedAt;
    return this.#call("set", body);
  }

  handoff(agent, payload) { return this.#call("handoff", { agent, payload }); }

  /** `idempotencyKey`: the key you carried to the provider; by default one unique to this batch. */
  effect(kind, { amount = 0, ticket, currency = "USD", idempotencyKey, external, ...details } = {}) {
    this.#effectCount += 1;
    const body = { kind, amount, currency, details,
      idempotency_key: idempotencyKey ?? `batch-${this.batch.id}-${this.index}-${this.#effectCount}` };
    if (ticket != null) body.ticket = ticket;
    if (external != null) body.external = external;
    return this.#call("effect", body);
  }

  finish(decision) { return this.#call("finish", { decision }); }
}

export class RecordingBatch {
  constructor() {
    this.id = randomUUID().replaceAll("-", "").slice(0, 12);
    this.actions = []; // the request's list
  }

  /** A root (with its payload), or the handoff of `parent` (an earlier BatchAction or its index; the
   *  payload is the one its handoff recorded, so it may be left out). */
  action(agent, payload, { parent } = {}) {
    const spec = { agent, calls: [] };
    if (payload != null) spec.payload = payload;
    if (parent != null) spec.parent = typeof parent === "number" ? parent : parent.index;
    this.actions.push(spec);
    return new BatchAction(this, this.actions.length - 1, spec);
  }
}
