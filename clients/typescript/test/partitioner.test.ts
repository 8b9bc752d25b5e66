// The client's partitioner against the shared vectors (clients/partitioner-vectors.json):
// Kafka's murmur2 values and the partition of each session id, as the Java client's default
// partitioner (and the Python client's) places it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { murmur2, partitionFor } from "../src/partitioner.js";

const vectors = JSON.parse(readFileSync(new URL("../../../partitioner-vectors.json", import.meta.url), "utf8")) as {
  murmur2: Record<string, number>;
  partitions: { key: string; partitions: number; partition: number }[];
};

test("murmur2 is Kafka's", () => {
  for (const [key, want] of Object.entries(vectors.murmur2)) assert.equal(murmur2(new TextEncoder().encode(key)), want, key);
});

test("every session id lands where the Java partitioner puts it", () => {
  for (const row of vectors.partitions) assert.equal(partitionFor(row.key, row.partitions), row.partition, JSON.stringify(row));
});

test("a partition count must be positive", () => {
  assert.throws(() => partitionFor("s", 0), RangeError);
});
