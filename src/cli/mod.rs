//! Command-line front ends: replay, rules, check-config, topics (service commands live in
//! `service`).
pub mod rules_table;
pub mod topics;
