"""Audited writes in one workspace vs two: `python -m bench.audit_chains [--seconds 5] [--hold-ms 5]`.

Two threads append audit events for `--seconds`, each in its own transactions, first both to the same
workspace's chain, then one thread per workspace. Each transaction takes the chain lock, holds it
`--hold-ms` (the other statements of an audited service; 0 for bare appends) and appends one event.
Prints transactions per second for both. Uses its own database (`kaudit_bench` on the shared Postgres
unless DATABASE_URL says otherwise) and a temporary KINTSUGI_HOME for the checkpoints.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/kaudit_bench")
    os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/7")
    os.environ["DJANGO_SETTINGS_MODULE"] = "kintsugi_site.settings.base"
    home = Path(tempfile.mkdtemp(prefix="kintsugi-bench-audit-"))
    os.environ["KINTSUGI_AUDIT_CHECKPOINT_LOG"] = str(home / "checkpoints.jsonl")
    os.environ["KINTSUGI_AUDIT_SIGNING_KEY"] = str(home / "signing-key.pem")
    import psycopg

    base, _, name = os.environ["DATABASE_URL"].rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _run(workspaces, *, seconds: float, hold_ms: float) -> float:
    from django.db import connection, connections, transaction

    from core.audit import actions, trail

    actions.declare("bench.append", "bench")  # the bench's own event, declared like every audit action

    done = [0] * len(workspaces)
    stop = time.monotonic() + seconds

    def appender(index, ws):
        try:
            while time.monotonic() < stop:
                with transaction.atomic():
                    trail.lock_chain(ws)
                    if hold_ms:
                        with connection.cursor() as cur:
                            cur.execute("SELECT pg_sleep(%s)", [hold_ms / 1000])
                    trail.record(action="bench.append", subject_type="bench", subject_id=done[index], via="cli",
                                 workspace=ws)
                done[index] += 1
        finally:
            connections.close_all()

    threads = [threading.Thread(target=appender, args=(i, ws)) for i, ws in enumerate(workspaces)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit_chains", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--hold-ms", type=float, default=5.0)
    o = parser.parse_args(argv)
    _setup()
    from core.audit import checkpoints, verification
    from provenance.models import Workspace

    a, _ = Workspace.objects.get_or_create(name="bench-audit-a")
    b, _ = Workspace.objects.get_or_create(name="bench-audit-b")
    same = _run([a, a], seconds=o.seconds, hold_ms=o.hold_ms)
    apart = _run([a, b], seconds=o.seconds, hold_ms=o.hold_ms)
    checkpoints.flush()
    holds = all(s.holds for s in verification.verify_all(workspace_ids=[a.pk, b.pk]))
    print(f"audited transactions/s, 2 threads, lock held {o.hold_ms:g} ms each: one workspace {same:.0f}, "
          f"two workspaces {apart:.0f} ({apart / same:.2f}x); chains verify: {holds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
