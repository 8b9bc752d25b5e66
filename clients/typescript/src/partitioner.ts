/**
 * Which partition a session's events go to: the Java client's default partitioner (murmur2
 * of the key, made positive, modulo the partition count), computed here so a session knows
 * its partition before its first event is sent, and its verdict partition is being read
 * before its first tool call (docs/decisions.md, "Clients choose the partition"). The
 * Python client computes the same function: a session shared by two runtimes lands on one
 * partition whichever client publishes.
 */

const M = 0x5bd1e995;

/** Kafka's murmur2 (seed 0x9747b28c) of `data`, as a signed 32-bit integer like Java's. */
export function murmur2(data: Uint8Array): number {
  const length = data.length;
  let h = (0x9747b28c ^ length) >>> 0;
  const whole = length - (length % 4);
  for (let i = 0; i < whole; i += 4) {
    let k = (data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)) >>> 0;
    k = Math.imul(k, M) >>> 0;
    k ^= k >>> 24;
    k = Math.imul(k, M) >>> 0;
    h = (Math.imul(h, M) ^ k) >>> 0;
  }
  const rest = length % 4;
  if (rest === 3) h = (h ^ (data[whole + 2] << 16)) >>> 0;
  if (rest >= 2) h = (h ^ (data[whole + 1] << 8)) >>> 0;
  if (rest >= 1) {
    h = (h ^ data[whole]) >>> 0;
    h = Math.imul(h, M) >>> 0;
  }
  h ^= h >>> 13;
  h = Math.imul(h, M) >>> 0;
  h ^= h >>> 15;
  return h | 0;
}

/** The partition of `sessionId`'s events (and of its verdicts) among `partitions`. */
export function partitionFor(sessionId: string, partitions: number): number {
  if (!(partitions > 0)) throw new RangeError("partitions must be positive");
  return (murmur2(new TextEncoder().encode(sessionId)) & 0x7fffffff) % partitions;
}
