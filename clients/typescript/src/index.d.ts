import type { IncomingHttpHeaders, Server } from "node:http";
import type { ReplayRequest, ReplaySecret } from "./signing.js";

export * from "./signing.js";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** An error answer of the API (status 0 and code "unreachable" when no answer came). */
export declare class KintsugiError extends Error {
  readonly status: number;
  readonly code: string;
  /** The API's own message (`message` leads with status and code). */
  readonly apiMessage: string;
  readonly details: unknown;
  /** Seconds the answer's Retry-After asked for (a 429 or 503), else null. */
  retryAfter: number | null;
  constructor(status: number, code: string, message: string, details?: unknown);
}

export interface Workspace { id: number; name: string; [field: string]: unknown }

export interface Members {
  workspace: string;
  members: { username: string; roles: string[] }[];
  changed?: boolean;
}

export interface WorkspaceState {
  workspace: string;
  facts: { key: string; value: Json }[];
  decisions: { ticket: string; choice: string; level: string | null }[];
  effects: { kind: string; ticket: string | null; amount_cents: number }[];
}

export interface ActionOpened {
  action: number;
  seq: number;
  recording: number;
  agent: string;
  payload: JsonObject;
  parent: number | null;
  replay: boolean;
}

export interface FinishAnswer {
  action: number;
  dhash?: string;
  committed: boolean;
  next: { agent: string; parent: number } | null;
  [field: string]: unknown;
}

export interface EffectAnswer {
  effect: number;
  idempotency_key: string;
  kind: string;
  ticket: string | null;
  amount: number;
  currency: string;
  /** True: perform it now. False: it is held for a person; never perform it. */
  perform: boolean;
  held: boolean;
}

export interface TicketFields {
  reason: string;
  customer_name?: string;
  customer_email?: string;
  subject?: string;
  body?: string;
  amount_cents?: number;
  currency?: string;
  tier?: string;
  payment_reference?: string;
}

export declare class Client {
  constructor(baseUrl: string, token: string, options?: { timeout?: number; maxWaitSeconds?: number; buffer?: number });
  readonly baseUrl: string;
  readonly token: string;
  /** Milliseconds per request. */
  readonly timeout: number;
  /** The most seconds one call waits out rate limits (429 with Retry-After) before throwing the 429. */
  readonly maxWaitSeconds: number;
  /** Calls whose answer the agent does not use (set, handoff) a recorder holds back and sends in the
   *  background; 0 sends each call as it is made. */
  readonly buffer: number;
  request<T = any>(method: string, path: string, body?: unknown): Promise<T>;

  workspaces(): Promise<Workspace[]>;
  ensureWorkspace(name: string, options: { reason: string }): Promise<Workspace>;
  createSource(workspace: number, sourceId: string, content: string,
    options: { reason: string; title?: string; trust?: string }): Promise<any>;
  updateSource(workspace: number, sourceId: string,
    options: { reason: string; content?: string; title?: string }): Promise<any>;
  putSource(workspace: number, sourceId: string, content: string,
    options: { reason: string; title?: string; trust?: string }): Promise<any>;
  createTicket(workspace: number, ticketId: string, fields: TicketFields): Promise<any>;
  updateTicket(workspace: number, ticketId: string, fields: TicketFields): Promise<any>;
  putTicket(workspace: number, ticketId: string, fields: TicketFields): Promise<any>;
  registerAgent(workspace: number, name: string, replayUrl: string,
    options: { reason: string; timeoutSeconds?: number }): Promise<{ name: string; replay_url: string; replay_secret?: string; [field: string]: unknown }>;
  /** A new registration's answer carries `replay_secret` once; this issues a new one (the old is refused). */
  rotateReplaySecret(workspace: number, name: string, options: { reason: string }): Promise<string>;
  flagSource(source: number, options: { reason: string }): Promise<any>;
  addMember(workspace: number, username: string, options: { reason: string; role?: string }): Promise<Members>;
  removeMember(workspace: number, username: string, options: { reason: string }): Promise<Members>;
  exportState(workspace: number): Promise<WorkspaceState>;
  issueAgentToken(workspace: number, options: { label: string; reason: string; agents?: string[] }): Promise<string>;

  openAction(agent: string, payload?: JsonObject | null, options?: { parent?: number }): Promise<ActionOpened>;
  call(action: number, op: "ingest" | "get" | "set" | "handoff" | "effect" | "finish", body: JsonObject): Promise<any>;
  /** Several calls of one open action in one request; each call's answer, in order. All or nothing. */
  calls(action: number, calls: RecordingCall[]): Promise<any[]>;
  /** A whole finished recording in one request. All or nothing. */
  recordBatch(actions: RecordingBatch | BatchActionSpec[]): Promise<{ committed: boolean; actions: number[]; results: any[][] }>;
  abandon(action: number, options: { reason: string }): Promise<any>;
}

/** One call of the several-calls and batch forms: a single call's body with its `op`. */
export type RecordingCall = { op: "ingest" | "get" | "set" | "handoff" | "effect" | "finish"; [field: string]: Json | undefined };
export interface BatchActionSpec { agent: string; payload?: JsonObject; parent?: number; calls: RecordingCall[] }

export declare const BUFFER: number;

