"""kintsugi_client is a package of its own: it builds into a wheel from its folder and, installed in a
fresh virtualenv with nothing of kintsugi's beside it, imports and talks the recording protocol's
client side (the offline parts: signing a replay and refusing a forged one)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _wheel(tmp_path: Path) -> Path:
    source = tmp_path / "src" / "kintsugi_client"
    shutil.copytree(ROOT / "kintsugi_client", source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    out = tmp_path / "wheels"
    # No build isolation: the build uses the project's own pinned setuptools, with no download.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(source)], check=True, timeout=300)
    wheels = list(out.glob("kintsugi_client-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_the_client_builds_a_wheel_that_installs_and_imports_in_a_fresh_virtualenv(tmp_path):
    wheel = _wheel(tmp_path)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
                   check=True, timeout=300)
    probe = ("import kintsugi_client, kintsugi_client.signing as s; "
             "assert kintsugi_client.__file__.startswith(%r); "
             "kintsugi_client.Client('http://127.0.0.1:9', 'token'); "
             "print(sorted(kintsugi_client.__all__))") % str(env_dir)
    # Run from an empty folder: the checkout must not be what gets imported.
    done = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Client" in done.stdout and "Desk" in done.stdout


def test_the_wheel_carries_only_the_client(tmp_path):
    import zipfile

    names = zipfile.ZipFile(_wheel(tmp_path)).namelist()
    assert any(n == "kintsugi_client/__init__.py" for n in names)
    assert not [n for n in names if n.split("/")[0] in {"provenance", "repairs", "compensation", "core",
                                                         "kintsugi_site", "tests"}]
