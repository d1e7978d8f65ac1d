"""The TypeScript client's declarations under `strict`: agents whose decisions are unions, interfaces or
carry optional fields type-check, and a string or a number returned as a decision still does not
(clients/typescript/test/types/agents.ts holds both, the refusals as @ts-expect-error lines, so the check
fails if they start passing). The compiler is the client's pinned devDependency (`make ts-deps`)."""
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
TSC = CLIENT / "node_modules" / "typescript" / "bin" / "tsc"


def tsc(*args: str) -> subprocess.CompletedProcess:
    assert TSC.exists(), "the TypeScript compiler is not installed: run `make ts-deps`"
    return subprocess.run([shutil.which("node") or "node", str(TSC), *args], cwd=CLIENT, capture_output=True,
                          text=True, timeout=180)


def test_agents_returning_unions_type_check_under_strict():
    result = tsc("-p", "test/types/tsconfig.json")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_decision_that_is_not_an_object_is_refused(tmp_path):
    # The red case: the same compiler refuses an agent whose decision is a string.
    bad = tmp_path / "bad.ts"
    bad.write_text(f'import {{ Client, Desk }} from "{CLIENT / "src" / "index.js"}";\n'
                   'new Desk(new Client("http://x", "t")).agent("a", async () => "refund");\n')
    result = tsc("--strict", "--noEmit", "--module", "NodeNext", "--moduleResolution", "NodeNext", "--target", "ES2022",
                 "--types", "node", "--typeRoots", str(CLIENT / "node_modules" / "@types"), str(bad))
    assert result.returncode != 0 and "not assignable" in result.stdout, result.stdout
