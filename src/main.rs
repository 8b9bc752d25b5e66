//! The `loopguard` binary: parse the command line, load configuration, run one command.

use clap::{Parser, Subcommand};
use loopguard::cli::load_config;
use loopguard::cli::policy_command::{policy, PolicyCommand};
use loopguard::config::{self, Config};
use loopguard::engine::Engine;
use std::io::{BufReader, IsTerminal, Write};
use std::process::ExitCode;

/// mimalloc: the engine allocates small, short-lived strings per event (docs/benchmarks.md);
/// built without transparent huge pages (Cargo.toml, docs/decisions.md (ao)).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "loopguard",
    version,
    about = "Fleet-wide loop guard for LLM agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the detection engine over a JSONL file of events; verdicts to stdout.
    Replay {
        /// Configuration file (the same format as the service's).
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
        /// Stop at the first malformed line or event of an unknown type (exit 1).
        #[arg(long)]
        strict: bool,
        /// Also write the judged-through marker the service would write after each line
        /// (the file read as partition 0, line n at offset n - 1).
        #[arg(long)]
        judged: bool,
        /// Instead of the verdicts, print what the loops cost: usage reported, the part
        /// spent in loops by rule, how long they ran, what stopping them saved (estimate).
        #[arg(long)]
        summary: bool,
        /// Policy changes the service recorded for the partition the file holds (JSON lines
        /// `{"from_offset", "seq", "version", "policy"}`, line n of the input at offset
        /// n - 1; `loopguard policy history` prints them): each applied at its offset.
        #[arg(long)]
        policy_changes: Option<String>,
        /// Read the file as tenant T's own events topic (`kafka.events_topic_template`), as
        /// the service judges it: an event naming no tenant is T's, one naming another is
        /// malformed (`tenant_mismatch`).
        #[arg(long)]
        tenant: Option<String>,
        /// Input file, or `-` for stdin.
        #[arg(default_value = "-")]
        input: String,
    },
    /// Print the effective rule table: each rule's mode and where it was set.
    Rules {
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
        /// The table as this tenant's sessions get it (its overrides applied).
        #[arg(long)]
        tenant: Option<String>,
        /// The table as this agent's sessions get it.
        #[arg(long)]
        agent: Option<String>,
    },
    /// Validate a configuration file without starting anything.
    CheckConfig { file: String },
    /// Run the guard service (embedded broker when no bootstrap servers are configured).
    Serve {
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
    },
    /// Embedded broker + guard + a simulated fleet, with verdicts shown live.
    Demo {
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
        /// Only play the fleet into `--bootstrap-servers` (a load source).
        #[arg(long)]
        fleet_only: bool,
        /// Use this broker instead of the embedded one.
        #[arg(long)]
        bootstrap_servers: Option<String>,
        /// Where the embedded broker takes connections (`kafka.embedded_listen`,
        /// 127.0.0.1:9192; port 0: any free one).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Sessions in the fleet.
        #[arg(long, default_value_t = 18)]
        sessions: usize,
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        duration: Option<u64>,
    },
    /// A local sidecar or daemon: one Kafka connection served over HTTP on loopback, for
    /// runtimes without a Kafka client, the hook commands and the MCP proxy.
    Edge(loopguard::edge::EdgeArgs),
    /// The command a coding CLI's hook settings run (claude-code, codex, gemini): its hook
    /// JSON on stdin, its decision JSON on stdout; asks the local edge.
    Hook(loopguard::hook::HookArgs),
    /// A stdio MCP proxy: every tools/call checked with the local edge before the server
    /// sees it (`loopguard mcp-proxy -- SERVER COMMAND...`).
    McpProxy(loopguard::mcp_proxy::McpProxyArgs),
    /// Load tool: produce a fleet workload at a rate and measure throughput and latency.
    Loadgen(loopguard::loadgen::LoadgenArgs),
    /// The guard's Kafka topics.
    #[command(subcommand)]
    Topics(TopicsCommand),
    /// Mark a verdict right or wrong: a `feedback` event on the events topic, keyed by the
    /// session, counted toward the verdict's rule (`loopguard_verdict_feedback_total`).
    Feedback {
        /// The session the verdict was for.
        #[arg(long)]
        session: String,
        /// The verdict's `verdict_id`.
        #[arg(long)]
        verdict: String,
        /// The verdict was wrong (a false positive).
        #[arg(long, conflicts_with = "useful", required_unless_present = "useful")]
        wrong: bool,
        /// The verdict was right.
        #[arg(long)]
        useful: bool,
        /// Why, in words (cut at 1,024 characters, never exported).
        #[arg(long)]
        note: Option<String>,
        /// The session's tenant (its verdicts topic, with tenant isolation; required with
        /// kafka.events_topic_template: the judgement goes to that tenant's events topic).
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
    },
    /// Policy files: check, compare on recorded traffic, publish live, show what runs.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
