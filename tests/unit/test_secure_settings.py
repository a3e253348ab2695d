"""Secure connections are off by default, one setting turns each on, and every refused combination
names the variable to fix (issue #12 item 1)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from aiokafka.errors import SaslAuthenticationFailed, UnsupportedSaslMechanismError
from cassandra import AuthenticationFailed
from cassandra.cluster import NoHostAvailable

from tickd.poller.callbacks.kafka import KafkaSettings, producer_config
from tickd.poller.callbacks.kafka_security import KafkaSecurity, client_config, refusal
from tickd.schema.cassandra import build_cluster, connect_refusal
from tickd.schema.errors import ConfigError
from tickd.schema.settings import StoreSettings

CA = str(Path(__file__).with_name("untrusted_ca.pem"))  # a valid PEM CA that signs nothing we talk to
VERIFY_TEXT = (
    "Tried connecting to [('127.0.0.1', 9042)]. Last error: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
    "failed: unable to get local issuer certificate (_ssl.c:1006)"
)


@pytest.fixture
def not_pem(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_text("not a certificate\n")
    return str(path)


def refused(parse, env: dict[str, str]) -> str | None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        parse(env)
    assert info.value.field is not None and info.value.field in info.value.message
    return info.value.field


# -- Cassandra ---------------------------------------------------------------------------------------


def test_cassandra_tls_is_off_by_default() -> None:
    settings = StoreSettings.from_env({})
    assert settings.tls is None
    assert build_cluster(settings).ssl_context is None


def test_cassandra_tls_on_with_a_ca_builds_a_checking_context() -> None:
    settings = StoreSettings.from_env({"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": CA})
    assert settings.tls is not None and settings.tls.ca == CA and settings.tls.check_hostname
    context = build_cluster(settings).ssl_context
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_cassandra_hostname_check_can_be_turned_off() -> None:
    env = {"TICKD_CASSANDRA_TLS": "1", "TICKD_CASSANDRA_TLS_CA": CA, "TICKD_CASSANDRA_TLS_CHECK_HOSTNAME": "false"}
    context = build_cluster(StoreSettings.from_env(env)).ssl_context
    assert context is not None and not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"TICKD_CASSANDRA_TLS": "true"}, "TICKD_CASSANDRA_TLS_CA"),
        ({"TICKD_CASSANDRA_TLS": "maybe", "TICKD_CASSANDRA_TLS_CA": CA}, "TICKD_CASSANDRA_TLS"),
        ({"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": "/nonexistent/ca.pem"}, "TICKD_CASSANDRA_TLS_CA"),
        ({"TICKD_CASSANDRA_TLS_CA": CA}, "TICKD_CASSANDRA_TLS_CA"),  # a CA while TLS is off: not silently plain
        (
            {"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": CA, "TICKD_CASSANDRA_TLS_CERT": CA},
            "TICKD_CASSANDRA_TLS_KEY",
        ),
        (
            {"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": CA, "TICKD_CASSANDRA_TLS_KEY": CA},
            "TICKD_CASSANDRA_TLS_CERT",
        ),
        (
            {"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": CA, "TICKD_CASSANDRA_TLS_CHECK_HOSTNAME": "x"},
            "TICKD_CASSANDRA_TLS_CHECK_HOSTNAME",
        ),
    ],
)
def test_cassandra_refusals_name_their_variable(env: dict[str, str], variable: str) -> None:
    assert refused(StoreSettings.from_env, env) == variable


def test_a_ca_file_that_is_not_pem_is_refused_at_start(not_pem: str) -> None:
    env = {"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": not_pem}
    assert refused(StoreSettings.from_env, env) == "TICKD_CASSANDRA_TLS_CA"


def test_a_client_certificate_that_does_not_load_is_refused_at_start(not_pem: str) -> None:
    env = {
        "TICKD_CASSANDRA_TLS": "true",
        "TICKD_CASSANDRA_TLS_CA": CA,
        "TICKD_CASSANDRA_TLS_CERT": not_pem,
        "TICKD_CASSANDRA_TLS_KEY": not_pem,
    }
    assert refused(StoreSettings.from_env, env) == "TICKD_CASSANDRA_TLS_CERT"


def test_cassandra_connect_failures_that_waiting_cannot_fix_say_which() -> None:
    tls = StoreSettings.from_env({"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": CA})
    untrusted = connect_refusal(tls, NoHostAvailable("Unable to connect", {"127.0.0.1:9042": OSError(VERIFY_TEXT)}))
    assert untrusted is not None and untrusted.field == "TICKD_CASSANDRA_TLS_CA"
    assert untrusted.message.startswith("Cassandra TLS: certificate verify failed: the CA in TICKD_CASSANDRA_TLS_CA")
    assert "does not sign the server's certificate" in untrusted.message
    auth = StoreSettings.from_env({"TICKD_CASSANDRA_USERNAME": "tickd", "TICKD_CASSANDRA_PASSWORD": "nope"})
    wrong = connect_refusal(auth, NoHostAvailable("x", {"h": AuthenticationFailed("Provided username is incorrect")}))
    assert wrong is not None and "authentication failed for user 'tickd'" in wrong.message
    assert connect_refusal(tls, NoHostAvailable("x", {"h": ConnectionRefusedError(111, "refused")})) is None


# -- Kafka ----------------------------------------------------------------------------------------------


def test_kafka_is_plaintext_by_default() -> None:
    settings = KafkaSettings.from_env({})
    assert settings.security == KafkaSecurity()
    assert client_config(settings.security) == {"security_protocol": "PLAINTEXT"}
    assert producer_config(settings)["security_protocol"] == "PLAINTEXT"


def test_kafka_sasl_ssl_defaults_to_scram_sha_512_and_reaches_the_producer() -> None:
    env = {
        "TICKD_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "TICKD_KAFKA_SASL_USERNAME": "tickd",
        "TICKD_KAFKA_SASL_PASSWORD": "secret",
        "TICKD_KAFKA_TLS_CA": CA,
    }
    settings = KafkaSettings.from_env(env)
    assert settings.security.mechanism == "SCRAM-SHA-512"
    config = producer_config(settings)
    assert config["security_protocol"] == "SASL_SSL"
    assert (config["sasl_mechanism"], config["sasl_plain_username"], config["sasl_plain_password"]) == (
        "SCRAM-SHA-512",
        "tickd",
        "secret",
    )
    assert isinstance(config["ssl_context"], ssl.SSLContext) and config["ssl_context"].check_hostname


def test_kafka_ssl_without_a_ca_trusts_the_system_store() -> None:
    security = KafkaSecurity.from_env({"TICKD_KAFKA_SECURITY_PROTOCOL": "SSL"})
    assert security.tls is not None and security.tls.ca is None
    assert "sasl_mechanism" not in client_config(security)


SASL = {"TICKD_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TICKD_KAFKA_SASL_USERNAME": "u", "TICKD_KAFKA_SASL_PASSWORD": "p"}


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"TICKD_KAFKA_SECURITY_PROTOCOL": "TLS"}, "TICKD_KAFKA_SECURITY_PROTOCOL"),
        ({**SASL, "TICKD_KAFKA_SASL_MECHANISM": "GSSAPI"}, "TICKD_KAFKA_SASL_MECHANISM"),
        ({**SASL, "TICKD_KAFKA_SASL_USERNAME": ""}, "TICKD_KAFKA_SASL_USERNAME"),
        (
            {"TICKD_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "TICKD_KAFKA_SASL_USERNAME": "u"},
            "TICKD_KAFKA_SASL_PASSWORD",
        ),
        ({"TICKD_KAFKA_SASL_USERNAME": "u"}, "TICKD_KAFKA_SASL_USERNAME"),  # SASL variables with PLAINTEXT
        ({"TICKD_KAFKA_SECURITY_PROTOCOL": "SSL", "TICKD_KAFKA_SASL_PASSWORD": "p"}, "TICKD_KAFKA_SASL_PASSWORD"),
        ({"TICKD_KAFKA_SASL_MECHANISM": "PLAIN"}, "TICKD_KAFKA_SASL_MECHANISM"),
        ({"TICKD_KAFKA_TLS_CA": CA}, "TICKD_KAFKA_TLS_CA"),  # a CA without TLS
        ({**SASL, "TICKD_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "TICKD_KAFKA_TLS_CA": CA}, "TICKD_KAFKA_TLS_CA"),
        ({**SASL, "TICKD_KAFKA_TLS_CA": "/nonexistent/ca.pem"}, "TICKD_KAFKA_TLS_CA"),
        ({**SASL, "TICKD_KAFKA_TLS_CHECK_HOSTNAME": "perhaps"}, "TICKD_KAFKA_TLS_CHECK_HOSTNAME"),
    ],
)
def test_kafka_refusals_name_their_variable(env: dict[str, str], variable: str) -> None:
    assert refused(KafkaSecurity.from_env, env) == variable


def test_kafka_connect_failures_that_retrying_cannot_fix_say_which() -> None:
    security = KafkaSecurity.from_env({**SASL, "TICKD_KAFKA_TLS_CA": CA})
    wrong = refusal(security, "127.0.0.1:9094", SaslAuthenticationFailed("Authentication failed"))
    assert wrong is not None and wrong.field == "TICKD_KAFKA_SASL_PASSWORD"
    assert wrong.message.startswith("Kafka SASL authentication failed for user u (SCRAM-SHA-512)")
    mechanism = refusal(security, "b:9094", UnsupportedSaslMechanismError("no SCRAM-SHA-512"))
    assert mechanism is not None and mechanism.field == "TICKD_KAFKA_SASL_MECHANISM"
    untrusted = refusal(security, "b:9094", ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] x"))
    assert untrusted is not None and "the CA in TICKD_KAFKA_TLS_CA" in untrusted.message
    assert refusal(security, "b:9094", ConnectionRefusedError(111, "refused")) is None
