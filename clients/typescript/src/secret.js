// Keeping an agent's replay secret across restarts of its desk, so a restart never needs a rotation.
//
// kintsugi shows a registration's krs_ secret once (when it is created, and when it is rotated). On the
// first start keepReplaySecret registers the agent and writes the secret to `path` (mode 0600); on each
// later start it re-points the registration (nothing rotates) and reads the secret back: from the
// environment variable KINTSUGI_REPLAY_SECRET when set (a secret store that injects it), else from
// `path`. Only when neither holds one (the file was lost) is it rotated, once, and the new one kept.
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";

export const REPLAY_SECRET_ENV = "KINTSUGI_REPLAY_SECRET";

function expand(file) {
  return file.startsWith("~/") ? path.join(os.homedir(), file.slice(2)) : file;
}

/** The kept secret: the environment variable if set and not empty, else the file at `file`; or null. */
export async function loadReplaySecret(file, { env = REPLAY_SECRET_ENV } = {}) {
  const fromEnv = (process.env[env] ?? "").trim();
  if (fromEnv) return fromEnv;
  if (!file) return null;
  try {
    return (await fs.readFile(expand(file), "utf8")).trim() || null;
  } catch (exc) {
    if (exc?.code === "ENOENT") return null;
    throw exc;
  }
}

/** Write the secret to `file`, readable by its owner only, replacing any earlier one in one step. */
export async function saveReplaySecret(file, secret) {
  const target = expand(file);
  await fs.mkdir(path.dirname(target), { recursive: true });
  const temporary = `${target}.${process.pid}.tmp`;
  await fs.writeFile(temporary, `${secret}\n`, { mode: 0o600 });
  await fs.rename(temporary, target);
}

/** Register (or re-point) agent `name` and resolve to its replay secret, kept across restarts.
 *  `client`: a person's client with the Workspace admin role. */
export async function keepReplaySecret(client, workspace, name, replayUrl,
  { path: file, reason, timeoutSeconds = 30, env = REPLAY_SECRET_ENV } = {}) {
  const answer = await client.registerAgent(workspace, name, replayUrl, { reason, timeoutSeconds });
  if (answer?.replay_secret) {
    await saveReplaySecret(file, answer.replay_secret);
    return answer.replay_secret;
  }
  const kept = await loadReplaySecret(file, { env });
  if (kept) return kept;
  const secret = await client.rotateReplaySecret(workspace, name, { reason: `${reason} (the kept replay secret was lost)` });
  await saveReplaySecret(file, secret);
  return secret;
}
