// Agent functions by name: records root actions depth first, exactly as kintsugi's in-process recorder
// runs them, and serves kintsugi's replays of them over node:http.
import http from "node:http";

import { Client, KintsugiError } from "./client.js";
import { RemoteRecorder } from "./recorder.js";
import { ReplayGuard, ReplayRefused, TOLERANCE_SECONDS } from "./signing.js";

export const MAX_REPLAY_BODY = 512 * 1024;

export class Desk {
  // replayClient(baseUrl, token): the client a replay's calls go through (yours, to observe or wrap them).
  constructor(client, { perform, replaySecret, toleranceSeconds = TOLERANCE_SECONDS, replayClient } = {}) {
    this.client = client;
    this.replayClient = replayClient ?? ((baseUrl, token) => new Client(baseUrl, token, {
      timeout: this.client.timeout, maxWaitSeconds: this.client.maxWaitSeconds, buffer: this.client.buffer }));
    this.agents = new Map();
    this.perform = perform ?? (async () => {}); // your real side effects: (agent, payload, effect)
    this.guard = replaySecret ? new ReplayGuard(replaySecret, { toleranceSeconds }) : null;
    this.server = null;
  }

  /** Register `fn(rec, payload) -> decision` under `name`; returns fn. */
  agent(name, fn) {
    if (typeof fn !== "function") throw new TypeError(`agent ${name}: a function is required`);
    this.agents.set(name, fn);
    return fn;
  }

  async #run(client, agent, action, payload) {
    const fn = this.agents.get(agent);
    if (!fn) throw new Error(`no agent ${JSON.stringify(agent)} on this desk`);
    const rec = new RemoteRecorder(client, action, payload);
    let decision;
    try {
      decision = await fn(rec, payload);
    } catch (err) {
      rec.discard(); // never finished, so nothing of the action lands: its held calls neither
      throw err;
    }
    const answer = await rec.finish(decision); // sends what the agent's calls left held back, or throws
    // Only after finish: an effect leaves once kintsugi holds the whole action it belongs to.
    for (const effect of rec.effects) {
      if (effect.perform) await this.perform(agent, payload, effect);
    }
    return answer;
  }

  /** Record a root action and everything it hands off, in the order kintsugi's recorder runs them. */
  async runRoot(agent, payload) {
    let opened = await this.client.openAction(agent, payload);
    const ids = [opened.action];
    let answer = await this.#run(this.client, agent, opened.action, payload);
    while (!answer.committed) {
      const next = answer.next;
      opened = await this.client.openAction(next.agent, undefined, { parent: next.parent });
      ids.push(opened.action);
      answer = await this.#run(this.client, next.agent, opened.action, opened.payload);
    }
    return ids;
  }

  /** Re-run one action for kintsugi: its calls go to the replay's callback URL with the replay's token,
   *  through `client` if given, else the desk's replayClient. */
  replay(request, { client } = {}) {
    const through = client ?? this.replayClient(request.base_url, request.token);
    return this.#run(through, request.agent, request.action, request.payload);
  }

  /** Serve kintsugi's replay POSTs on host:port; resolves to the listening http.Server. Needs replaySecret.
   *  verify(request, headers): your check after the signature holds, before the agent runs (throw
   *  ReplayRefused to answer 401; see request.purpose). log(event): each request's outcome. */
  serveReplays(host, port, { verify, log } = {}) {
    this.hooks = { verify, log };
    if (!this.guard) {
      // kintsugi signs every replay: a desk without the secret could only run requests anyone could forge.
      return Promise.reject(new TypeError(
        "serveReplays needs replaySecret: the krs_ secret shown when the agent was registered"));
    }
    const server = http.createServer((req, res) => {
      // A failure while answering must not become an unhandled rejection that ends the desk's process.
      this.#answer(req, res).catch(() => {
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
    });
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => {
        server.off("error", reject);
        resolve(server);
      });
    });
  }

  /** Stop serving replays. */
  close() {
    const server = this.server;
    this.server = null;
    if (!server) return Promise.resolve();
    server.closeAllConnections?.();
    return new Promise((resolve) => server.close(() => resolve()));
  }

  async #answer(req, res) {
    let seen = {};
    const send = (status, body) => {
      try { // before the answer leaves, so the log holds it by the time kintsugi has it
        this.hooks?.log?.(replayEvent(status, body, seen, req.headers));
      } catch {
        // a failing log hook must not change what kintsugi is answered
      }
      const data = JSON.stringify(body);
      res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) });
      res.end(data);
    };
    if (req.method !== "POST") return send(405, { error: "replays are POSTed" });
    let raw;
    try {
      raw = await readBody(req, MAX_REPLAY_BODY);
    } catch {
      return send(413, { error: "request body too large" });
    }
    let request;
    try {
      request = this.guard.admit(req.headers, raw);
      seen = request ?? {};
      await this.hooks?.verify?.(request, req.headers);
    } catch (exc) {
      if (exc instanceof ReplayRefused) return send(401, { error: exc.message });
      return send(400, { error: "unreadable replay request" });
    }
    if (!request || !this.agents.has(request.agent)) {
      return send(404, { error: `no agent ${JSON.stringify(request?.agent ?? null)} here` });
    }
    try {
      send(200, await this.replay(request));
    } catch (exc) {
      if (exc instanceof KintsugiError) return send(502, { error: exc.message });
      // An agent bug answers 500; kintsugi blocks the repair with it.
      send(500, { error: `${exc?.name ?? "Error"}: ${exc?.message ?? exc}` });
    }
  }
}

/** What the log hook hears of one request: never the replay's token. */
function replayEvent(status, body, seen, headers) {
  const outcome = status === 200 ? "ran" : [401, 404, 405, 413].includes(status) ? "refused" : "failed";
  return {
    status, outcome, purpose: seen.purpose ?? null, agent: seen.agent ?? null, action: seen.action ?? null,
    replay_id: seen.replay_id ?? null, workspace: seen.workspace ?? null, error: body?.error ?? null,
    headers: Object.fromEntries(Object.entries(headers).filter(([k]) => k.toLowerCase().startsWith("x-kintsugi-"))),
  };
}

function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    // Past the limit the rest is drained, not kept, so that the 413 can still be answered.
    req.on("data", (chunk) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
    });
    req.on("end", () => (size > limit ? reject(new Error("too large")) : resolve(Buffer.concat(chunks))));
    req.on("error", reject);
  });
}
