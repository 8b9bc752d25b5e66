//! Talking to Kafka: client settings, the guard's topics, the one reading of Kafka errors
//! (`outcome`), what the broker lets the guard do (`access`), tenants' verdict topics,
//! tenants' own events topics (`tenants`), publishing events, and the embedded broker.

pub mod access;
pub mod embedded;
pub mod outcome;
pub mod publish;
pub mod settings;
pub mod tenant_topics;
pub mod tenants;
pub mod topics;
