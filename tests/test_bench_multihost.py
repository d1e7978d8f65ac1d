"""`python -m bench multihost --quick`: the run on network-namespace test hosts, and its gate."""
import os
import shutil
import subprocess
import sys

import pytest

from bench import multihost
from tests.helpers import ROOT

needs_namespaces = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                      reason="network namespaces need root and iproute2")


def _marks():
    return [("hosts", 0.0, (0, 1), 0.0), ("migrate", 1.0, (1, 2), 0.5), ("done", 2.0, (2, 3), 1.0)]


def _result(verification_west):
    base = {"status": "repaired", "blast_radius": 25, "attempts": 1, "flag_to_repaired_s": 1.0, "error": ""}
    return {"killed": {"host": "worker-1", "incident": 2},
            "incidents": {"mh-east": {**base, "incident": 1, "server": "10.213.47.41:6379", "verification": [0, 0, 0]},
                          "mh-west": {**base, "incident": 2, "server": "10.213.47.42:6379",
                                      "verification": verification_west}}}


def test_the_run_passes_only_when_every_repair_verifies_clean(capsys):
    report = multihost._report(_marks(), _result([0, 0, 0]), 10, None)
    assert "all repaired, verification 0/0/0" in report["summary"]
    with pytest.raises(SystemExit) as failed:  # one differing fact after the lost worker: the run fails
        multihost._report(_marks(), _result([1, 0, 0]), 10, None)
    assert failed.value.code == 1
    assert "NOT all repaired clean" in capsys.readouterr().out


@pytest.mark.bench
@needs_namespaces
def test_multihost_quick_repairs_both_workspaces_after_losing_a_worker_host(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "FALKORDB", "CELERY", "KINTSUGI"))}
    proc = subprocess.run([sys.executable, "-m", "bench", "multihost", "--quick", "--output", str(tmp_path / "mh.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "2 workspaces on 2 FalkorDB servers" in last and "killed mid-repair" in last
    assert "all repaired, verification 0/0/0" in last
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if n.startswith(multihost.PREFIX)]  # nothing left behind
