"""Settings that need no broker: the verdicts topic per tenant (`{tenant}`), a session of
another tenant refused under it, and secrets kept out of everything the client says. The
Guards made here point at a port nothing listens on: they are made at once and never
connect."""

from __future__ import annotations

import logging
import socket
import pytest
from confluent_kafka import KafkaError, KafkaException

from loopguard import ConfigError, Guard, GuardConfig, GuardError
from loopguard.connecting import Refused
from loopguard.kafka_log import LibraryLog
from loopguard.settings import (
    REDACTED,
    Scrubber,
    check_session_tenant,
    events_topic_for,
    redacted,
    sensitive,
    verdicts_topic_for,
)

TEMPLATE = "agent-verdicts.{tenant}"
EVENTS_TEMPLATE = "agent-events.{tenant}"
SECRET = "s3cr3t-Pa55word-never-said"
SECURED = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.username": "runtime",
    "sasl.password": SECRET,
}


def closed_port() -> str:
    """An address where nothing listens (connections refused at once)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


@pytest.fixture()
def nowhere() -> str:
    return closed_port()


def make(bootstrap: str, **kw: object) -> Guard:
    return Guard(bootstrap, connect_wait=0.0, **kw)  # type: ignore[arg-type]


# ---- the verdicts topic per tenant ------------------------------------------------------


def test_a_plain_topic_is_used_as_it_is() -> None:
    assert verdicts_topic_for("agent-verdicts", None) == "agent-verdicts"
    assert verdicts_topic_for("agent-verdicts", "acme") == "agent-verdicts"


def test_the_template_takes_the_configured_tenant() -> None:
    assert verdicts_topic_for(TEMPLATE, "acme") == "agent-verdicts.acme"
    assert verdicts_topic_for("verdicts-{tenant}-v2", "beta_2") == "verdicts-beta_2-v2"


def test_a_template_is_shaped_as_the_guards() -> None:
    for template in ("{tenant}-verdicts", "v.{tenant}.{tenant}"):
        with pytest.raises(ConfigError, match="once, after a prefix") as e:
            verdicts_topic_for(template, "acme")
        assert e.value.field == "verdicts_topic"


def test_a_template_without_a_tenant_is_refused() -> None:
    for tenant in (None, ""):
        with pytest.raises(ConfigError) as e:
            verdicts_topic_for(TEMPLATE, tenant)
        assert e.value.field == "tenant"
        assert "no tenant is configured" in str(e.value) and TEMPLATE in str(e.value)


def test_a_tenant_that_makes_no_topic_name_is_refused() -> None:
    for tenant in ("a b", "acme/prod", "é", "x" * 240):
        with pytest.raises(ConfigError, match="not a valid Kafka topic name"):
            verdicts_topic_for(TEMPLATE, tenant)


def test_the_guard_refuses_a_template_without_tenant_when_made(nowhere: str) -> None:
    with pytest.raises(ConfigError, match="no tenant is configured"):
        make(nowhere, verdicts_topic=TEMPLATE)
    with pytest.raises(ConfigError):
        Guard(GuardConfig(bootstrap_servers=nowhere, verdicts_topic=TEMPLATE))


def test_the_guard_reads_its_tenants_topic(nowhere: str) -> None:
    g = make(nowhere, verdicts_topic=TEMPLATE, tenant="acme")
    try:
        assert g.verdicts_topic == "agent-verdicts.acme"
        assert g.config.verdicts_topic == TEMPLATE
    finally:
        g.close(0.5)


# ---- a session of another tenant --------------------------------------------------------


def test_a_session_tenant_check() -> None:
    check_session_tenant(TEMPLATE, "acme", None)
    check_session_tenant(TEMPLATE, "acme", "acme")
    check_session_tenant("agent-verdicts", "acme", "beta")  # one topic for all: any tenant
    check_session_tenant("agent-verdicts", None, "beta")
    with pytest.raises(ConfigError) as e:
        check_session_tenant(TEMPLATE, "acme", "beta")
    text = str(e.value)
    assert e.value.field == "tenant"
    assert "`beta` differs from the Guard's tenant `acme`" in text
    assert "reads only `agent-verdicts.acme`" in text and "`agent-verdicts.beta`" in text
    assert "one Guard per tenant" in text


def test_a_session_of_another_tenant_is_an_error(nowhere: str) -> None:
    g = make(nowhere, verdicts_topic=TEMPLATE, tenant="acme")
    try:
        g.session("s-default")
        g.session("s-same", tenant="acme")
        with pytest.raises(ConfigError, match="reads only `agent-verdicts.acme`"):
            g.session("s-other", tenant="beta")
        with pytest.raises(ConfigError):
            g._core("s-other-2", "beta", None, None)  # the asyncio flavour's path
    finally:
        g.close(0.5)


def test_without_a_template_sessions_may_name_any_tenant(nowhere: str) -> None:
    g = make(nowhere, tenant="acme")
    try:
        assert g.verdicts_topic == "agent-verdicts"
        g.session("s-beta", tenant="beta")
    finally:
        g.close(0.5)


# ---- the events topic per tenant --------------------------------------------------------


def test_a_plain_events_topic_is_used_as_it_is() -> None:
    assert events_topic_for("agent-events", None) == "agent-events"
    assert events_topic_for("agent-events", "acme") == "agent-events"


def test_the_events_template_takes_the_configured_tenant() -> None:
    assert events_topic_for(EVENTS_TEMPLATE, "acme") == "agent-events.acme"
    assert events_topic_for("events-{tenant}-v2", "beta_2") == "events-beta_2-v2"


def test_an_events_template_is_shaped_as_the_guards() -> None:
    for template in ("{tenant}-events", "e.{tenant}.{tenant}"):
        with pytest.raises(ConfigError, match="once, after a prefix") as e:
            events_topic_for(template, "acme")
        assert e.value.field == "events_topic"
        assert "kafka.events_topic_template" in str(e.value)


def test_an_events_template_without_a_tenant_is_refused() -> None:
    for tenant in (None, ""):
        with pytest.raises(ConfigError) as e:
            events_topic_for(EVENTS_TEMPLATE, tenant)
        assert e.value.field == "tenant"
        assert "no tenant is configured" in str(e.value) and EVENTS_TEMPLATE in str(e.value)
    for tenant in ("a b", "acme/prod", "x" * 240):
        with pytest.raises(ConfigError, match="makes events topic .* not a valid Kafka topic name"):
            events_topic_for(EVENTS_TEMPLATE, tenant)


def test_the_guard_refuses_an_events_template_without_tenant_when_made(nowhere: str) -> None:
    with pytest.raises(ConfigError, match="events_topic `agent-events.{tenant}` is per tenant"):
        make(nowhere, events_topic=EVENTS_TEMPLATE)
    with pytest.raises(ConfigError):
        Guard(GuardConfig(bootstrap_servers=nowhere, events_topic=EVENTS_TEMPLATE))


def test_the_guard_writes_its_tenants_events_topic(nowhere: str) -> None:
    g = make(nowhere, events_topic=EVENTS_TEMPLATE, verdicts_topic=TEMPLATE, tenant="acme")
    try:
        assert g.events_topic == "agent-events.acme"
        assert g.verdicts_topic == "agent-verdicts.acme"
        assert g.config.events_topic == EVENTS_TEMPLATE
    finally:
        g.close(0.5)
    plain = make(nowhere, tenant="acme")
    try:
        assert plain.events_topic == "agent-events"
    finally:
        plain.close(0.5)


def test_under_an_events_template_a_session_of_another_tenant_is_an_error(nowhere: str) -> None:
    check_session_tenant("agent-verdicts", "acme", "acme", EVENTS_TEMPLATE)
    with pytest.raises(ConfigError) as e:
        check_session_tenant("agent-verdicts", "acme", "beta", EVENTS_TEMPLATE)
    assert e.value.field == "tenant" and "writes only `agent-events.acme`" in str(e.value)
    g = make(nowhere, events_topic=EVENTS_TEMPLATE, tenant="acme")
    try:
        g.session("s-same", tenant="acme")
        with pytest.raises(ConfigError, match="writes only `agent-events.acme`"):
            g.session("s-other", tenant="beta")
    finally:
        g.close(0.5)


# ---- secrets ------------------------------------------------------------------------------


def test_sensitive_keys() -> None:
    for key in (
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.jaas.config",
        "ssl.key.pem",
        "SASL.PASSWORD",
    ):
        assert sensitive(key), key
    for key in ("sasl.username", "sasl.mechanisms", "security.protocol", "ssl.ca.location", "client.id"):
        assert not sensitive(key), key


def test_redacted_settings_and_config_repr() -> None:
    shown = redacted(SECURED)
    assert shown["sasl.password"] == REDACTED and shown["sasl.username"] == "runtime"
    cfg = GuardConfig(bootstrap_servers="b:9093", kafka=SECURED)
    assert SECRET not in repr(cfg) and SECRET not in str(cfg)
    assert "'sasl.username': 'runtime'" in repr(cfg) and REDACTED in repr(cfg)
    assert cfg.kafka["sasl.password"] == SECRET  # what librdkafka gets is untouched


def test_the_scrubber_removes_every_secret_value() -> None:
    scrub = Scrubber([SECURED, {"ssl.key.password": "kp", "sasl.oauthbearer.config": "principal=x secret=y"}])
    assert scrub(f"auth with {SECRET} failed") == f"auth with {REDACTED} failed"
    assert "principal=x" not in scrub("cfg principal=x secret=y")
    assert scrub("nothing secret here") == "nothing secret here"


def test_librdkafka_lines_are_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="loopguard.kafka")
    LibraryLog(Scrubber([SECURED])).log(7, "%s [%s] %s", "CONF", "rdkafka#producer-1", f"sasl.password = {SECRET}")
    assert caplog.records and all(SECRET not in r.getMessage() for r in caplog.records)
    assert REDACTED in caplog.records[-1].getMessage()


def test_a_guard_says_no_secret(nowhere: str, caplog: pytest.LogCaptureFixture) -> None:
    """Everything a secured Guard logs (librdkafka's own lines with its config dump
    included), hands to on_error and raises carries no secret."""
    caplog.set_level(logging.DEBUG, logger="loopguard")
    errors = []
    g = make(
        nowhere,
        kafka={**SECURED, "debug": "conf,security,broker"},
        startup_timeout=0.2,
        on_error=lambda where, e: errors.append(f"{where}: {e}"),
    )
    try:
        s = g.session()
        assert s.tool_call("bash", {"cmd": "ls"}) is None  # not connected: fail-open at once
        with pytest.raises(GuardError) as e:
            g.ready(0.3)
        assert SECRET not in str(e.value)
        # A refusal and a login failure, as the broker would report them, said with the
        # client's words (once each).
        g._report("delivery", KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
        g._report("kafka", KafkaException(KafkaError(KafkaError._AUTHENTICATION, f"bad login {SECRET}")))
        assert SECRET not in repr(g.config)
    finally:
        g.close(0.5)
    said = [r.getMessage() for r in caplog.records]
    # librdkafka's configuration dump came through, and the login refusal, scrubbed.
    assert any("sasl.password = [redacted]" in m for m in said)
    assert any("refused this client's login" in m and f"bad login {REDACTED}" in m for m in said)
    assert all(SECRET not in m for m in said), [m for m in said if SECRET in m]
    # on_error gets the library's exception objects as they are (the made-up one above holds
    # the secret; librdkafka's own never do).
    assert all(SECRET not in m for m in errors if "bad login" not in m)


# ---- refusals: said once ------------------------------------------------------------------


def test_a_refusal_names_the_topic_and_the_operation() -> None:
    read = Refused("b:9093", "agent-verdicts.acme", "verdicts", "Read", describe=True)
    assert "refused this client Read on the verdicts topic `agent-verdicts.acme`" in str(read)
    assert "TOPIC_AUTHORIZATION_FAILED on Describe" in str(read) and "fail-open" in str(read)
    write = Refused("b:9093", "agent-events", "events", "Write")
    assert "refused this client Write on the events topic `agent-events` (TOPIC_AUTHORIZATION_FAILED)" in str(write)


def test_a_refusal_after_connecting_is_said_once(nowhere: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="loopguard")
    errors = []
    g = make(nowhere, verdicts_topic=TEMPLATE, tenant="acme", on_error=lambda where, e: errors.append(str(e)))
    try:
        refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        for _ in range(5):
            g._report("verdict reader", refused)
        warnings = [r.getMessage() for r in caplog.records if "refused this client" in r.getMessage()]
        assert warnings == [
            "loopguard: Kafka at %s refused this client Read on the verdicts topic `agent-verdicts.acme` "
            "(TOPIC_AUTHORIZATION_FAILED); tool calls run unguarded (fail-open) until its principal is "
            "granted Read on `agent-verdicts.acme`" % nowhere
        ]
        refusals = [e for e in errors if "refused this client" in e]
        assert len(refusals) == 1 and "agent-verdicts.acme" in refusals[0]
        g._allowed("read")  # a record was read: said again if refused again
        g._report("verdict reader", refused)
        assert len([r for r in caplog.records if "refused this client" in r.getMessage()]) == 2
    finally:
        g.close(0.5)
