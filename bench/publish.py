"""`python -m bench.publish RESULTS.json [NAME]`: copies what a benchmark run printed (its tables, with its
command, commit, date, machine and load) into docs/bench-results/NAME.json, from which the documentation's
"Measured" page is generated (kintsugi_site/docs_measured.py). NAME defaults to the run's benchmarks.
A results file without tables (a run from before they were kept) is refused: there would be nothing to show."""
from __future__ import annotations

import json
import sys
from pathlib import Path

DOCS_RESULTS = Path(__file__).resolve().parent.parent / "docs" / "bench-results"
KEPT = ("command", "commit", "started_at", "mode", "machine", "load_avg_start", "seconds", "tables")


def publish(results_path: Path, name: str | None = None, folder: Path = DOCS_RESULTS) -> Path:
    run = json.loads(Path(results_path).read_text())
    if not run.get("tables"):
        raise SystemExit(f"{results_path}: no tables in this results file; run the benchmark again")
    name = name or "-".join(sorted(run.get("benchmarks", {}))) or Path(results_path).stem
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.json"
    out.write_text(json.dumps({k: run[k] for k in KEPT if k in run}, indent=2, sort_keys=True, default=str) + "\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    print(publish(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) == 3 else None))
