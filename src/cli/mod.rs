//! Command-line front ends: replay, rules, policy, check-config, topics (service commands live in
//! `service`).
pub mod acls;
pub mod feedback;
pub mod policy;
pub mod policy_diff;
pub mod rules_table;
pub mod topics;
