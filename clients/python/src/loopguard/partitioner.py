"""Which partition a session's events go to: the Java client's default partitioner
(murmur2 of the key, made positive, modulo the partition count), computed here so a session
knows its partition before its first event is sent, and its verdict partition is being read
before its first tool call (docs/decisions.md, "Clients choose the partition").

The TypeScript client computes the same function, so a session that two runtimes share
lands on one partition whichever client publishes."""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit integer like Java's."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(session_id: str, partitions: int) -> int:
    """The partition of `session_id`'s events (and of its verdicts) among `partitions`."""
    if partitions <= 0:
        raise ValueError("partitions must be positive")
    return (murmur2(session_id.encode()) & 0x7FFFFFFF) % partitions
