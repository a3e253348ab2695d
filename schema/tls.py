"""TLS client settings and contexts, shared by the Cassandra store and the Kafka clients.

A ``TlsFiles`` is read from variables that share a prefix (``TICKD_CASSANDRA_TLS`` ->
``TICKD_CASSANDRA_TLS_CA``, ``_CERT``, ``_KEY``), so every refusal names the variable to fix. The
context is built with the standard library at start-up (``client_context``): a file that is missing
or not PEM stops start-up with a ``ConfigError``, not the first connection.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from tickd.schema.errors import ConfigError


@dataclass(frozen=True)
class TlsFiles:
    """Where a client's TLS material is. ``ca=None``: the system's trust store."""

    prefix: str
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    check_hostname: bool = True

    def variable(self, part: str) -> str:
        return f"{self.prefix}_{part}"


def _file(env: Mapping[str, str], name: str) -> str | None:
    path = env.get(name, "").strip() or None
    if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise ConfigError(f"{name}: no readable file at {path!r}", field=name)
    return path


def read_tls(
    env: Mapping[str, str], prefix: str, *, enabled: bool, switch: str, ca_required: bool, check_hostname: bool
) -> TlsFiles | None:
    """The TLS files under ``prefix`` when ``enabled``; ``switch`` says how TLS is turned on, for messages.
    ``check_hostname`` is the parsed ``<prefix>_CHECK_HOSTNAME``."""
    names = {part: f"{prefix}_{part}" for part in ("CA", "CERT", "KEY")}
    if not enabled:
        for name in names.values():
            if env.get(name, "").strip():
                raise ConfigError(f"{name} is set but TLS is off ({switch} turns it on)", field=name)
        return None
    ca, cert, key = (_file(env, name) for name in names.values())
    if ca is None and ca_required:
        raise ConfigError(
            f"{names['CA']} (the CA file that signs the server's certificate) is required when {switch}",
            field=names["CA"],
        )
    if (cert is None) != (key is None):
        missing = names["KEY"] if key is None else names["CERT"]
        raise ConfigError(
            f"{missing} is required with {names['CERT'] if key is None else names['KEY']} "
            "(a client certificate needs both)",
            field=missing,
        )
    files = TlsFiles(prefix, ca, cert, key, check_hostname)
    client_context(files)  # refuse a file that is not PEM now, at start
    return files


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """A client context that verifies the server against ``files.ca`` (and its name unless turned off)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = files.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        if files.ca is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            context.load_verify_locations(cafile=files.ca)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"{files.variable('CA')}: cannot load CA certificates from {files.ca!r}: {exc}", field=files.variable("CA")
        ) from None
    if files.cert is not None:
        try:
            context.load_cert_chain(files.cert, files.key)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{files.variable('CERT')}/{files.variable('KEY')}: cannot load the client certificate and key: {exc}",
                field=files.variable("CERT"),
            ) from None
    return context


def verify_reason(exc: BaseException) -> str | None:
    """Why a certificate was refused, when ``exc`` (or one of its causes) is a verification failure.
    Matched on the text too: drivers re-raise socket errors as plain ``OSError`` with the message only."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return getattr(seen, "verify_message", None) or str(seen)
        text = str(seen)
        if "CERTIFICATE_VERIFY_FAILED" in text:
            reason = text.split("certificate verify failed:", 1)[-1]
            return reason.split("(_ssl.c", 1)[0].strip()
        seen = seen.__cause__ or seen.__context__
    return None


def is_tls_failure(exc: BaseException) -> bool:
    """True for any TLS-level failure: a handshake, a protocol mismatch (a plain server), a bad record."""
    text = str(exc)
    return isinstance(exc, ssl.SSLError) or "[SSL" in text or "_ssl.c" in text


def describe_verify_failure(reason: str, files: TlsFiles, what: str) -> str:
    """Why the server's certificate was refused, naming the variable that decides it."""
    if "mismatch" in reason.lower():
        return (
            f"{what} TLS: certificate verify failed: the server's certificate does not name the host "
            f"connected to ({reason}); {files.variable('CHECK_HOSTNAME')}=false turns the name check off"
        )
    ca = f"the CA in {files.variable('CA')} ({files.ca})" if files.ca else "no CA in the system trust store"
    return f"{what} TLS: certificate verify failed: {ca} does not sign the server's certificate ({reason})"
