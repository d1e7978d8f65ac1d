"""The layers (.importlinter): each imports only the layers below it, imports inside functions too; and
only the repair task runs the repair job. Each rule has its red case: an import that breaks it on purpose."""
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kintsugi_site", "compensation", "repairs", "provenance", "core")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(cwd / ".importlinter")], cwd=cwd,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=300)


def test_the_contracts_hold():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_that_climbs_a_layer_breaks_the_contract(tmp_path):
    # A copy of the project with one module more: provenance importing repairs inside a function.
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    (tmp_path / "provenance" / "climbs.py").write_text("def later():\n    from repairs import services\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "provenance.climbs -> repairs.services" in result.stdout


def importers_of_the_job(graph) -> set[str]:
    return graph.find_modules_that_directly_import("repairs.job")


def test_only_the_repair_task_imports_the_job():
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert importers_of_the_job(graph) == {"repairs.tasks"}


def test_another_importer_of_the_job_is_caught():
    graph = grimp.ImportGraph()
    for module in ("repairs.job", "repairs.tasks", "repairs.services"):
        graph.add_module(module)
    graph.add_import(importer="repairs.tasks", imported="repairs.job")
    graph.add_import(importer="repairs.services", imported="repairs.job")
    assert importers_of_the_job(graph) == {"repairs.tasks", "repairs.services"} != {"repairs.tasks"}


MAX_MODULE_LINES = 400


def _long_modules(root: Path) -> list[str]:
    return sorted(f"{p.relative_to(root)} ({n})" for package in PACKAGES for p in (root / package).rglob("*.py")
                  if "migrations" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES)


def test_no_product_module_is_over_four_hundred_lines(tmp_path):
    assert _long_modules(ROOT) == []
    # The red case: a module grown past the bound is named.
    (tmp_path / "provenance").mkdir()
    (tmp_path / "provenance" / "grown.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _long_modules(tmp_path) == [f"provenance/grown.py ({MAX_MODULE_LINES + 1})"]