/** A whole finished recording, built call by call and recorded with client.recordBatch. */
export declare class RecordingBatch {
  readonly id: string;
  readonly actions: BatchActionSpec[];
  action(agent: string, payload?: JsonObject | null, options?: { parent?: BatchAction | number }): BatchAction;
}
export declare class BatchAction {
  readonly index: number;
  ingest(sourceId: string): this;
  get(key: string, defaultValue?: Json | null): this;
  set(key: string, value: Json, clocks?: { validFrom?: string; validUntil?: string; observedAt?: string }): this;
  handoff(agent: string, payload: JsonObject): this;
  effect(kind: string, options?: EffectOptions & { external?: boolean }): this;
  finish(decision: Decision): this;
}

export interface EffectOptions {
  amount?: number;
  ticket?: string;
  currency?: string;
  idempotencyKey?: string;
  /** Anything else is the effect's details. */
  [detail: string]: Json | undefined;
}

export declare class RemoteRecorder {
  constructor(client: Client, action: number, payload?: JsonObject, options?: { buffer?: number });
  readonly actionId: number;
  readonly ticket: string | undefined;
  readonly effects: EffectAnswer[];
  ingest(sourceId: string): Promise<string | null>;
  get<T extends Json = Json>(key: string, defaultValue?: T | null): Promise<T | null>;
  set(key: string, value: Json, clocks?: { validFrom?: string; validUntil?: string; observedAt?: string }): Promise<void>;
  handoff(agent: string, payload: JsonObject): Promise<void>;
  /** `external`: the ticket is not one of the workspace's desk tickets. */
  effect(kind: string, options?: EffectOptions & { external?: boolean }): Promise<EffectAnswer>;
  finish(decision: Decision): Promise<FinishAnswer>;
  /** Several reads in one request, each recorded as its own get. */
  getMany<T extends Json = Json>(keys: string[], defaultValue?: T | null): Promise<(T | null)[]>;
  /** Several calls of this action in one request, after what is held back; their answers. */
  calls(calls: RecordingCall[]): Promise<any[]>;
  /** Send what is held back now; rejects with a refusal of any of it. */
  flush(): Promise<void>;
  /** Drop what is held back (the action will not be finished). */
  discard(): void;
  /** How many of this action's calls are held back or on their way, not yet taken by kintsugi. */
  readonly pending: number;
}

/** Send what every recorder of this process holds back and wait for it (the client does it itself when
 *  the process runs out of work; call it before `process.exit`). Rejects with the first refusal. */
export declare function flushHeld(): Promise<void>;

/** What an agent returns (or resolves to): an object, sent as JSON (fields that are undefined are left
 *  out). Any object type is one: a union of object literals, an interface, a type with optional fields;
 *  never a string, a number or a promise of one (`then` keeps a promise from passing as an object). */
export type Decision = object & { then?: undefined };
export type AgentFn<D extends Decision = Decision> = (rec: RemoteRecorder, payload: any) => D | Promise<D>;
export type PerformFn = (agent: string, payload: any, effect: EffectAnswer) => void | Promise<void>;

export declare const MAX_REPLAY_BODY: number;

export declare const REPLAY_SECRET_ENV: string;
/** The kept replay secret: the environment variable (KINTSUGI_REPLAY_SECRET) if set, else the file. */
export declare function loadReplaySecret(file?: string | null, options?: { env?: string }): Promise<string | null>;
export declare function saveReplaySecret(file: string, secret: string): Promise<void>;
/** Register (or re-point) an agent and resolve to its replay secret, kept in `path` across restarts. */
export declare function keepReplaySecret(client: Client, workspace: number, name: string, replayUrl: string,
  options: { path: string; reason: string; timeoutSeconds?: number; env?: string }): Promise<string>;

export interface DeskOptions {
  /** Your real side effects, called after finish for each effect answered `perform: true`. */
  perform?: PerformFn;
  /** The agent registrations' replay secret (one, or one per agent name): unsigned, forged, stale or
   *  replayed requests get 401 before any agent code runs. */
  replaySecret?: ReplaySecret;
  toleranceSeconds?: number;
  /** Builds the client a replay's calls go through (yours, to observe or wrap them). */
  replayClient?: (baseUrl: string, token: string) => Client;
}

/** What serveReplays' log hook hears of each request (never the replay's token). */
export interface ReplayEvent {
  status: number;
  outcome: "ran" | "refused" | "failed";
  purpose: string | null;
  agent: string | null;
  action: number | null;
  replay_id: string | null;
  workspace: string | null;
  error: string | null;
  headers: Record<string, string | string[] | undefined>;
}

export interface ServeReplaysOptions {
  /** Your check after the signature holds, before the agent runs: throw ReplayRefused to answer 401. */
  verify?: (request: ReplayRequest, headers: IncomingHttpHeaders) => void | Promise<void>;
  /** Each request's outcome; a hook that throws changes nothing of the answer. */
  log?: (event: ReplayEvent) => void;
}

export declare class Desk {
  constructor(client: Client, options?: DeskOptions);
  readonly client: Client;
  readonly agents: Map<string, AgentFn>;
  agent<F extends AgentFn>(name: string, fn: F): F;
  /** Record a root action and, depth first, everything it hands off; the ids in order. */
  runRoot(agent: string, payload: JsonObject): Promise<number[]>;
  replay(request: ReplayRequest, options?: { client?: Client }): Promise<FinishAnswer>;
  serveReplays(host: string, port: number, options?: ServeReplaysOptions): Promise<Server>;
  close(): Promise<void>;
}
