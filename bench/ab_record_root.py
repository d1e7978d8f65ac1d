"""`record_root` of two checkouts timed side by side, block by block: `python -m bench.ab_record_root --base
PATH [--blocks 20] [--roots 60]` runs this checkout's code and the one at PATH (another git worktree, e.g.
main's) in two processes, each with its own FalkorDB and the Postgres database named in its environment
(BENCH_AB_DATABASE_URL for PATH, default: DATABASE_URL with `_ab` appended), taking turns: one times a
block of `--roots` roots of bench.agents' writer → reader (8 ops each) while the other waits, then the
other. On a box whose load comes and goes with other work, two runs of the whole bench one after the
other see different loads; blocks taken in turns see the same. Prints each side's median ops/s, the
quartiles and its own CPU per op, with the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _side(role: str, other: str, blocks: int, roots: int, turn: Path) -> None:
    """One side, run in the checkout's own directory: warm up, then a block at each of its turns."""
    sys.path.insert(0, os.getcwd())
    from bench import common

    common.setup(verbose=False)
    from bench.agents import _agents
    from provenance.models import Workspace
    from provenance.recording.services import record_root

    _agents()
    name = f"bench-ab-{role}-{time.time_ns()}"
    Workspace.objects.create(name=name)
    for n in range(10):
        record_root(workspace=name, agent="bench_local_writer", payload={"n": -1 - n})
    (turn.parent / f"{role}.ready").touch()
    while not (turn.parent / f"{other}.ready").exists():
        time.sleep(0.05)
    out, n = [], 0
    for _ in range(blocks):
        while turn.read_text().strip() != role:
            time.sleep(0.02)
        t0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(roots):
            record_root(workspace=name, agent="bench_local_writer", payload={"n": n})
            n += 1
        ops = roots * 8
        out.append({"ops_per_s": ops / (time.perf_counter() - t0),
                    "cpu_ms_per_op": (time.process_time() - cpu0) * 1000 / ops, "load": os.getloadavg()[0]})
        turn.write_text(other)
    (turn.parent / f"{role}.json").write_text(json.dumps(out))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_record_root", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, type=Path, help="the other checkout (its .venv is used)")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--roots", type=int, default=60)
    parser.add_argument("--side", nargs=3, help=argparse.SUPPRESS)  # role, other, turn file: a child process
    args = parser.parse_args()
    if args.side:
        role, other, turn = args.side[0], args.side[1], Path(args.side[2])
        _side(role, other, args.blocks, args.roots, turn)
        return 0
    work = Path(tempfile.mkdtemp(prefix="kintsugi-ab-"))
    turn = work / "turn"
    turn.write_text("base")
    script = Path(__file__).resolve()
    database = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench")
    sides = {"this": (HERE, dict(os.environ)),
             "base": (args.base.resolve(), dict(os.environ, DATABASE_URL=os.environ.get(
                 "BENCH_AB_DATABASE_URL", database + "_ab")))}
    procs = [subprocess.Popen([str(root / ".venv" / "bin" / "python"), str(script), "--blocks", str(args.blocks),
                               "--roots", str(args.roots), "--base", str(args.base),
                               "--side", role, "base" if role == "this" else "this", str(turn)],
                              cwd=root, env=env) for role, (root, env) in sides.items()]
    codes = [p.wait() for p in procs]
    if any(codes):
        print(f"a side failed: {codes}", file=sys.stderr)
        return 1
    print(f"## record_root, this checkout against {args.base} ({args.blocks} blocks of {args.roots} roots each, "
          f"in turns)")
    print("| checkout | median ops/s | quartiles ops/s | CPU ms/op | load average |")
    print("|---|---:|---:|---:|---:|")
    for role in ("base", "this"):
        rows = json.loads((work / f"{role}.json").read_text())
        ops = [r["ops_per_s"] for r in rows]
        q1, _, q3 = statistics.quantiles(ops, n=4)
        loads = [r["load"] for r in rows]
        print(f"| {role} | {statistics.median(ops):.0f} | {q1:.0f}–{q3:.0f} | "
              f"{statistics.median(r['cpu_ms_per_op'] for r in rows):.2f} | {min(loads):.1f}–{max(loads):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
