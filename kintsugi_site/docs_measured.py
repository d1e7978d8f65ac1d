"""The documentation's "Measured" page, generated from benchmark results rather than pasted: every table a
`python -m bench …` run printed, as that run recorded it (bench.common.table keeps them in the results
file), with the commit, the date, the machine and its load. `python -m bench.publish RESULTS.json` copies
a run's tables into docs/bench-results/; this MkDocs hook (mkdocs.yml `hooks:`) renders each file there.
A figure on that page therefore always comes with the run that measured it.
"""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = "bench-results"
PAGE = "measured.md"


def _cell(value) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def render_run(name: str, run: dict) -> list[str]:
    machine = run.get("machine") or {}
    out = [f"## {name}", "",
           f"`python -m bench {' '.join(run.get('command') or [name])}` at commit `{run.get('commit', '?')}`, "
           f"{run.get('started_at', '?')[:16].replace('T', ' ')} UTC, {run.get('mode', '?')} mode; "
           f"{machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}; load average at the start "
           f"{run.get('load_avg_start', '?')}.", ""]
    for table in run.get("tables", []):
        headers = table["headers"]
        out += [f"### {_cell(table['title'])}", "",
                "| " + " | ".join(_cell(h) for h in headers) + " |",
                "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table["rows"]]
        out += [""] + [f"- {_cell(n)}" for n in table.get("notes", [])] + [""]
    return out


def render(folder: Path) -> str:
    out = ["# Measured", "",
           "Every table below is what a benchmark run printed, copied from its results file by "
           "`python -m bench.publish` and rendered when the site is built: nothing here is typed in. Each run "
           "names its command, commit, machine and load; the figures discussed in [Benchmarks](benchmarks.md) "
           "come from such runs.", ""]
    runs = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not runs:
        out += ["No published run yet.", ""]
    for path in runs:
        out += render_run(path.stem, json.loads(path.read_text()))
    return "\n".join(out).rstrip() + "\n"


def on_files(files, config):
    """MkDocs hook: add the generated page beside the written ones."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render(Path(config["docs_dir"]) / RESULTS)))
    return files
