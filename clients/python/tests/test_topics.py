"""`loopguard topics create` on the real broker: partitions, compaction, retention, idempotence."""

from __future__ import annotations

import subprocess

from confluent_kafka.admin import AdminClient, ConfigResource

from guardproc import PARTITIONS, GuardProcess


def _describe(g: GuardProcess, topic: str) -> dict:
    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(timeout=10)
    parts = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    return {"partitions": parts, **{k: v.value for k, v in configs.items()}}


def test_the_five_topics_are_created_as_the_guard_needs_them(guard_process: GuardProcess) -> None:
    n = guard_process.name
    events = _describe(guard_process, f"{n}-events")
    verdicts = _describe(guard_process, f"{n}-verdicts")
    dlq = _describe(guard_process, f"{n}-dlq")
    state = _describe(guard_process, f"{n}-state")
    policy = _describe(guard_process, f"{n}-policy")
    assert events["partitions"] == verdicts["partitions"] == state["partitions"] == PARTITIONS
    assert dlq["partitions"] == 1
    assert events["retention.ms"] == str(72 * 3600 * 1000)
    assert verdicts["retention.ms"] == str(24 * 3600 * 1000)
    assert dlq["retention.ms"] == str(14 * 24 * 3600 * 1000)
    assert state["cleanup.policy"] == "compact"
    assert events["cleanup.policy"] == "delete"
    assert state["segment.ms"] == "600000"
    # The live policy: one partition (one order of versions for every instance), compacted.
    assert policy["partitions"] == 1
    assert policy["cleanup.policy"] == "compact"


def test_create_again_leaves_them_and_a_mismatch_is_an_error(guard_process: GuardProcess) -> None:
    out = guard_process.create_topics()
    # events, verdicts, dead letters, state and the policy topic (issue 17)
    assert out.count("exists") == 5 and "created" not in out
    r = subprocess.run(
        [guard_process.binary, "topics", "create", "--config", str(guard_process.config_path), "--partitions", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert f"topic `{guard_process.name}-events` exists with {PARTITIONS} partitions, not 5" in r.stderr


def test_serve_names_the_command_when_a_topic_is_missing(guard_process: GuardProcess) -> None:
    r = subprocess.run(
        [guard_process.binary, "serve", "--config", str(guard_process.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"LOOPGUARD__KAFKA__EVENTS_TOPIC": f"{guard_process.name}-missing", "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 1
    assert "loopguard topics create" in r.stderr
