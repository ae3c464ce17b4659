"""A throwaway PostgreSQL cluster: `initdb` and `pg_ctl` in a temporary directory, reached over
a Unix socket only (no TCP port, so parallel runs never collide), removed when stopped.

The tests start one per session (tests/conftest.py) and give each test a fresh database
cloned from a template; the benchmarks start their own. The server runs with its default
durability settings (`fsync`, `synchronous_commit` on), as the issue's measures require.

`initdb` refuses to run as root: when this process is root, the server's commands run as the
`postgres` user (Debian's package creates it) through `runuser`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (or they could not start a cluster)."""


def bindir() -> Path:
    """The folder of the server's binaries: `pg_config --bindir`, else Debian's newest."""
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if (Path(out) / "initdb").exists():
            return Path(out)
    except (OSError, subprocess.CalledProcessError):
        pass
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if versions:
        return versions[-1].parent
    raise ClusterUnavailable("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's `postgresql` package")


class Cluster:
    """One running server; `url(db)` names a database on it, `create_database` makes one."""

    def __init__(self, root: Path | None = None) -> None:
        self.bin = bindir()
        self.as_postgres = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="threadlog-pg-")) if root is None else root
        self.data = self.root / "data"
        self.socket = self.root / "sock"
        self.socket.mkdir(parents=True, exist_ok=True)
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.socket, "postgres")
            os.chmod(self.root, 0o755)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8",
                  "--no-instructions", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nlisten_addresses = ''\nunix_socket_directories = '{self.socket}'\nmax_connections = 60\n"
                       "shared_buffers = 64MB\n"
                       # Two-phase commit allowed, as on servers a transaction manager uses: a
                       # prepared transaction holds old row versions up as an open one does.
                       "max_prepared_transactions = 4\n"
                       # After a crash, one syncfs() of the data directory instead of an fsync() of
                       # every file before recovery: seconds less per restart of the crash test.
                       "recovery_init_sync_method = syncfs\n")
        self.start()

    def _run(self, tool: str, *args: str) -> str:
        command = [str(self.bin / tool), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise ClusterUnavailable(f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster and every server process (what a power cut does to them)."""
        pid = self.postmaster_pid()
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        os.kill(pid, signal.SIGKILL)
        for child in children:
            try:
                os.kill(int(child), signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            alive = [p for p in [pid, *map(int, children)] if _alive(p)]
            if not alive:
                return
            time.sleep(0.05)
        raise ClusterUnavailable("the killed server processes did not exit")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={urllib.parse.quote(str(self.socket), safe='')}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE need that)."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(sql.encode())

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether `pid` exists. A killed server process counts until it is reaped: until then the
    server's lock file still names a live-looking process and a restart refuses to start."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
