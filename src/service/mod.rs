//! `loopguard serve`: the Kafka adapter around the engine, one folder per concern.
//!
//! Layout (each arrow only points down; `tests/module_graph.rs` checks there is no circle
//! and that nothing under config/ or engine/ reaches up into service/):
//!
//! - `instance`: one instance's wiring for `serve` and `demo` (broker, admin, threads,
//!   stop).
//! - `admin`: the admin HTTP routes. `shared`: what the threads and the routes share;
//!   `part_key`: how they name an owned partition (a tenant's: `acme/3`).
//! - `stream/`: one stream thread (consume, `worker`, `rebalance`, `retry`, `leave`).
//! - `policy_feed`: the policy topic's reader and the live policy it offers;
//!   `demotion`: the policy versions the guard publishes itself for rules judged wrong.
//! - `state/`: the state topic both ways (a partition's engine and its checkpoints; the
//!   restore that reads them back).
//! - `txn/`: the exactly-once producer (`producer` -> `committer` -> `TxnProducer`, with
//!   `membership`).
//! - `kafka/`: client settings, topics, the reading of Kafka errors (`outcome`), access
//!   checks, tenant topics (`tenants`: each tenant's own events topic found and served
//!   as a lane), publishing, the embedded broker.
//! - `records/`: pure record formats (dead letters, markers, checkpoints, policy changes).
//! - `metrics/`: the Prometheus families.

pub mod admin;
pub mod demotion;
pub mod instance;
pub mod kafka;
pub mod metrics;
pub mod part_key;
pub mod policy_feed;
pub mod records;
pub mod shared;
pub mod state;
pub mod stream;
pub mod txn;

pub use instance::{serve, shutdown_signal, Instance};
