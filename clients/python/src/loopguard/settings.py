"""What the caller configures beyond the topics' names: topics per tenant, and the secrets of
`GuardConfig.kafka` kept out of everything the client says.

A verdicts topic with `{tenant}` in its name (the guard's `kafka.verdicts_topic_template`,
e.g. `agent-verdicts.{tenant}`) is the topic of the `Guard`'s own tenant: on a broker with
ACLs each tenant's runtime may read its own verdicts topic only, so one `Guard` serves one
tenant, and a session of another tenant is an error rather than a call that waits in vain.
An events topic with `{tenant}` (the guard's `kafka.events_topic_template`, e.g.
`agent-events.{tenant}`) is likewise the `Guard`'s tenant's own: the guard takes the tenant
of an event from the topic it was written to, and dead-letters one naming another.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional

# The placeholder of a per-tenant topic name.
TENANT = "{tenant}"
# Kafka's rule for topic names (kafka.common.internals.Topic): these characters, 249 at most.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

# A setting whose key contains one of these holds a secret: `sasl.password`,
# `ssl.key.password`, `ssl.keystore.password`, `sasl.oauthbearer.client.secret`,
# `sasl.oauthbearer.config`, `ssl.key.pem` (a private key), `sasl.jaas.config`, tokens.
SENSITIVE_PARTS = ("password", "secret", "sasl.oauthbearer", "jaas", "token", "credential", "key.pem", "private")
REDACTED = "[redacted]"


class ConfigError(ValueError):
    """A `Guard` setting that cannot work (raised when the `Guard` or a session is made);
    `field` names the setting."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field


def is_template(topic: str) -> bool:
    return TENANT in topic


def topic_for(setting: str, role: str, template: str, tenant: Optional[str]) -> str:
    """The topic a `{role}` setting names: `template` itself, or with `{tenant}` replaced by the
    configured tenant (required then, and must make a valid Kafka topic name)."""
    if not is_template(template):
        return template
    if template.count(TENANT) != 1 or template.startswith(TENANT):
        # The guard's rule for its `kafka.*_topic_template` (a prefix makes prefixed ACLs).
        raise ConfigError(
            setting,
            f"`{template}` must hold {TENANT} once, after a prefix (e.g. \"agent-{role}.{TENANT}\"), "
            f"as the guard's kafka.{role}_topic_template does",
        )
    if not tenant:
        raise ConfigError(
            "tenant",
            f"{setting} `{template}` is per tenant ({TENANT}) but no tenant is configured: "
            f"set tenant=... to the tenant whose {role} this Guard "
            + ("reads" if role == "verdicts" else "writes"),
        )
    topic = template.replace(TENANT, tenant)
    if not _TOPIC_NAME.fullmatch(topic):
        raise ConfigError(
            "tenant",
            f"tenant `{tenant}` makes {role} topic `{topic}`, not a valid Kafka topic name "
            "(ASCII letters, digits, '.', '_' and '-' only, at most 249 characters)",
        )
    return topic


def verdicts_topic_for(template: str, tenant: Optional[str]) -> str:
    """The verdicts topic this client reads: `template` itself, or with `{tenant}` replaced by
    the configured tenant (required then, and must make a valid Kafka topic name)."""
    return topic_for("verdicts_topic", "verdicts", template, tenant)


def events_topic_for(template: str, tenant: Optional[str]) -> str:
    """The events topic this client writes: `template` itself, or with `{tenant}` replaced by
    the configured tenant (required then, and must make a valid Kafka topic name)."""
    return topic_for("events_topic", "events", template, tenant)


def check_session_tenant(
    template: str, configured: Optional[str], tenant: Optional[str], events_template: str = ""
) -> None:
    """A session's own tenant, under a per-tenant verdicts topic, must be the `Guard`'s: its
    verdicts would go to another tenant's topic, which this client does not (and on a broker
    with ACLs may not) read. Under a per-tenant events topic too: its events would go to the
    Guard's tenant's topic, where the guard takes them for that tenant's (and dead-letters
    them, as naming another)."""
    if tenant is None or tenant == configured:
        return
    if is_template(template):
        raise ConfigError(
            "tenant",
            f"session tenant `{tenant}` differs from the Guard's tenant `{configured}`: with the per-tenant "
            f"verdicts topic `{template}` this Guard reads only `{verdicts_topic_for(template, configured)}`, and "
            f"the guard would answer this session on `{template.replace(TENANT, tenant)}`; "
            "make one Guard per tenant (tenant=...)",
        )
    if is_template(events_template):
        raise ConfigError(
            "tenant",
            f"session tenant `{tenant}` differs from the Guard's tenant `{configured}`: with the per-tenant "
            f"events topic `{events_template}` this Guard writes only `{events_topic_for(events_template, configured)}`, "
            f"whose events the guard takes as tenant `{configured}`'s; make one Guard per tenant (tenant=...)",
        )


def sensitive(key: str) -> bool:
    """True for a setting whose value is a secret (never logged, never in an error)."""
    k = key.lower()
    return any(part in k for part in SENSITIVE_PARTS)


def redacted(settings: Mapping[str, Any]) -> Dict[str, Any]:
    """`settings` with every secret value replaced by `[redacted]`: what may be logged."""
    return {k: (REDACTED if sensitive(str(k)) else v) for k, v in settings.items()}


class Scrubber:
    """Removes the secret values of a set of settings from any text before it is said."""

    def __init__(self, settings: Iterable[Mapping[str, Any]]):
        found = {str(v) for s in settings for k, v in s.items() if sensitive(str(k)) and v is not None and str(v)}
        # Longest first: a secret containing another is replaced whole.
        self._secrets: List[str] = sorted(found, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text
