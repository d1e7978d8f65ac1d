// The in-process Recorder's methods, each one call of the recording protocol. Await each call before
// the next: the recorder keeps the order the agent made them in.

export class RemoteRecorder {
  constructor(client, action, payload = {}) {
    this.client = client;
    this.actionId = action;
    this.ticket = payload?.ticket;
    this.effects = []; // the answers, in order: each says whether to perform it
    this.#effectCount = 0;
  }

  #effectCount;

  /** A source's content; null when the source is masked (a repair) or quarantined (flagged). */
  async ingest(sourceId) {
    return (await this.client.call(this.actionId, "ingest", { source: sourceId })).content;
  }

  async get(key, defaultValue = null) {
    return (await this.client.call(this.actionId, "get", { key, default: defaultValue })).value;
  }

  async set(key, value, { validFrom, validUntil, observedAt } = {}) {
    const body = { key, value };
    if (validFrom != null) body.valid_from = validFrom;
    if (validUntil != null) body.valid_until = validUntil;
    if (observedAt != null) body.observed_at = observedAt;
    await this.client.call(this.actionId, "set", body);
  }

  async handoff(agent, payload) {
    await this.client.call(this.actionId, "handoff", { agent, payload });
  }

  /**
   * Record the effect before it leaves. Perform it only if the answer's `perform` is true (false while
   * kintsugi replays this action in a repair: the effect is held for a person).
   */
  async effect(kind, { amount = 0, ticket, currency = "USD", idempotencyKey, ...details } = {}) {
    this.#effectCount += 1;
    const body = {
      kind, amount, currency, details,
      idempotency_key: idempotencyKey ?? `action-${this.actionId}-effect-${this.#effectCount}`,
    };
    if (ticket != null) body.ticket = ticket;
    const answer = await this.client.call(this.actionId, "effect", body);
    this.effects.push(answer);
    return answer;
  }

  /** Finish the action with its decision (a JSON object without fractional numbers). */
  finish(decision) {
    return this.client.call(this.actionId, "finish", { decision });
  }
}
