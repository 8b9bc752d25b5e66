"""Fixtures: a real broker (KAFKA_BOOTSTRAP_SERVERS), private topics made by `loopguard
topics create`, and a real `loopguard serve` (LOOPGUARD_BIN) that tests can stop and start."""

from __future__ import annotations

from typing import Iterator

import pytest

from guardproc import PARTITIONS, GuardProcess, new_guard_process

__all__ = ["PARTITIONS", "GuardProcess"]


@pytest.fixture(scope="session")
def guard_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardProcess]:
    g = new_guard_process(tmp_path_factory.mktemp("guard"), "pyclient")
    g.start()
    try:
        yield g
    finally:
        g.stop()
        g.delete_topics()


@pytest.fixture()
def guard(guard_process: GuardProcess) -> Iterator["object"]:
    """A client `Guard` on the private topics, closed after the test."""
    from loopguard import Guard

    if guard_process.proc is None or guard_process.proc.poll() is not None:
        guard_process.start()
    g = Guard(
        guard_process.bootstrap,
        events_topic=guard_process.events_topic,
        verdicts_topic=guard_process.verdicts_topic,
        tenant="acme",
        agent="coder",
        model="m-test",
    )
    try:
        yield g
    finally:
        g.close()
