// Type-checked under `strict` by tests/agents/test_typescript_desk.py (tsc --noEmit -p test/types):
// agents whose decisions are unions, interfaces or optional fields are agents.
import { Client, Desk, flushHeld, type AgentFn, type RemoteRecorder } from "../../src/index.js";

interface Refund { choice: "refund"; level: "full" | "partial"; amount_cents: number }
interface Reply { choice: "reply"; note?: string }
type Decision = Refund | Reply;

const desk = new Desk(new Client("http://127.0.0.1:8000", "kag_x"));

// A union of object literals: TypeScript infers `level?: undefined` on the reply branch.
desk.agent("triage", async (rec: RemoteRecorder, payload: { ticket: string; vip?: boolean }) => {
  const rules = await rec.get<string>("policy/vip_rules");
  if (payload.vip && rules) return { choice: "refund", level: "full", amount_cents: 5000 };
  return { choice: "reply" };
});

// A declared union of interfaces, synchronous and asynchronous.
desk.agent("notifier", (rec, payload): Decision => (payload.ticket ? { choice: "reply", note: "sent" } : {
  choice: "refund", level: "partial", amount_cents: 100 }));
const typed: AgentFn<Decision> = async () => ({ choice: "reply" });
desk.agent("typed", typed);

// Still checked: a decision must be an object, not a string or a number.
// @ts-expect-error a decision is an object
desk.agent("wrong", async () => "refund");
// @ts-expect-error nor a promise of a number
desk.agent("wrong_async", async () => 5);

// What is held back can be counted and sent before an explicit exit.
desk.agent("counted", async (rec) => {
  await rec.set("seen/t01", true);
  const waiting: number = rec.pending;
  return { waiting };
});
await flushHeld();
