"""The client's partitioner against the shared vectors (clients/partitioner-vectors.json):
Kafka's murmur2 values and the partition of each session id, as the Java client's default
partitioner (and kafkajs's, and the TypeScript client's) places it."""

from __future__ import annotations

import json
import pathlib

import pytest

from loopguard import partition_for
from loopguard.partitioner import murmur2

VECTORS = json.loads((pathlib.Path(__file__).resolve().parents[2] / "partitioner-vectors.json").read_text())


def test_murmur2_is_kafkas() -> None:
    for key, want in VECTORS["murmur2"].items():
        assert murmur2(key.encode()) == want, key


def test_every_session_id_lands_where_the_java_partitioner_puts_it() -> None:
    for row in VECTORS["partitions"]:
        assert partition_for(row["key"], row["partitions"]) == row["partition"], row


def test_a_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError):
        partition_for("s", 0)
