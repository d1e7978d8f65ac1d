"""Keeping an agent's replay secret across restarts of its desk, so a restart never needs a rotation.

kintsugi shows a registration's `krs_` replay secret once: in the answer that created the registration,
and in a rotation's. Keep it where you control it, and read it back when the desk starts again:

    from kintsugi_client.replay_secret import keep_replay_secret
    secret = keep_replay_secret(client, workspace_id, "triage", "http://desk:9100/replay",
                                path="~/.config/desk/triage.krs", reason="desk start")
    desk = Desk(recording_client, replay_secret=secret)

On the first start the agent is registered and its secret written to `path` (mode 0600). On each later
start the registration is re-pointed (nothing rotates) and the secret read back: from the environment
variable KINTSUGI_REPLAY_SECRET if it is set (a secret store that injects it), else from `path`. Only
when neither holds one (the file was lost) is the secret rotated, once, and the new one kept.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kintsugi_client import Client

__all__ = ["ENV", "keep_replay_secret", "load_replay_secret", "save_replay_secret"]

ENV = "KINTSUGI_REPLAY_SECRET"


def load_replay_secret(path: str | os.PathLike | None = None, *, env: str = ENV) -> str | None:
    """The kept secret: the environment variable `env` if set and not empty, else the file at `path`."""
    value = os.environ.get(env, "").strip()
    if value:
        return value
    if path is None:
        return None
    file = Path(path).expanduser()
    try:
        value = file.read_text().strip()
    except FileNotFoundError:
        return None
    return value or None


def save_replay_secret(path: str | os.PathLike, secret: str) -> None:
    """Write the secret to `path`, readable by its owner only, replacing any earlier one in one step."""
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secret + "\n")
        os.replace(temporary, file)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def keep_replay_secret(client: "Client", workspace: int, name: str, replay_url: str, *,
                       path: str | os.PathLike, reason: str, timeout_seconds: int = 30, env: str = ENV) -> str:
    """Register (or re-point) agent `name` and return its replay secret, kept across restarts (see the
    module's docstring). `client`: a person's client with the Workspace admin role."""
    answer = client.register_agent(workspace, name, replay_url, reason=reason, timeout_seconds=timeout_seconds)
    if answer.get("replay_secret"):
        save_replay_secret(path, answer["replay_secret"])
        return answer["replay_secret"]
    kept = load_replay_secret(path, env=env)
    if kept:
        return kept
    secret = client.rotate_replay_secret(workspace, name, reason=f"{reason} (the kept replay secret was lost)")
    save_replay_secret(path, secret)
    return secret
