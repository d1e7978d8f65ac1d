"""Fault injection for the resumability tests: the places a test may kill, stall or pause a worker."""
from __future__ import annotations

import os
import signal
import time


def fault_point(name: str) -> None:
    """Fault injection for the resumability tests: when the file named by KINTSUGI_FAULT_FILE holds
    `name`, remove it and die with SIGKILL here, as a worker killed by the OOM killer would; when it
    holds `stall:<name>`, hang here so the test can kill the whole worker from outside; when it holds
    `pause:<name>`, write `paused:<name>` there and wait until the test removes the file or writes
    another fault into it (it stops a server, or records, meanwhile)."""
    path = os.environ.get("KINTSUGI_FAULT_FILE")
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        wanted = f.read().strip()
    if wanted == f"pause:{name}":
        with open(path, "w") as f:
            f.write(f"paused:{name}")
        while _still(path, f"paused:{name}"):
            time.sleep(0.05)
        return
    if wanted in (name, f"stall:{name}"):
        os.remove(path)
        if wanted.startswith("stall:"):
            time.sleep(600)
        os.kill(os.getpid(), signal.SIGKILL)


def _still(path: str, content: str) -> bool:
    try:
        with open(path) as f:
            return f.read().strip() == content
    except FileNotFoundError:
        return False
