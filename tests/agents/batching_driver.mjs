// The TypeScript client run in a process of its own for the batching contract: the twin of
// batching_driver.py (its docstring says what KIND MODE BASE_URL TOKEN BUFFER SCRIPT [--variant WHAT] mean),
// KIND typescript. WHAT, for exit: drop-at-exit (broken on purpose: the client's beforeExit handler is
// gone), exit-now (the process ends with process.exit(), which leaves no turn to send in) or
// flush-then-exit (flushHeld(), then process.exit()).
import { Client, Desk, KintsugiError, RemoteRecorder, flushHeld } from "../../clients/typescript/src/index.js";

const [, mode, base, token, buffer, scriptText, flag, variant] = process.argv.slice(2);
const script = JSON.parse(scriptText);
const AGENT = "bc_writer";
const BAD = "k".repeat(250);
const say = (line) => process.stdout.write(JSON.stringify(line) + "\n");
const memoryKey = (k) => `bc/${k === "BAD" ? BAD : k}`;

const client = new Client(base, token, { buffer: Number(buffer) });
const desk = new Desk(client);
desk.agent(AGENT, async (rec) => {
  let n = 0;
  for (const [op, k] of script) {
    if (op === "set") await rec.set(memoryKey(k), { v: k });
    else say({ got: await rec.get(memoryKey(k)) });
    say({ done: ++n });
  }
  return { ops: script.length };
});

const payload = { ops: 0 };
if (mode === "root") {
  try {
    say({ ids: await desk.runRoot(AGENT, payload) });
  } catch (err) {
    say({ error: { type: err?.name ?? "Error", status: err instanceof KintsugiError ? err.status : null,
      details: err instanceof KintsugiError ? err.details : null } });
  }
} else {
  const opened = await client.openAction(AGENT, payload);
  await desk.agents.get(AGENT)(new RemoteRecorder(client, opened.action, payload), payload);
  say({ action: opened.action });
  const what = flag === "--variant" ? variant : null;
  if (what === "drop-at-exit") process.removeAllListeners("beforeExit");
  if (what === "flush-then-exit") await flushHeld();
  if (what === "exit-now" || what === "flush-then-exit") process.exit(0);
}
