// kintsugi's HTTP API as an agent process needs it: onboarding (a person's API token, the Workspace
// admin role) and the recording protocol (a recording token of one workspace). fetch only.

/** An error answer of the API: `{"error": {"code", "message", "details"}}` and its status. */
export class KintsugiError extends Error {
  constructor(status, code, message, details = null) {
    super(`${status} ${code}: ${message}`);
    this.name = "KintsugiError";
    this.status = status;
    this.code = code;
    this.apiMessage = message; // the API's own words; `message` leads with the status and code
    this.details = details;
    this.retryAfter = null; // seconds, when the answer carried Retry-After (a 429 or 503)
  }
}

function retryAfterSeconds(header) {
  // kintsugi sends whole seconds; an HTTP date is not waited on.
  if (header === null || header === undefined || !/^\d+(\.\d+)?$/.test(header.trim())) return null;
  return Number(header);
}

export const BUFFER = 64;

export class Client {
  // maxWaitSeconds: the most one call spends waiting out rate limits (429 with Retry-After, e.g. flagging
  // at 30 a minute); a wait that would go past it throws the 429 at once instead.
  // buffer: how many calls whose answer the agent does not use (set, handoff) a recorder holds back and
  // sends in the background (recorder.js); 0 sends each call as it is made.
  constructor(baseUrl, token, { timeout = 60_000, maxWaitSeconds = 60, buffer = BUFFER } = {}) {
    this.baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.token = token;
    this.timeout = timeout; // milliseconds
    this.maxWaitSeconds = maxWaitSeconds;
    this.buffer = buffer;
  }

  async request(method, path, body) {
    let waited = 0;
    for (;;) {
      try {
        return await this.#requestOnce(method, path, body);
      } catch (exc) {
        const wait = exc instanceof KintsugiError && exc.status === 429 ? exc.retryAfter : null;
        if (wait === null || waited + wait > this.maxWaitSeconds) throw exc;
        // A throttled call changed nothing on the server (refused before the view ran): safe to send again.
        await new Promise((resolve) => setTimeout(resolve, wait * 1000));
        waited += wait;
      }
    }
  }

