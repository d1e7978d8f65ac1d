/** Headers as node:http gives them, as a plain object, or fetch's Headers. */
export type HeaderBag = Record<string, string | string[] | undefined> | { get(name: string): string | null };
export type RawBody = string | Uint8Array;
export type ReplayPurpose = "repair" | "verification" | "what_if";

export declare const TIMESTAMP_HEADER: "X-Kintsugi-Timestamp";
export declare const SIGNATURE_HEADER: "X-Kintsugi-Signature";
export declare const SIGNATURE_VERSION: "v1";
/** How far (seconds) a request's timestamp may be from now. */
export declare const TOLERANCE_SECONDS: 300;
export declare const PURPOSES: readonly ReplayPurpose[];

/** A replay request that is not admitted (answered 401); `reason` is a fixed phrase. */
export declare class ReplayRefused extends Error {
  readonly reason: string;
  readonly status: 401;
  constructor(reason: string);
}

/** `v1=<hex HMAC-SHA256(secret, "<timestamp>." + rawBody)>`. */
export declare function sign(secret: string | Uint8Array, timestamp: number | string, rawBody: RawBody): string;

/** The `X-Kintsugi-Timestamp` and `X-Kintsugi-Signature` headers of a signed request. */
export declare function signedHeaders(
  secret: string | Uint8Array, rawBody: RawBody, options?: { now?: number },
): Record<"X-Kintsugi-Timestamp" | "X-Kintsugi-Signature", string>;

/** Throws ReplayRefused unless the request is signed with `secret` within `toleranceSeconds` of `now`. */
export declare function verify(
  secret: string | Uint8Array, headers: HeaderBag, rawBody: RawBody,
  options?: { now?: number; toleranceSeconds?: number },
): void;

/** A replay request as kintsugi POSTs it. */
export interface ReplayRequest {
  workspace: string;
  agent: string;
  action: number;
  payload: Record<string, unknown>;
  mode: "replay";
  base_url: string;
  token: string;
  purpose?: ReplayPurpose;
  replay_id?: string;
  [extra: string]: unknown;
}

/** One secret for every agent, or each agent's own secret by name. */
export type ReplaySecret = string | Uint8Array | Record<string, string>;

/** Admits each signed, fresh request once (by its replay_id). */
export declare class ReplayGuard {
  constructor(secret: ReplaySecret, options?: { toleranceSeconds?: number; clock?: () => number });
  readonly seen: Map<string, number>;
  /** The parsed request; throws ReplayRefused when unsigned, forged, stale, replayed or without purpose/replay_id. */
  admit(headers: HeaderBag, rawBody: RawBody): ReplayRequest;
}
