"""The documentation site is built from docs/ with MkDocs in strict mode: a link to a page or an anchor
that does not exist, or a page left out of the navigation, fails the build (and so `make test`). The
README stays a front door that links into it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]


def _build(project: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*MKDOCS, "--config-file", str(project / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, cwd=project, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def _copy_site_sources(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    (project / "kintsugi_site").mkdir()
    for hook in ("docs_pages.py", "docs_measured.py"):
        shutil.copy(ROOT / "kintsugi_site" / hook, project / "kintsugi_site" / hook)
    return project


def test_the_copied_sources_build_as_they_are(tmp_path):
    """The red cases below start from this green one: only what each adds breaks the build."""
    done = _build(_copy_site_sources(tmp_path), tmp_path / "site")
    assert done.returncode == 0, done.stderr


def test_the_documentation_builds_strictly_with_every_page_in_its_navigation(tmp_path):
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert len(pages) >= 10
    for page in pages:
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.exists(), page


def test_a_link_to_a_missing_page_fails_the_build(tmp_path):
    project = _copy_site_sources(tmp_path)
    tour = project / "docs" / "tour.md"
    tour.write_text(tour.read_text() + "\nSee [the missing page](missing.md).\n")
    done = _build(project, tmp_path / "site")
    assert done.returncode != 0
    assert "missing.md" in done.stderr


def test_a_link_to_a_missing_anchor_fails_the_build(tmp_path):
    project = _copy_site_sources(tmp_path)
    tour = project / "docs" / "tour.md"
    tour.write_text(tour.read_text() + "\nSee [nowhere](cli.md#no-such-section).\n")
    done = _build(project, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-section" in done.stderr


def test_a_page_left_out_of_the_navigation_fails_the_build(tmp_path):
    project = _copy_site_sources(tmp_path)
    (project / "docs" / "orphan.md").write_text("# An orphan\n")
    done = _build(project, tmp_path / "site")
    assert done.returncode != 0
    assert "orphan.md" in done.stderr


def test_the_readme_is_a_front_door_whose_links_all_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "make demo" in readme and "make test" in readme
    targets = re.findall(r"\]\(([^)#\s]+)", readme)
    assert targets, "the README links into the documentation"
    for target in targets:
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_the_api_reference_is_rendered_from_the_schema_the_api_serves():
    """docs/openapi.json is the schema the server publishes now: regenerate it with
    `python manage.py spectacular --format openapi-json --file docs/openapi.json` after an API change."""
    import json

    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    from drf_spectacular.drainage import GENERATOR_STATS

    GENERATOR_STATS.reset()
    live = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))
    # A warning is a schema that lies (two serializers sharing a component name, say): the deploy check
    # reports the same warnings.
    assert not GENERATOR_STATS, f"schema warnings: {dict(GENERATOR_STATS._warn_cache)} {dict(GENERATOR_STATS._error_cache)}"
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    stale = sorted(set(live["paths"]) ^ set(committed["paths"]))
    assert not stale, f"docs/openapi.json is stale for {stale}: regenerate it"
    assert live == committed, "docs/openapi.json differs from the live schema: regenerate it"


def test_the_reference_page_lists_every_operation_of_the_schema():
    import json

    from kintsugi_site import docs_pages

    schema = json.loads((ROOT / "docs" / "openapi.json").read_text())
    page = docs_pages.render(schema)
    for path, item in schema["paths"].items():
        for method in docs_pages.METHODS:
            if method in item:
                assert f"### `{method.upper()} {path}`" in page
    broken = {**schema, "paths": {"/api/v1/x|y/": {"get": {"summary": "a | b", "tags": ["t"]}}}}
    assert "a \\| b" in docs_pages.render(broken)  # a pipe in free text cannot break a table


def test_the_measured_page_is_generated_from_what_a_benchmark_run_printed(tmp_path, monkeypatch, capsys):
    """A table printed by bench.common.table lands in the results file, `bench.publish` copies it into
    docs/bench-results, and the built site shows it with the run's commit: nothing typed in. A results
    file without tables is refused, and a site without any published run says so."""
    from bench import common, publish
    from kintsugi_site import docs_measured

    monkeypatch.setattr(common, "PRINTED", [])
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path / "results")
    common.table("Repair, flag to repaired", ["tickets", "seconds"], [[6000, 15.61]], notes=["load 1.1"])
    results = common.write_results({"commit": "abc1234", "mode": "quick", "benchmarks": {"repair": {}}})
    project = _copy_site_sources(tmp_path)
    shutil.rmtree(project / "docs" / "bench-results", ignore_errors=True)
    assert "No published run yet." in docs_measured.render(project / "docs" / "bench-results")
    published = publish.publish(results, folder=project / "docs" / "bench-results")
    assert published.name == "repair.json"
    done = _build(project, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "site" / "measured" / "index.html").read_text()
    assert "Repair, flag to repaired" in page and "15.6" in page and "abc1234" in page and "load 1.1" in page
    bare = tmp_path / "bare.json"
    bare.write_text('{"commit": "abc1234", "benchmarks": {"repair": {}}}')
    try:
        publish.publish(bare, folder=tmp_path / "elsewhere")
        raise AssertionError("a results file without tables was published")
    except SystemExit as refused:
        assert "no tables" in str(refused)