  async #requestOnce(method, path, body) {
    let response;
    try {
      response = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers: { Authorization: `Bearer ${this.token}`, "Content-Type": "application/json", Accept: "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeout),
      });
    } catch (cause) {
      // The token is in the headers, never in the message: only the method and path are told.
      throw new KintsugiError(0, "unreachable", `${method} ${path}: ${cause?.cause?.code ?? cause?.name ?? "failed"}`);
    }
    const raw = await response.text();
    if (!response.ok) {
      let error;
      try {
        error = JSON.parse(raw).error;
      } catch {
        error = undefined;
      }
      if (!error || typeof error !== "object") error = { code: "http_error", message: raw.slice(0, 200), details: null };
      const failure = new KintsugiError(response.status, error.code ?? "", error.message ?? "", error.details ?? null);
      failure.retryAfter = retryAfterSeconds(response.headers.get("retry-after"));
      throw failure;
    }
    return raw ? JSON.parse(raw) : null;
  }

  // --- onboarding (a person's API token; the Workspace admin role) ---
  async workspaces() {
    const out = [];
    let path = "/api/v1/workspaces/";
    while (path) {
      const page = await this.request("GET", path);
      out.push(...page.results);
      path = page.next ? new URL(page.next).pathname + new URL(page.next).search : null;
    }
    return out;
  }

  async ensureWorkspace(name, { reason }) {
    const found = (await this.workspaces()).find((w) => w.name === name);
    return found ?? this.request("POST", "/api/v1/workspaces/", { name, reason });
  }

  /** Create a source; KintsugiError 409 `already_exists` if it exists (a create never overwrites). */
  createSource(workspace, sourceId, content, { reason, title = "", trust } = {}) {
    return this.request("POST", `/api/v1/workspaces/${workspace}/sources/`,
      { source_id: sourceId, content, title, reason, ...(trust ? { trust } : {}) });
  }

  updateSource(workspace, sourceId, { reason, content, title = "" } = {}) {
    return this.request("PATCH", `/api/v1/workspaces/${workspace}/sources/`,
      { source_id: sourceId, title, reason, ...(content !== undefined ? { content } : {}) });
  }

  /** Create the source, or change an existing one's content (an explicit update, with the reason). */
  async putSource(workspace, sourceId, content, { reason, title = "", trust } = {}) {
    try {
      return await this.createSource(workspace, sourceId, content, { reason, title, trust });
    } catch (exc) {
      if (!(exc instanceof KintsugiError) || exc.status !== 409) throw exc;
    }
    return this.updateSource(workspace, sourceId, { reason, content, title });
  }

  /** Create a ticket; `fields` are the API's (customer_name, body, amount_cents, ...). 409 if it exists. */
  createTicket(workspace, ticketId, { reason, ...fields } = {}) {
    return this.request("POST", `/api/v1/workspaces/${workspace}/tickets/`, { ticket_id: ticketId, reason, ...fields });
  }

  updateTicket(workspace, ticketId, { reason, ...fields } = {}) {
    return this.request("PATCH", `/api/v1/workspaces/${workspace}/tickets/`, { ticket_id: ticketId, reason, ...fields });
  }

  /** Create the ticket, or change an existing one's fields (an explicit update, with the reason). */
  async putTicket(workspace, ticketId, fields = {}) {
    try {
      return await this.createTicket(workspace, ticketId, fields);
    } catch (exc) {
      if (!(exc instanceof KintsugiError) || exc.status !== 409) throw exc;
    }
    return this.updateTicket(workspace, ticketId, fields);
  }

  /** Register an agent with its replay endpoint (or re-point it); the answer may carry its replay secret. */
  registerAgent(workspace, name, replayUrl, { reason, timeoutSeconds = 30 } = {}) {
    return this.request("POST", `/api/v1/workspaces/${workspace}/agents/`,
      { name, replay_url: replayUrl, timeout_seconds: timeoutSeconds, reason });
  }

  /** A new replay secret for a registered agent (the old one is refused from now on); returns it. */
  async rotateReplaySecret(workspace, name, { reason }) {
    const path = `/api/v1/workspaces/${workspace}/agents/${encodeURIComponent(name)}/rotate-secret/`;
    return (await this.request("POST", path, { reason })).replay_secret;
  }

  /** Flag a source (its API id) as bad: opens an incident and starts its repair (Support lead role). */
  flagSource(source, { reason }) {
    return this.request("POST", `/api/v1/sources/${source}/flag/`, { reason });
  }

  /** Make a user a member of a workspace (Workspace admin role); `role`: one they must already hold. */
  addMember(workspace, username, { reason, role } = {}) {
    return this.request("POST", `/api/v1/workspaces/${workspace}/members/`,
      { username, reason, ...(role ? { role } : {}) });
  }

  removeMember(workspace, username, { reason }) {
    return this.request("DELETE", `/api/v1/workspaces/${workspace}/members/${encodeURIComponent(username)}/`,
      { reason });
  }

  /** Active facts, standing decisions and live effects (what `manage.py export_state --json` prints). */
  exportState(workspace) {
    return this.request("GET", `/api/v1/workspaces/${workspace}/state/`);
  }

  /** Issue a recording token for the workspace; returns its key (shown once). */
  async issueAgentToken(workspace, { label, reason, agents } = {}) {
    const body = { label, reason, ...(agents?.length ? { agents } : {}) };
    return (await this.request("POST", `/api/v1/workspaces/${workspace}/agent-tokens/`, body)).key;
  }

  // --- recording (a recording token) ---
  /** Open a root action (with its payload) or the next handoff of a finished action (`parent`). */
  openAction(agent, payload, { parent } = {}) {
    const body = { agent };
    if (payload !== undefined && payload !== null) body.payload = payload;
    if (parent !== undefined && parent !== null) body.parent = parent;
    return this.request("POST", "/api/v1/recording/actions/", body);
  }

  /** One call of an open action: ingest, get, set, handoff, effect or finish. */
  call(action, op, body) {
    return this.request("POST", `/api/v1/recording/actions/${action}/${op}/`, body);
  }

  /** Several calls of one open action in one request, in order (each `{ op, ...body }`, finish last);
   *  each call's answer. All or nothing: a refused call throws KintsugiError naming it (`details.call`). */
  async calls(action, calls) {
    return (await this.request("POST", `/api/v1/recording/actions/${action}/calls/`, { calls })).results;
  }

  /** A whole finished recording in one request (a RecordingBatch, or its `actions`): `{ committed,
   *  actions: [ids], results: [[answers]] }`. All or nothing. */
  recordBatch(actions) {
    return this.request("POST", "/api/v1/recording/batch/", { actions: actions?.actions ?? actions });
  }

  /** Abandon the open recording holding `action`: nothing of it reaches the graph. */
  abandon(action, { reason }) {
    return this.request("POST", `/api/v1/recording/actions/${action}/abandon/`, { reason });
  }
}
