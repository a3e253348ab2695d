#!/usr/bin/env python3
"""Local infrastructure for tickd: a single-node Cassandra 5.0 and a single-node KRaft Kafka.

Both servers run from jars resolved by Maven into ``<repo>/.cache/jars`` and are started with plain
``java`` as detached background processes. State (generated configs, data, ``server.log``, ``pid``)
lives under ``<repo>/.cache/infra/{cassandra,kafka}``. Standard library only: this runs before any
virtualenv exists. See deploy/local/README.md for the environment variables.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import ssl
import string
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TEMPLATES = HERE / "templates"
MAVEN_POMS = HERE / "maven"
HOST = "127.0.0.1"
T0 = time.monotonic()

JAR_SETS = ("cassandra", "kafka")
MARKER_NAME = ".fetched"
POLL_S = 0.5
PROBE_TIMEOUT_S = 2.0
STOP_GRACE_S = 30.0
LOG_TAIL_LINES = 30

# Secure endpoints next to the plain ones (issue #12): local-only secrets, not for anything real.
TLS_PASSWORD = "tickd-local-tls"
SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USER = "tickd"
SASL_PASSWORD = "tickd-local-secret"

# JPMS flags from Cassandra's conf/jvm17-server.options: Cassandra does not start on Java 17 without them.
CASSANDRA_JPMS_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
]


class InfraError(Exception):
    """A failure with a message meant for the user; the process exits non-zero."""


class ProtocolError(Exception):
    """A server answered, but not with what the protocol probe expected."""


def say(message: str) -> None:
    """Print one progress line prefixed with the seconds elapsed since this invocation began."""
    print(f"[{time.monotonic() - T0:6.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------- settings


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InfraError(f"{name}={raw!r} is not an integer") from None


def _env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name, "").strip()
    return Path(raw).expanduser().resolve() if raw else default


def _env_timeout(default: float) -> float:
    raw = os.environ.get("TICKD_INFRA_TIMEOUT_S", "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise InfraError(f"TICKD_INFRA_TIMEOUT_S={raw!r} is not a number") from None


@dataclass(frozen=True)
class Settings:
    """Everything configurable through TICKD_* environment variables."""

    jars_dir: Path
    infra_dir: Path
    cassandra_port: int
    cassandra_storage_port: int
    cassandra_heap: str
    cassandra_timeout_s: float
    kafka_port: int
    kafka_controller_port: int
    kafka_sasl_port: int
    kafka_heap: str
    kafka_timeout_s: float

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            jars_dir=_env_path("TICKD_JARS_DIR", REPO / ".cache" / "jars"),
            infra_dir=_env_path("TICKD_INFRA_DIR", REPO / ".cache" / "infra"),
            cassandra_port=_env_int("TICKD_CASSANDRA_PORT", 9042),
            cassandra_storage_port=_env_int("TICKD_CASSANDRA_STORAGE_PORT", 7000),
            cassandra_heap=os.environ.get("TICKD_CASSANDRA_HEAP", "").strip() or "1G",
            cassandra_timeout_s=_env_timeout(180.0),
            kafka_port=_env_int("TICKD_KAFKA_PORT", 9092),
            kafka_controller_port=_env_int("TICKD_KAFKA_CONTROLLER_PORT", 9093),
            kafka_sasl_port=_env_int("TICKD_KAFKA_SASL_PORT", 9094),
            kafka_heap=os.environ.get("TICKD_KAFKA_HEAP", "").strip() or "512M",
            kafka_timeout_s=_env_timeout(180.0),
        )


    @property
    def tls_dir(self) -> Path:
        return self.infra_dir / "tls"


# --------------------------------------------------------------------------- TLS material


@dataclass(frozen=True)
class TlsFiles:
    """A local CA (PEM, for clients) and the servers' PKCS12 key store and trust store, under tls_dir."""

    directory: Path

    @property
    def ca_pem(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.directory / "server.p12"

    @property
    def truststore(self) -> Path:
        return self.directory / "truststore.p12"

    def complete(self) -> bool:
        return all(path.is_file() for path in (self.ca_pem, self.keystore, self.truststore))

    def client_context(self) -> ssl.SSLContext:
        if not self.complete():
            raise ProtocolError(f"no TLS material in {self.directory} yet (`infra.py up` makes it)")
        return ssl.create_default_context(cafile=str(self.ca_pem))


def keytool(directory: Path, *args: str) -> None:
    cmd = ["keytool", "-noprompt", "-storepass", TLS_PASSWORD, *args]
    result = subprocess.run(cmd, cwd=directory, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode != 0:
        raise InfraError(f"keytool {args[0]} failed (exit {result.returncode}): {(result.stdout + result.stderr).strip()}")


def ensure_tls(settings: Settings) -> TlsFiles:
    """Generate, once, a CA and a server certificate for 127.0.0.1/localhost signed by it (keytool only)."""
    tls = TlsFiles(settings.tls_dir)
    if tls.complete():
        return tls
    require_tools("keytool")
    scratch = make_dir(settings.infra_dir / ".tls.partial")
    for stale in scratch.iterdir():
        stale.unlink()
    say(f"tls: generating a local CA and server certificate in {tls.directory} ...")
    p12 = ("-storetype", "PKCS12", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650")
    keytool(scratch, "-genkeypair", "-alias", "ca", "-dname", "CN=tickd local CA", "-ext", "bc:c",
            "-ext", "KU=keyCertSign,cRLSign", "-keystore", "ca.p12", *p12)
    keytool(scratch, "-exportcert", "-rfc", "-alias", "ca", "-keystore", "ca.p12", "-file", "ca.pem")
    keytool(scratch, "-genkeypair", "-alias", "server", "-dname", "CN=localhost", "-keystore", "server.p12", *p12)
    keytool(scratch, "-certreq", "-alias", "server", "-keystore", "server.p12", "-file", "server.csr")
    keytool(scratch, "-gencert", "-rfc", "-alias", "ca", "-keystore", "ca.p12", "-infile", "server.csr",
            "-outfile", "server.pem", "-validity", "3650", "-ext", "SAN=ip:127.0.0.1,dns:localhost",
            "-ext", "KU=digitalSignature,keyEncipherment", "-ext", "EKU=serverAuth")
    keytool(scratch, "-importcert", "-alias", "ca", "-file", "ca.pem", "-keystore", "server.p12")
    keytool(scratch, "-importcert", "-alias", "server", "-file", "server.pem", "-keystore", "server.p12")
    keytool(scratch, "-importcert", "-alias", "ca", "-file", "ca.pem", "-keystore", "truststore.p12",
            "-storetype", "PKCS12")
    shutil.rmtree(tls.directory, ignore_errors=True)
    scratch.rename(tls.directory)
    say(f"tls: CA for clients: {tls.ca_pem}")
    return tls


# --------------------------------------------------------------------------- small helpers


def make_dir(path: Path) -> Path:
    """Create a directory (and parents), turning OS errors into a readable InfraError."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InfraError(f"cannot create directory {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InfraError(f"directory {path} is not writable")
    return path


def write_text(path: Path, text: str) -> None:
    """Write a file atomically (temp file + rename), so readers never see half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise InfraError(f"cannot write {path}: {exc.strerror or exc}") from None


def render_template(name: str, **values: object) -> str:
    """Fill ${placeholders} in a file from deploy/local/templates."""
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """Return the last ``lines`` lines of a (possibly large or missing) text file."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256 * 1024))
            data = fh.read()
    except OSError:
        return ["<no log file>"]
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def require_tools(*tools: str) -> None:
    """Fail with a message naming every required executable missing from PATH."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise InfraError(f"required tool(s) not found on PATH: {', '.join(missing)}")


def port_open(port: int, host: str = HOST, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Read exactly ``size`` bytes or raise ProtocolError on EOF."""
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 65536))
        if not chunk:
            raise ProtocolError("connection closed mid-response")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


@contextmanager
def infra_lock(infra_dir: Path) -> Iterator[None]:
    """Serialise up/down/wipe invocations that share one state directory."""
    make_dir(infra_dir)
    with (infra_dir / ".lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another infra.py holding {infra_dir / '.lock'} ...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# --------------------------------------------------------------------------- processes


def pid_alive(pid: int) -> bool:
    """True when the pid exists and is not a zombie (orphans may stay unreaped in containers)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes_mentioning(marker: str) -> list[int]:
    """Live pids whose command line contains ``marker`` (an absolute path owned by this launcher)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if marker in pid_cmdline(int(entry.name)) and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def signal_process(pid: int, sig: signal.Signals) -> None:
    """Signal a pid's whole process group when it leads one (ours do), else just the pid."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Wait until none of ``pids`` is alive, at most ``timeout_s``; return those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = [pid for pid in pids if pid_alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in alive if pid_alive(pid)]
    return alive


def wait_reaped(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    """Wait for exited, non-child pids to leave /proc (init reaps them); return those still listed."""
    deadline = time.monotonic() + timeout_s
    left = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [pid for pid in left if Path(f"/proc/{pid}").exists()]
    return left


def stop_processes(pids: list[int], grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; return pids that survived even that."""
    for pid in pids:
        signal_process(pid, signal.SIGTERM)
    survivors = wait_gone(pids, grace_s)
    if survivors:
        say(f"still alive after {grace_s:.0f} s, sending SIGKILL to {survivors}")
        for pid in survivors:
            signal_process(pid, signal.SIGKILL)
        survivors = wait_gone(survivors, 10.0)
    return survivors


# --------------------------------------------------------------------------- protocol probes


@contextmanager
def probe_socket(port: int, host: str = HOST, tls: ssl.SSLContext | None = None) -> Iterator[socket.socket]:
    """A connection for a probe; with ``tls``, a verified TLS connection (the handshake is the check)."""
    with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw:
        raw.settimeout(PROBE_TIMEOUT_S)
        if tls is None:
            yield raw
            return
        with tls.wrap_socket(raw, server_hostname=host) as wrapped:
            yield wrapped


def cql_supported(port: int, host: str = HOST, tls: ssl.SSLContext | None = None) -> dict[str, list[str]]:
    """Send a CQL native protocol v4 OPTIONS frame and return the SUPPORTED multimap."""
    with probe_socket(port, host, tls) as sock:
        # version 4 request, flags 0, stream 1, opcode OPTIONS (0x05), empty body
        sock.sendall(struct.pack(">BBhBi", 0x04, 0x00, 1, 0x05, 0))
        version, _flags, stream, opcode, length = struct.unpack(">BBhBi", recv_exact(sock, 9))
        if version != 0x84 or stream != 1 or opcode != 0x06 or not 0 <= length < 1 << 20:
            raise ProtocolError(f"unexpected CQL reply: version={version:#x} stream={stream} opcode={opcode:#x}")
        return _parse_string_multimap(recv_exact(sock, length))


def _parse_string_multimap(body: bytes) -> dict[str, list[str]]:
    def read_string(offset: int) -> tuple[str, int]:
        (size,) = struct.unpack_from(">H", body, offset)
        return body[offset + 2 : offset + 2 + size].decode(), offset + 2 + size

    result: dict[str, list[str]] = {}
    (entries,) = struct.unpack_from(">H", body, 0)
    offset = 2
    for _ in range(entries):
        key, offset = read_string(offset)
        (count,) = struct.unpack_from(">H", body, offset)
        offset += 2
        values = []
        for _ in range(count):
            value, offset = read_string(offset)
            values.append(value)
        result[key] = values
    return result


def kafka_call(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """Send one Kafka request (header v1) and return the response body after the correlation id."""
    client_id = b"tickd-infra"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    if not 4 <= size < 1 << 24:
        raise ProtocolError(f"implausible Kafka response size {size}")
    response = recv_exact(sock, size)
    (got_id,) = struct.unpack_from(">i", response, 0)
    if got_id != correlation_id:
        raise ProtocolError(f"correlation id {got_id}, expected {correlation_id}")
    return response[4:]


def kafka_api_versions(port: int, host: str = HOST, tls: ssl.SSLContext | None = None) -> int:
    """ApiVersions v0 (allowed before SASL authentication); the number of APIs the broker lists."""
    with probe_socket(port, host, tls) as sock:
        api_versions = kafka_call(sock, api_key=18, version=0, correlation_id=7003, body=b"")
    error_code, count = struct.unpack_from(">hi", api_versions, 0)
    if error_code != 0:
        raise ProtocolError(f"ApiVersions error_code {error_code}")
    return int(count)


def kafka_brokers(port: int, host: str = HOST) -> list[str]:
    """ApiVersions v0 (must return error_code 0), then Metadata v0; return the brokers as host:port."""
    with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
        sock.settimeout(PROBE_TIMEOUT_S)
        api_versions = kafka_call(sock, api_key=18, version=0, correlation_id=7001, body=b"")
        (error_code,) = struct.unpack_from(">h", api_versions, 0)
        if error_code != 0:
            raise ProtocolError(f"ApiVersions error_code {error_code}")
        metadata = kafka_call(sock, api_key=3, version=0, correlation_id=7002, body=struct.pack(">i", 0))
    (count,) = struct.unpack_from(">i", metadata, 0)
    offset, brokers = 4, []
    for _ in range(count):
        _node_id, host_len = struct.unpack_from(">ih", metadata, offset)
        broker_host = metadata[offset + 6 : offset + 6 + host_len].decode()
        (broker_port,) = struct.unpack_from(">i", metadata, offset + 6 + host_len)
        brokers.append(f"{broker_host}:{broker_port}")
        offset += 10 + host_len
    return brokers


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    """What the launcher needs to know about one server; subclasses fill in the specifics."""

    name: str
    settings: Settings
    port: int
    timeout_s: float
    state_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.state_dir = self.settings.infra_dir / self.name

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def lib_dir(self) -> Path:
        return self.settings.jars_dir / self.name

    @property
    def config_file(self) -> Path:
        """The generated config; its absolute path on a command line marks a process as ours."""
        raise NotImplementedError

    @property
    def bound_ports(self) -> tuple[int, ...]:
        return (self.port,)

    def prepare(self) -> None:
        """Write config files (and do any one-off initialisation) before the server starts."""
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def probe(self) -> str:
        """Talk the server's protocol; return a short description, raise OSError/ProtocolError if it does not answer."""
        raise NotImplementedError

    def startup_finished(self) -> bool:
        """Extra, log-based readiness condition checked only while waiting for a fresh start."""
        return True

    def secure_probe(self) -> str:
        """Talk to the secure endpoint (TLS verified against the local CA); raise OSError/ProtocolError if it does not answer."""
        raise NotImplementedError

    def secure_state(self) -> tuple[bool, str]:
        """Whether the secure endpoint answers, and a line saying what was seen."""
        try:
            return True, self.secure_probe()
        except (OSError, ProtocolError, struct.error) as exc:  # ssl.SSLError is an OSError
            return False, f"NOT answering ({exc or type(exc).__name__})"

    def after_ready(self) -> None:
        """One-off set-up that needs the server answering (runs on every `up`, must be idempotent)."""

    def answers(self) -> str | None:
        """The probe's description when the server answers, else None. Never blocks for long."""
        try:
            return self.probe()
        except (OSError, ProtocolError, struct.error, UnicodeDecodeError):
            return None

    def read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def owns(self, pid: int) -> bool:
        """True when ``pid`` is a live process started by this launcher for this server."""
        return pid_alive(pid) and str(self.config_file) in pid_cmdline(pid)

    def live_pid(self) -> int | None:
        """The pid from the pid file when that process is alive and really ours."""
        pid = self.read_pid()
        return pid if pid is not None and self.owns(pid) else None

    def clear_pid_file(self) -> None:
        self.pid_file.unlink(missing_ok=True)

    def rotate_log(self) -> None:
        if self.log_file.exists():
            self.log_file.replace(self.log_file.with_name("server.log.prev"))

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the server detached (own session), output to server.log, and record its pid."""
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(
                self.command(),
                cwd=self.state_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        write_text(self.pid_file, f"{proc.pid}\n")
        return proc

    def wipe_data(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)


class Cassandra(Server):
    """Single-node Cassandra 5.0 on CassandraDaemon, configured by a generated cassandra.yaml."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("cassandra", settings, settings.cassandra_port, settings.cassandra_timeout_s)

    @property
    def config_file(self) -> Path:
        return self.state_dir / "cassandra.yaml"

    @property
    def bound_ports(self) -> tuple[int, ...]:
        return (self.port, self.settings.cassandra_storage_port)

    def prepare(self) -> None:
        make_dir(self.data_dir)
        tls = ensure_tls(self.settings)
        yaml = render_template(
            "cassandra.yaml",
            storage_port=self.settings.cassandra_storage_port,
            native_port=self.port,
            data_dir=self.data_dir,
            keystore=tls.keystore,
            truststore=tls.truststore,
            tls_password=TLS_PASSWORD,
        )
        write_text(self.config_file, yaml)
        write_text(self.state_dir / "logback.xml", render_template("logback.xml"))

    def command(self) -> list[str]:
        heap = self.settings.cassandra_heap
        jamm = sorted(self.lib_dir.glob("jamm-*.jar"))
        return [
            "java",
            f"-Xms{heap}", f"-Xmx{heap}", "-Xss256k",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=300",
            "-XX:+ExitOnOutOfMemoryError", "-XX:+PerfDisableSharedMem",
            "-Djava.net.preferIPv4Stack=true",
            "-Dchronicle.analytics.disable=true",
            *([f"-javaagent:{jamm[-1]}"] if jamm else []),
            *CASSANDRA_JPMS_FLAGS,
            f"-Dcassandra.config=file://{self.config_file}",
            "-Dcassandra-foreground=yes",
            f"-Dcassandra.storagedir={self.data_dir}",
            f"-Dcassandra.logdir={self.state_dir}",
            f"-Dlogback.configurationFile={self.state_dir / 'logback.xml'}",
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            # Not -Dcassandra.unsafesystem=true: it skips flushing the schema tables, and a node killed
            # with kill -9 came back without a keyspace made seconds before (acceptance S13).
            "-Dcassandra.libjemalloc=-",
            "-cp", f"{self.state_dir}:{self.lib_dir}/*",
            "org.apache.cassandra.service.CassandraDaemon",
        ]

    def probe(self) -> str:
        supported = cql_supported(self.port)
        cql = ",".join(supported.get("CQL_VERSION", ["?"]))
        return f"CQL {cql} on {HOST}:{self.port}"

    def startup_finished(self) -> bool:
        try:
            return b"Startup complete" in self.log_file.read_bytes()
        except OSError:
            return False

    def secure_probe(self) -> str:
        tls = TlsFiles(self.settings.tls_dir)
        supported = cql_supported(self.port, tls=tls.client_context())
        return f"TLS (optional) on {HOST}:{self.port}, CQL {','.join(supported.get('CQL_VERSION', ['?']))}, CA {tls.ca_pem}"


class Kafka(Server):
    """Single-node KRaft Kafka (broker + controller in one process)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("kafka", settings, settings.kafka_port, settings.kafka_timeout_s)

    @property
    def config_file(self) -> Path:
        return self.state_dir / "server.properties"

    @property
    def cluster_id_file(self) -> Path:
        return self.state_dir / "cluster.id"

    @property
    def bound_ports(self) -> tuple[int, ...]:
        return (self.port, self.settings.kafka_controller_port, self.settings.kafka_sasl_port)

    @property
    def scram_marker(self) -> Path:
        """Written once the SCRAM user exists in the metadata of this data dir."""
        return self.state_dir / "scram-user"

    def classpath(self) -> list[str]:
        return ["-cp", f"{self.lib_dir}/*"]

    def prepare(self) -> None:
        make_dir(self.data_dir)
        tls = ensure_tls(self.settings)
        props = render_template(
            "kafka-server.properties",
            port=self.port,
            controller_port=self.settings.kafka_controller_port,
            sasl_port=self.settings.kafka_sasl_port,
            data_dir=self.data_dir,
            keystore=tls.keystore,
            tls_password=TLS_PASSWORD,
        )
        write_text(self.config_file, props)
        if not (self.data_dir / "meta.properties").exists():
            self.scram_marker.unlink(missing_ok=True)
            self.format_storage(self.cluster_id())
            write_text(self.scram_marker, f"{SASL_USER} {SASL_MECHANISM} (at format)\n")

    def cluster_id(self) -> str:
        """The id the data dir was formatted with, else the remembered one, else a new random one."""
        meta = self.data_dir / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    cluster_id = line.split("=", 1)[1].strip()
                    break
        elif self.cluster_id_file.exists():
            cluster_id = self.cluster_id_file.read_text().strip()
        else:
            cluster_id = "-"
            while cluster_id.startswith("-"):  # a leading '-' would read as a CLI option
                cluster_id = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        write_text(self.cluster_id_file, f"{cluster_id}\n")
        return cluster_id

    def format_storage(self, cluster_id: str) -> None:
        """Run kafka-storage format once for a fresh data dir (output goes into server.log)."""
        say(f"kafka: formatting {self.data_dir} (cluster id {cluster_id})")
        cmd = [
            "java", "-Xmx256m", *self.classpath(), "kafka.tools.StorageTool", "format",
            "-t", cluster_id, "-c", str(self.config_file), "--ignore-formatted",
            "--add-scram", f"{SASL_MECHANISM}=[name={SASL_USER},password={SASL_PASSWORD}]",
        ]
        with self.log_file.open("ab") as log:
            try:
                result = subprocess.run(
                    cmd, cwd=self.state_dir, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, timeout=min(90.0, self.timeout_s),
                )
            except subprocess.TimeoutExpired:
                raise StartFailure(self, "storage format timed out") from None
        if result.returncode != 0:
            raise StartFailure(self, f"storage format exited with code {result.returncode}")

    def command(self) -> list[str]:
        heap = self.settings.kafka_heap
        return [
            "java",
            f"-Xms{heap}", f"-Xmx{heap}",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
            *self.classpath(),
            "kafka.Kafka", str(self.config_file),
        ]

    def probe(self) -> str:
        brokers = kafka_brokers(self.port)
        if not brokers:
            raise ProtocolError("metadata lists no brokers yet")
        return f"Kafka broker(s) {', '.join(brokers)}"

    def secure_probe(self) -> str:
        tls = TlsFiles(self.settings.tls_dir)
        port = self.settings.kafka_sasl_port
        count = kafka_api_versions(port, tls=tls.client_context())
        user = self.scram_marker.read_text().strip() if self.scram_marker.exists() else "NO SCRAM user made yet"
        return f"SASL_SSL on {HOST}:{port} (TLS verified, ApiVersions lists {count} APIs), user {user}, CA {tls.ca_pem}"

    def after_ready(self) -> None:
        """A data dir formatted before SASL existed has no SCRAM user: add it through the plain listener."""
        if self.scram_marker.exists():
            return
        say(f"kafka: adding SCRAM user {SASL_USER} ({SASL_MECHANISM}) through {HOST}:{self.port}")
        cmd = [
            "java", "-Xmx256m", *self.classpath(), "kafka.admin.ConfigCommand",
            "--bootstrap-server", f"{HOST}:{self.port}", "--alter", "--entity-type", "users",
            "--entity-name", SASL_USER, "--add-config", f"{SASL_MECHANISM}=[password={SASL_PASSWORD}]",
        ]
        result = subprocess.run(cmd, cwd=self.state_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=120)
        if result.returncode != 0:
            raise InfraError(f"kafka: adding the SCRAM user failed: {(result.stdout + result.stderr).strip()[-2000:]}")
        write_text(self.scram_marker, f"{SASL_USER} {SASL_MECHANISM} (added later)\n")

    def wipe_data(self) -> None:
        super().wipe_data()
        self.cluster_id_file.unlink(missing_ok=True)
        self.scram_marker.unlink(missing_ok=True)


def all_servers(settings: Settings) -> list[Server]:
    return [Cassandra(settings), Kafka(settings)]


# --------------------------------------------------------------------------- starting and waiting


class StartFailure(Exception):
    """A server failed to start; carries the server so its log can be shown."""

    def __init__(self, server: Server, reason: str, show_log: bool = True) -> None:
        super().__init__(reason)
        self.server = server
        self.reason = reason
        self.show_log = show_log


@dataclass
class Pending:
    """A server this invocation waits for: one it started (proc set) or one found still booting."""

    server: Server
    pid: int
    proc: subprocess.Popen[bytes] | None
    started: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float:
        return self.started + self.server.timeout_s

    def exit_code(self) -> int | None:
        if self.proc is not None:
            return self.proc.poll()
        return None if pid_alive(self.pid) else -1


def ensure_ports_free(server: Server) -> None:
    busy = [port for port in server.bound_ports if port_open(port)]
    if busy:
        raise StartFailure(
            server, f"port(s) {busy} already in use by a process not started by infra.py", show_log=False
        )


def start_or_reuse(server: Server) -> Pending | None:
    """Reuse a live, answering server; adopt a live one still booting; otherwise start a fresh one."""
    make_dir(server.state_dir)
    pid = server.live_pid()
    if pid is not None:
        description = server.answers()
        if description:
            say(f"{server.name}: reusing pid {pid} ({description})")
            return None
        say(f"{server.name}: pid {pid} is alive but not answering yet, waiting for it")
        return Pending(server, pid, proc=None)
    if server.pid_file.exists():
        say(f"{server.name}: removing stale pid file ({server.read_pid()})")
        server.clear_pid_file()
    ensure_ports_free(server)
    server.rotate_log()
    server.prepare()
    proc = server.spawn()
    say(f"{server.name}: started pid {proc.pid}, waiting (up to {server.timeout_s:.0f} s)...")
    return Pending(server, proc.pid, proc)


def wait_all(pending: list[Pending]) -> None:
    """Poll until every pending server answers; raise StartFailure on death or deadline."""
    next_note = time.monotonic() + 15.0
    while pending:
        for item in list(pending):
            code = item.exit_code()
            if code is not None:
                raise StartFailure(item.server, f"process {item.pid} exited (code {code}) during startup")
            if item.server.startup_finished():
                description = item.server.answers()
                if description:
                    say(f"{item.server.name}: ready in {time.monotonic() - item.started:.1f} s ({description})")
                    pending.remove(item)
                    continue
            if time.monotonic() > item.deadline:
                raise StartFailure(item.server, f"not answering after {item.server.timeout_s:.0f} s")
        if pending and time.monotonic() >= next_note:
            say("still waiting for " + ", ".join(p.server.name for p in pending))
            next_note += 15.0
        if pending:
            time.sleep(POLL_S)


def check_secure(settings: Settings, started: list[Pending]) -> None:
    """After both answer: one-off set-up, then the secure endpoints. A server this run started must serve
    them; one it reused may predate them, which is said (with the fix), not fatal."""
    fresh = {item.server.name for item in started if item.proc is not None}
    for server in all_servers(settings):
        server.after_ready()
        ok, state = server.secure_state()
        if not ok and server.name in fresh:
            # A fresh broker answers on its plain listener a little before its TLS one is up, and a loaded
            # host stretches that gap (CI saw a handshake time out right after a 69 s recovery): the secure
            # endpoint gets the same bound the plain one had.
            deadline = time.monotonic() + server.timeout_s
            while not ok and time.monotonic() < deadline:
                time.sleep(POLL_S)
                ok, state = server.secure_state()
        if ok:
            say(f"{server.name}: {state}")
        elif server.name in fresh:
            raise StartFailure(server, f"secure endpoint {state}")
        else:
            say(f"{server.name}: secure endpoint {state}; it was started before TLS/SASL existed: "
                "`infra.py down && infra.py up` restarts it with them")


def report_failure(failure: StartFailure) -> None:
    server = failure.server
    print(f"\n{server.name}: FAILED: {failure.reason}", file=sys.stderr, flush=True)
    if not failure.show_log:
        return
    print(f"{server.name}: log: {server.log_file}", file=sys.stderr)
    print(f"--- last {LOG_TAIL_LINES} lines of {server.log_file} ---", file=sys.stderr)
    for line in tail(server.log_file):
        print(f"  {line}", file=sys.stderr)
    print("---", file=sys.stderr, flush=True)


def abort_started(started: list[Pending]) -> None:
    """Kill the processes this invocation started and drop their pid files."""
    ours = [p for p in started if p.proc is not None]
    if not ours:
        return
    say("stopping what this run started: " + ", ".join(f"{p.server.name} (pid {p.pid})" for p in ours))
    stop_processes([p.pid for p in ours], grace_s=10.0)
    for item in ours:
        item.proc.wait()  # type: ignore[union-attr]  # reap our child
        item.server.clear_pid_file()


# --------------------------------------------------------------------------- jar resolution


def pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def jars_current(dest: Path, pom: Path) -> bool:
    """True when the marker of a completed copy matches the POM and every listed jar is present."""
    marker = dest / MARKER_NAME
    try:
        digest, *jars = marker.read_text().split()
    except (OSError, ValueError):
        return False
    return digest == pom_digest(pom) and bool(jars) and all((dest / jar).is_file() for jar in jars)


def copy_jars(name: str, jars_dir: Path) -> None:
    """Resolve one jar set with Maven into a scratch dir, then swap it in and write the marker."""
    pom = MAVEN_POMS / name / "pom.xml"
    dest = jars_dir / name
    scratch = jars_dir / f".{name}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    say(f"jars: resolving {name} with Maven ...")
    cmd = [
        "mvn", "-B", "-q", "-f", str(pom),
        "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
        f"-DoutputDirectory={scratch}", "-DincludeScope=runtime",
    ]
    result = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    jars = sorted(p.name for p in scratch.glob("*.jar")) if scratch.is_dir() else []
    if result.returncode != 0 or not jars:
        output = (result.stdout + result.stderr).strip().splitlines()[-30:]
        raise InfraError(f"mvn failed for {name} (exit {result.returncode}):\n" + "\n".join(output))
    shutil.rmtree(dest, ignore_errors=True)
    scratch.rename(dest)
    write_text(dest / MARKER_NAME, "\n".join([pom_digest(pom), *jars]) + "\n")
    say(f"jars: {name} ready ({len(jars)} jars in {dest})")


def fetch(settings: Settings) -> None:
    require_tools("java", "mvn")
    make_dir(settings.jars_dir)
    servers = {server.name: server for server in all_servers(settings)}
    for name in JAR_SETS:
        dest = settings.jars_dir / name
        if jars_current(dest, MAVEN_POMS / name / "pom.xml"):
            say(f"jars: {name} already present in {dest}")
            continue
        pid = servers[name].live_pid()
        if pid is not None:
            raise InfraError(f"{name} jars need refreshing but {name} (pid {pid}) runs from them; run `down` first")
        copy_jars(name, settings.jars_dir)


# --------------------------------------------------------------------------- subcommands


def cmd_fetch(settings: Settings) -> int:
    """Resolve the Cassandra and Kafka jars into the jars dir (skipped when already complete)."""
    fetch(settings)
    return 0


def cmd_up(settings: Settings) -> int:
    """Fetch jars, then start (or reuse) Cassandra and Kafka and wait until both really answer."""
    fetch(settings)
    with infra_lock(settings.infra_dir):
        pending: list[Pending] = []
        try:
            for server in all_servers(settings):
                item = start_or_reuse(server)
                if item is not None:
                    pending.append(item)
            wait_all(list(pending))
            check_secure(settings, pending)
        except StartFailure as failure:
            report_failure(failure)
            abort_started(pending)
            return 1
        except KeyboardInterrupt:
            abort_started(pending)
            return 130
        except BaseException:
            abort_started(pending)  # e.g. an unwritable state dir after the first server started
            raise
    say(f"up: cassandra on {HOST}:{settings.cassandra_port}, kafka on {HOST}:{settings.kafka_port}")
    return 0


def stop_all(settings: Settings) -> bool:
    """Stop every process of ours (by pid file, plus any stray one using our configs); True when all are gone."""
    targets: dict[int, Server] = {}
    for server in all_servers(settings):
        pid = server.live_pid()
        if pid is not None:
            targets[pid] = server
        for stray in processes_mentioning(str(server.config_file)):
            if stray not in targets:
                say(f"{server.name}: found process {stray} without a pid file, stopping it too")
                targets[stray] = server
    if not targets:
        say("nothing running")
    else:
        say("stopping " + ", ".join(f"{s.name} (pid {pid})" for pid, s in targets.items()) + " ...")
        survivors = stop_processes(list(targets))
        if survivors:
            say(f"could not stop pid(s) {survivors}")
            return False
        for pid, server in targets.items():
            say(f"{server.name}: pid {pid} stopped")
        unreaped = wait_reaped(list(targets))
        if unreaped:
            say(f"note: pid(s) {unreaped} exited but are zombies until init reaps them")
    for server in all_servers(settings):
        server.clear_pid_file()
    return True


def cmd_down(settings: Settings) -> int:
    """Stop both servers (SIGTERM to the process group, SIGKILL after 30 s) and remove the pid files."""
    with infra_lock(settings.infra_dir):
        return 0 if stop_all(settings) else 1


def cmd_status(settings: Settings) -> int:
    """Print each server's state, plain and secure; exit 0 only when both answer on every endpoint."""
    all_answer = True
    for server in all_servers(settings):
        pid = server.live_pid()
        description = server.answers()
        if pid is not None and description:
            state = f"running (pid {pid}), answering: {description}"
        elif pid is not None:
            state = f"running (pid {pid}) but NOT answering on {HOST}:{server.port}"
        elif description:
            state = f"answering ({description}) but not started by infra.py"
        else:
            state = "not running"
        secure_ok, secure = server.secure_state() if description else (False, "not checked (server not answering)")
        all_answer = all_answer and description is not None and secure_ok
        print(f"{server.name}: {state}  [log: {server.log_file}]")
        print(f"{server.name} secure: {secure}")
    return 0 if all_answer else 1


def cmd_wipe(settings: Settings) -> int:
    """Stop both servers, then delete their data dirs (and Kafka's cluster id) for a fresh start."""
    with infra_lock(settings.infra_dir):
        if not stop_all(settings):
            return 1
        for server in all_servers(settings):
            server.wipe_data()
            say(f"{server.name}: data removed ({server.data_dir})")
    return 0


COMMANDS = {"fetch": cmd_fetch, "up": cmd_up, "down": cmd_down, "status": cmd_status, "wipe": cmd_wipe}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, func in COMMANDS.items():
        sub.add_parser(name, help=(func.__doc__ or "").splitlines()[0])
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](Settings.from_env())
    except InfraError as exc:
        print(f"infra.py {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
