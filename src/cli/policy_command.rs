//! `loopguard policy`: its subcommands (check, diff, publish, history, show) and how each
//! runs, printing what it found and returning the exit code.

use super::load_config;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file (TOML, or JSON when named *.json): every problem, by key.
    Check { file: String },
    /// What NEW would change against OLD on recorded events: per rule, verdicts added,
    /// removed and changed (action or mode), with sample sessions.
    Diff {
        old: String,
        new: String,
        /// Recorded events (JSON lines, as `replay` reads them).
        #[arg(long)]
        events: String,
    },
    /// Publish a valid policy file to the policy topic: every instance applies it within
    /// seconds, without a restart. An invalid file is refused here (exit 2).
    Publish {
        file: String,
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
    },
    /// The policy switches recorded in the state topic (JSON lines, one partition's for
    /// `replay --policy-changes`): at which events offset each version took effect.
    History {
        /// Only this partition's.
        #[arg(long)]
        partition: Option<i32>,
        /// Tenant T's own events topic's switches (`kafka.events_topic_template`), recorded in
        /// its state topic.
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
    },
    /// The policy version in force on each instance, per stream thread and partition, from
    /// their admin endpoints.
    Show {
        /// Admin addresses (`admin.listen` of each instance); default: the config's.
        #[arg(long = "admin")]
        admins: Vec<std::net::SocketAddr>,
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
    },
}

/// Runs one `loopguard policy` command.
pub fn policy(command: PolicyCommand) -> ExitCode {
    use crate::cli::policy as p;
    let fail = |e: p::PolicyCliError| {
        eprintln!("loopguard: {e}");
        ExitCode::from(e.exit_code())
    };
    match command {
        PolicyCommand::Check { file } => match p::check(&file) {
            Ok((_, set)) => {
                println!("{file}: ok, policy_version {}", set.version());
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        },
        PolicyCommand::Diff { old, new, events } => {
            let (old, new) = match (p::check(&old), p::check(&new)) {
                (Ok(o), Ok(n)) => (o.1, n.1),
                (Err(e), _) | (_, Err(e)) => return fail(e),
            };
            let bytes = match std::fs::read(&events) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("loopguard: cannot read {events}: {e}");
                    return ExitCode::from(2);
                }
            };
            match crate::cli::policy_diff::diff(&old, &new, &bytes) {
                Ok(d) => {
                    print!("{}", d.render());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("loopguard: {e}");
                    ExitCode::from(1)
                }
            }
        }
        PolicyCommand::Publish { file, config } => {
            let cfg = match load_config(config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match p::publish(&cfg, &file) {
                Ok((version, offset)) => {
                    println!(
                        "published {version} to {} at offset {offset}",
                        cfg.kafka.policy_topic
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        PolicyCommand::History {
            partition,
            tenant,
            config,
        } => {
            let mut cfg = match load_config(config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            if let Some(t) = tenant {
                match crate::service::kafka::tenants::lane_config(&cfg, &t) {
                    Some(lane) if cfg.kafka.tenants_from_topics() => cfg = lane,
                    _ => {
                        eprintln!("error: --tenant `{t}` needs kafka.events_topic_template (e.g. \"agent-events.{{tenant}}\") and a tenant that can name a topic");
                        return ExitCode::from(2);
                    }
                }
            }
            match p::history(&cfg, partition) {
                Ok(changes) => {
                    for (p, change) in changes {
                        let mut line = serde_json::to_value(&change).unwrap_or_default();
                        line["partition"] = p.into();
                        println!("{line}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        PolicyCommand::Show { admins, config } => {
            let admins = if admins.is_empty() {
                match load_config(config.as_deref()) {
                    Ok(c) => vec![c.admin.listen],
                    Err(code) => return code,
                }
            } else {
                admins
            };
            let mut code = ExitCode::SUCCESS;
            for addr in admins {
                match p::fetch_status(addr) {
                    Ok(status) => print!("{}", p::render_status(addr, &status)),
                    Err(e) => {
                        eprintln!("loopguard: {e}");
                        code = ExitCode::from(1);
                    }
                }
            }
            code
        }
    }
}
