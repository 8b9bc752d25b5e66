//! loopguard: a fleet-wide loop guard for LLM agents. The detection engine (`engine`) is a
//! pure state machine; replay, the Kafka service and the admin HTTP are adapters around it.
// No unsafe code but one audited call into librdkafka that rust-rdkafka does not wrap
// (`service::kafka::access::describe_topics`, docs/decisions.md (gh)).
#![deny(unsafe_code)]
pub mod cli;
pub mod client;
pub mod config;
pub mod cost_summary;
pub mod demo;
pub mod edge;
pub mod engine;
pub mod fleet;
pub mod hook;
pub mod loadgen;
pub mod mcp_proxy;
pub mod replay;
pub mod service;