enum TopicsCommand {
    /// Create the events, verdicts, dead-letter and state topics (what exists is checked,
    /// never altered).
    Create {
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
        #[command(flatten)]
        args: loopguard::cli::topics::CreateArgs,
    },
    /// Print the least-privilege ACLs of the guard, runtimes, operator and dead-letter
    /// reader for this configuration's topics (a table, or `kafka-acls` commands).
    Acls {
        #[arg(long, env = "LOOPGUARD_CONFIG")]
        config: Option<String>,
        #[command(flatten)]
        args: loopguard::cli::acls::AclArgs,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay {
            config,
            strict,
            judged,
            summary,
            policy_changes,
            tenant,
            input,
        } => replay(
            config.as_deref(),
            loopguard::replay::Options {
                strict,
                strict_types: strict,
                judged,
                summary,
            },
            policy_changes.as_deref(),
            tenant.as_deref(),
            &input,
        ),
        Command::Policy(command) => policy(command),
        Command::Rules {
            config,
            tenant,
            agent,
        } => match load_config(config.as_deref()) {
            Ok(mut c) => {
                let table = loopguard::cli::rules_table::render(
                    &mut c.policy,
                    tenant.as_deref(),
                    agent.as_deref(),
                );
                print!("{table}");
                // What every verdict of this configuration carries (`policy_version`).
                println!("policy_version: {}", c.policy.version());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Serve { config } => {
            let cfg = match load_config(config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            telemetry();
            warn_insecure(&cfg);
            run_async(loopguard::service::serve(cfg, prometheus::Registry::new()))
        }
        Command::Demo {
            config,
            fleet_only,
            bootstrap_servers,
            listen,
            sessions,
            duration,
        } => {
            let mut cfg = match load_config(config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            if let Some(b) = bootstrap_servers {
                cfg.kafka.bootstrap_servers = b;
            }
            if let Some(a) = listen {
                cfg.kafka.embedded_listen = a;
            }
            telemetry();
            let opts = loopguard::demo::DemoOptions {
                fleet_only,
                sessions,
                duration: duration.map(std::time::Duration::from_secs),
            };
            run_async(loopguard::demo::run(cfg, prometheus::Registry::new(), opts))
        }
        Command::Edge(args) => {
            let mut cfg = match load_config(args.config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            if let Some(b) = &args.bootstrap_servers {
                cfg.kafka.bootstrap_servers.clone_from(b);
            }
            let setup = match loopguard::edge::Setup::new(&args, &cfg) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("loopguard: {e:#}");
                    return ExitCode::from(2);
                }
            };
            telemetry();
            warn_insecure(&cfg);
            let client = loopguard::service::kafka::settings::base_config(&cfg);
            if let Err(code) = refused_login(&client, &cfg.kafka.bootstrap_servers) {
                return code;
            }
            run_async(loopguard::edge::run(args, setup))
        }
        Command::Hook(args) => {
            loopguard::hook::run(&args);
            ExitCode::SUCCESS
        }
        Command::McpProxy(args) => loopguard::mcp_proxy::run(args),
        Command::Loadgen(args) => {
            telemetry();
            if !matches!(args.mode, loopguard::loadgen::Mode::Dump { .. }) {
                let mut client = rdkafka::config::ClientConfig::new();
                for (k, v) in args.properties.iter().filter_map(|p| p.split_once('=')) {
                    client.set(k.trim(), v.trim());
                }
                client.set("bootstrap.servers", &args.bootstrap_servers);
                if let Err(code) = refused_login(&client, &args.bootstrap_servers) {
                    return code;
                }
            }
            run_async(loopguard::loadgen::run(args))
        }
        Command::Feedback {
            session,
            verdict,
            wrong,
            useful: _,
            note,
            tenant,
            config,
        } => {
            let cfg = match load_config(config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let j = loopguard::cli::feedback::Judgement {
                session: &session,
                verdict_id: &verdict,
                useful: !wrong,
                note: note.as_deref(),
                tenant: tenant.as_deref(),
            };
            match loopguard::cli::feedback::send(&cfg, &j) {
                Ok((partition, offset)) => {
                    println!(
                        "feedback on {verdict} ({}) sent to {} partition {partition} at offset {offset}",
                        if wrong { "wrong" } else { "useful" },
                        loopguard::cli::feedback::topic(&cfg, tenant.as_deref()).unwrap_or_default()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("loopguard: {e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Command::Topics(TopicsCommand::Create { config, args }) => {
            let cfg = match load_config(config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            run_async(async move {
                for line in loopguard::cli::topics::create(cfg, &args).await? {
                    println!("{line}");
                }
                Ok(())
            })
        }
        Command::Topics(TopicsCommand::Acls { config, args }) => {
            let cfg = match load_config(config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let acls = loopguard::cli::acls::plan(&cfg, &args).and_then(|acls| {
                let quotas = loopguard::cli::acls::quotas(&args)?;
                loopguard::cli::acls::render(&acls, &quotas, &args.format)
            });
            match acls {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("loopguard: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::CheckConfig { file } => {
            match config::load_explained(Some(&file), std::env::vars()) {
                Ok((cfg, sources)) => {
                    println!("{file}: ok");
                    // Where each secret came from, never its value.
                    for s in sources {
                        println!("secret {}: from {} (value not shown)", s.setting, s.source);
                    }
                    for w in config::insecure_settings(&cfg.kafka_properties()) {
                        println!("warning: {w}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("loopguard: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// Logs to stderr; `RUST_LOG` filters (default `info`, librdkafka at `warn`).
fn telemetry() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,rdkafka=warn".into());
    use std::io::IsTerminal;
    // Colours only on a terminal: log files and collectors get plain text.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn run_async(fut: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loopguard: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loopguard: {e:#}");
            ExitCode::from(failure_code(&e))
        }
    }
}

/// A WARN line at start for each setting that turns off what TLS protects the credentials
/// with (host-name or certificate verification).
fn warn_insecure(cfg: &Config) {
    for w in config::insecure_settings(&cfg.kafka_properties()) {
        tracing::warn!("{w}");
    }
}

/// For commands whose own client reports an unreachable broker later (the edge, loadgen):
/// when the broker takes connections, one login with `client`'s settings, and a refusal
/// (credentials, SASL mechanism, TLS) ends the command with exit code 4, named.
fn refused_login(client: &rdkafka::config::ClientConfig, servers: &str) -> Result<(), ExitCode> {
    use loopguard::service::kafka::topics;
    const SETTING: &str = "kafka.bootstrap_servers";
    if servers.is_empty() || topics::reachable(servers, SETTING).is_err() {
        return Ok(());
    }
    match topics::login(client, servers, SETTING) {
        Err(e) if e.is_refused() => {
            eprintln!("loopguard: {e}");
            Err(ExitCode::from(e.exit_code()))
        }
        _ => Ok(()),
    }
}

/// 3 when the broker could not be reached (the address and its setting are in the
/// message), 4 when it refused the login (credentials, SASL mechanism, TLS), 1 for any
/// other failure; 2 is for invalid input, before anything runs.
fn failure_code(e: &anyhow::Error) -> u8 {
    use loopguard::cli::topics::TopicsError;
    use loopguard::service::kafka::topics::KafkaSetupError;
    let refused = e.chain().any(|cause| {
        cause
            .downcast_ref::<KafkaSetupError>()
            .is_some_and(KafkaSetupError::is_refused)
            || matches!(cause.downcast_ref::<TopicsError>(), Some(TopicsError::Check(k)) if k.is_refused())
    });
    if refused {
        return 4;
    }
    let unreachable = e.chain().any(|cause| {
        cause
            .downcast_ref::<KafkaSetupError>()
            .is_some_and(KafkaSetupError::is_unreachable)
            || matches!(cause.downcast_ref::<TopicsError>(), Some(TopicsError::Check(k)) if k.is_unreachable())
            || matches!(
                cause.downcast_ref::<loopguard::client::ClientError>(),
                Some(loopguard::client::ClientError::Unreachable { .. })
            )
    });
    if unreachable {
        3
    } else {
        1
    }
}

fn replay(
    config: Option<&str>,
    opts: loopguard::replay::Options,
    policy_changes: Option<&str>,
    tenant: Option<&str>,
    input: &str,
) -> ExitCode {
    let cfg = match load_config(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let changes = match policy_changes.map(|path| {
        std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {path}: {e}"))
            .and_then(|text| {
                loopguard::service::records::policy_change::PolicyTimeline::read(&text)
            })
    }) {
        None => Default::default(),
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            eprintln!("loopguard: {e}");
            return ExitCode::from(2);
        }
    };
    let mut engine = Engine::new(cfg.policy.clone(), cfg.engine.limits());
    if opts.summary {
        engine = engine.track_spending();
    }
    let reader: Box<dyn std::io::BufRead> = if input == "-" {
        Box::new(BufReader::new(std::io::stdin().lock()))
    } else {
        match std::fs::File::open(input) {
            Ok(f) => Box::new(BufReader::with_capacity(1 << 20, f)),
            Err(e) => {
                eprintln!("loopguard: cannot open {input}: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let tty = std::io::stderr().is_terminal();
    let stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let result =
        loopguard::replay::run_as(&mut engine, reader, stdout, opts, &changes, tenant, |n| {
            if tty {
                eprint!("\r{n} lines…");
                let _ = std::io::stderr().flush();
            }
        });
    if tty {
        eprint!("\r");
    }
    match result {
        Ok(summary) => {
            eprint!("{}", summary.render());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("loopguard: {e}");
            ExitCode::from(1)
        }
    }
}
