"""Fixtures for agents in other processes: a person with an API token, and the example desk
(examples/remote_agent.py) started as a real separate process against the live server."""
from __future__ import annotations

import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests.api.conftest import make_user  # noqa: F401  (the API tests' users in roles, with tokens)
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "remote_agent.py"


@pytest.fixture
def admin_token(django_user_model) -> str:
    user = django_user_model.objects.create_superuser("desk-admin", "admin@example.com", "pass-1234-kintsugi")
    return Token.objects.create(user=user).plain_key


class RemoteDesk:
    """The example desk in its own process group; `start` waits for its JSON line."""

    def __init__(self, base_url: str, token: str, workspace: str, effects_log: Path):
        self.base_url, self.token, self.workspace, self.effects_log = base_url, token, workspace, effects_log
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self, *, serve_only: bool = False, timeout: float = 180, concurrency: int = 1) -> dict | None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
        args = [sys.executable, str(EXAMPLE), "--base-url", self.base_url, "--token", self.token,
                "--workspace", self.workspace, "--replay-port", str(self.port), "--effects-log", str(self.effects_log)]
        args += ["--concurrency", str(concurrency)] if concurrency > 1 else []
        self.proc = subprocess.Popen(args + (["--serve-only"] if serve_only else []), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd="/", start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line)
            if self.proc.poll() is not None:
                raise AssertionError(f"remote desk exited: {self.proc.stderr.read().decode()[-2000:]}")
        raise AssertionError("remote desk printed nothing in time")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def performed(self) -> list[dict]:
        if not self.effects_log.exists():
            return []
        return [json.loads(line) for line in self.effects_log.read_text().splitlines() if line]


@pytest.fixture
def remote_desk(live_server, admin_token, tmp_path):
    desks: list[RemoteDesk] = []

    def make(workspace: str) -> RemoteDesk:
        desk = RemoteDesk(live_server.url, admin_token, workspace, tmp_path / f"{workspace}-effects.jsonl")
        desks.append(desk)
        return desk

    yield make
    for desk in desks:
        desk.stop()


def load_example(name: str):
    """An example desk module (examples/<name>.py), imported in this process."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class InProcessDesk:
    """A small example desk (examples/small_desk.py) recorded against the live server from this process
    and serving its replays on a port of its own; `performed` lists the effects it performed."""

    def __init__(self, example, base_url: str, admin_token: str, workspace: str, *, poisoned: bool):
        from kintsugi_client import Client

        self.scenario, self.workspace, self.performed = sys.modules["small_desk"], workspace, []
        self.port = free_port()
        self.replay_url = f"http://127.0.0.1:{self.port}/replay"
        key, self.secrets = self.scenario.set_up(Client(base_url, admin_token), workspace,
                                                 list(example.AGENTS.values()), self.replay_url, poisoned=poisoned)
        self.desk = example.build_desk(Client(base_url, key), replay_secret=self.secrets,
                                       perform=lambda agent, payload, effect: self.performed.append(
                                           (effect["ticket"], effect["kind"], effect["amount"])))
        self.server = self.desk.serve_replays("127.0.0.1", self.port, block=False)
        self.actions = self.scenario.record(self.desk, example.AGENTS["research"], example.AGENTS["triage"],
                                            poisoned=poisoned)

    def post_replay(self, body: bytes, headers: dict) -> int:
        """POST a replay request to this desk's endpoint; the status it answers."""
        request = urllib.request.Request(self.replay_url, data=body, method="POST",
                                         headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def example_desk(live_server, admin_token):
    """Record an example desk (by module name) in a workspace, poisoned or clean, serving its replays."""
    desks: list[InProcessDesk] = []

    def make(name: str, workspace: str, *, poisoned: bool = True) -> InProcessDesk:
        desks.append(InProcessDesk(load_example(name), live_server.url, admin_token, workspace, poisoned=poisoned))
        return desks[-1]

    yield make
    for desk in desks:
        desk.stop()
