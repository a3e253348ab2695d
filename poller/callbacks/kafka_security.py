"""How the node's Kafka clients (the callback producer, the ack consumer) authenticate and encrypt.

``KafkaSecurity`` is read once (``TICKD_KAFKA_SECURITY_PROTOCOL`` and friends) as part of
``KafkaSettings``; ``client_config`` turns it into the aiokafka arguments both clients take. Off by
default (``PLAINTEXT``). ``check_connection`` runs at start: a wrong password or a CA that does not sign
the broker's certificate stops the node with a message saying which, while a broker that is merely
down is left to the producer's retries (a node comes up while Kafka is down).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError, SaslAuthenticationFailed, UnsupportedSaslMechanismError

from tickd.schema.errors import ConfigError
from tickd.schema.settings import env_bool, env_choice
from tickd.schema.tls import TlsFiles, client_context, describe_verify_failure, is_tls_failure, read_tls, verify_reason

log = structlog.get_logger("tickd.callbacks")

PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"})
MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
_SASL_VARIABLES = ("TICKD_KAFKA_SASL_MECHANISM", "TICKD_KAFKA_SASL_USERNAME", "TICKD_KAFKA_SASL_PASSWORD")


@dataclass(frozen=True)
class KafkaSecurity:
    """``tls`` is set for SSL and SASL_SSL (``ca=None``: the system trust store); ``mechanism``,
    ``username`` and ``password`` for the SASL protocols."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    tls: TlsFiles | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        env = os.environ if env is None else env
        protocol = env_choice(env, "TICKD_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT", PROTOCOLS)
        tls = read_tls(
            env,
            "TICKD_KAFKA_TLS",
            enabled=protocol in ("SSL", "SASL_SSL"),
            switch="TICKD_KAFKA_SECURITY_PROTOCOL=SSL or SASL_SSL",
            ca_required=False,
            check_hostname=env_bool(env, "TICKD_KAFKA_TLS_CHECK_HOSTNAME", True),
        )
        if not protocol.startswith("SASL_"):
            _refuse_sasl_variables(env, protocol)
            return cls(protocol, tls=tls)
        mechanism = env_choice(env, "TICKD_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", MECHANISMS)
        return cls(protocol, mechanism, _required(env, "USERNAME", protocol), _required(env, "PASSWORD", protocol), tls)


def _required(env: Mapping[str, str], part: str, protocol: str) -> str:
    name = f"TICKD_KAFKA_SASL_{part}"
    value = env.get(name, "")
    if not value.strip():
        raise ConfigError(f"{name} is required with TICKD_KAFKA_SECURITY_PROTOCOL={protocol}", field=name)
    return value


def _refuse_sasl_variables(env: Mapping[str, str], protocol: str) -> None:
    for name in _SASL_VARIABLES:
        if env.get(name, "").strip():
            raise ConfigError(
                f"{name} is set but TICKD_KAFKA_SECURITY_PROTOCOL is {protocol} (SASL_SSL or SASL_PLAINTEXT uses it)",
                field=name,
            )


def client_config(security: KafkaSecurity) -> dict[str, Any]:
    """The aiokafka arguments (producer, consumer, admin alike) for ``security``."""
    config: dict[str, Any] = {"security_protocol": security.protocol}
    if security.tls is not None:
        config["ssl_context"] = client_context(security.tls)
    if security.sasl:
        config["sasl_mechanism"] = security.mechanism
        config["sasl_plain_username"] = security.username
        config["sasl_plain_password"] = security.password
    return config


def refusal(security: KafkaSecurity, address: str, exc: BaseException) -> ConfigError | None:
    """A failure to connect that retrying will not fix, said plainly; None for anything else."""
    if isinstance(exc, SaslAuthenticationFailed):
        return ConfigError(
            f"Kafka SASL authentication failed for user {security.username} ({security.mechanism}) at {address}: "
            f"{exc} (TICKD_KAFKA_SASL_USERNAME / TICKD_KAFKA_SASL_PASSWORD)",
            field="TICKD_KAFKA_SASL_PASSWORD",
        )
    if isinstance(exc, UnsupportedSaslMechanismError):
        return ConfigError(
            f"Kafka SASL at {address}: {exc} (TICKD_KAFKA_SASL_MECHANISM)", field="TICKD_KAFKA_SASL_MECHANISM"
        )
    if security.tls is None:
        return None
    reason = verify_reason(exc)
    if reason is not None:
        return ConfigError(
            describe_verify_failure(reason, security.tls, f"Kafka ({address})"), field="TICKD_KAFKA_TLS_CA"
        )
    if is_tls_failure(exc):
        return ConfigError(
            f"Kafka TLS: handshake with {address} failed ({exc}); is TICKD_KAFKA_BOOTSTRAP a TLS listener?",
            field="TICKD_KAFKA_SECURITY_PROTOCOL",
        )
    return None


async def check_connection(bootstrap: str, security: KafkaSecurity, timeout_s: float) -> None:
    """Connect to each bootstrap broker once with ``security``: raise ``ConfigError`` on credentials or
    certificates the broker refuses; a broker that does not answer is only logged (retried later)."""
    if security.protocol == "PLAINTEXT":
        return
    for address in (part.strip() for part in bootstrap.split(",") if part.strip()):
        host, _, port = address.rpartition(":")
        try:
            async with asyncio.timeout(timeout_s):
                conn = await create_conn(host, int(port), **client_config(security))
        except (KafkaError, OSError, TimeoutError) as exc:
            problem = refusal(security, address, exc)
            if problem is not None:
                raise problem from exc
            log.warning("kafka_check_unreachable", broker=address, error=str(exc) or type(exc).__name__)
            continue
        conn.close()
        log.info("kafka_security_checked", broker=address, protocol=security.protocol, mechanism=security.mechanism)
        return
