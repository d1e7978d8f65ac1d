export { BUFFER, Client, KintsugiError } from "./client.js";
export { BatchAction, RecordingBatch } from "./batch.js";
export { RemoteRecorder, flushHeld } from "./recorder.js";
export { Desk, MAX_REPLAY_BODY } from "./desk.js";
export {
  PURPOSES, ReplayGuard, ReplayRefused, SIGNATURE_HEADER, SIGNATURE_VERSION, TIMESTAMP_HEADER, TOLERANCE_SECONDS,
  sign, signedHeaders, verify,
} from "./signing.js";
export { REPLAY_SECRET_ENV, keepReplaySecret, loadReplaySecret, saveReplaySecret } from "./secret.js";
