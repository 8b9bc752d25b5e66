//! Command-line front ends: replay, rules, check-config (service commands live in `service`).
pub mod rules_table;
