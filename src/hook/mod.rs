//! `loopguard hook claude-code | codex | gemini`: the command a coding CLI's hook settings
//! run at each tool call, prompt and stop. It reads the CLI's hook JSON on stdin, asks the
//! local edge (`loopguard edge`) and answers in that CLI's own decision format. It never
//! hangs the CLI and never fails it: anything it cannot do is an allow, said on stderr.
//!
//! A process per call must not connect to Kafka itself (hundreds of ms); the edge holds the
//! connection. Each CLI's payload and answer format lives in its own file.

mod carry;
mod claude_code;
mod codex;
mod gemini;
mod moment;

pub use moment::{Decision, Moment, Payload};

use crate::edge::{EdgeAnswer, EdgeClient};
use serde_json::{json, Map, Value};
use std::io::Read;
use std::time::Duration;

/// The CLIs a hook answers.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cli {
    ClaudeCode,
    Codex,
    Gemini,
}

impl Cli {
    pub fn name(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "claude-code",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
        }
    }

    fn read(self, payload: &Value) -> Result<Payload, String> {
        match self {
            Cli::ClaudeCode => claude_code::read(payload),
            Cli::Codex => codex::read(payload),
            Cli::Gemini => gemini::read(payload),
        }
    }

    fn answer(self, payload: &Payload, decision: &Decision) -> Value {
        match self {
            Cli::ClaudeCode => claude_code::answer(payload, decision),
            Cli::Codex => codex::answer(payload, decision),
            Cli::Gemini => gemini::answer(payload, decision),
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct HookArgs {
    /// Which CLI runs this hook (its payload and answer format).
    #[arg(value_enum)]
    pub cli: Cli,
    /// The local edge.
    #[arg(long, env = "LOOPGUARD_EDGE", default_value = crate::edge::DEFAULT_URL)]
    pub edge: String,
    /// The edge's token file (an edge started with `--token-file`): its token is sent as
    /// `Authorization: Bearer`.
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_EDGE_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// Copied onto every event: selects policy overrides, labels metrics.
    #[arg(long, env = "LOOPGUARD_TENANT")]
    pub tenant: Option<String>,
    /// The agent's name on its events (default: the CLI's name).
    #[arg(long, env = "LOOPGUARD_AGENT")]
    pub agent: Option<String>,
    /// The model, when the CLI's payload does not say.
    #[arg(long, env = "LOOPGUARD_MODEL")]
    pub model: Option<String>,
    /// The longest this command waits for the guard (ms); then it allows and says so.
    #[arg(long, env = "LOOPGUARD_HOOK_DEADLINE_MS", default_value_t = 1000)]
    pub deadline_ms: u64,
}

/// The largest payload read (a tool response can be long; the rest is not needed).
const MAX_PAYLOAD: u64 = 16 << 20;

/// Runs one hook call: stdin in, the CLI's answer on stdout, notes on stderr. Always exit 0.
pub fn run(args: &HookArgs) {
    let mut text = String::new();
    let read = std::io::stdin().take(MAX_PAYLOAD).read_to_string(&mut text);
    let answer = match read
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
    {
        Ok(payload) => {
            let (edge, unread) = EdgeClient::for_caller(&args.edge, args.token_file.as_deref());
            if let Some(e) = unread {
                say(args.cli, &format!("{e}; asking the edge without its token"));
            }
            handle(args, &payload, &edge)
        }
        Err(e) => {
            say(
                args.cli,
                &format!("cannot read the hook payload ({e}); allowed"),
            );
            json!({})
        }
    };
    println!("{answer}");
}

/// One payload to the CLI's answer.
pub fn handle(args: &HookArgs, payload: &Value, edge: &EdgeClient) -> Value {
    let p = match args.cli.read(payload) {
        Ok(p) => p,
        Err(e) => {
            say(
                args.cli,
                &format!("cannot read the hook payload: {e}; allowed"),
            );
            return json!({});
        }
    };
    let deadline = Duration::from_millis(args.deadline_ms);
    let decision = match p.event(args) {
        None => Decision::Allow,
        Some(event) if p.moment.is_checked() => {
            from_answer(args.cli, &p, edge.check(&event, deadline))
        }
        Some(event) => {
            if let Err(e) = edge.publish(&event, deadline) {
                say(args.cli, &format!("{} not recorded: {e}", p.moment.kind()));
            }
            Decision::Allow
        }
    };
    let decision = match args.cli {
        // Gemini reads no context before a tool: a steer waits for the call's AfterTool.
        Cli::Gemini => carry::across_the_call(&p, decision),
        _ => decision,
    };
    args.cli.answer(&p, &decision)
}

fn from_answer(cli: Cli, p: &Payload, answer: EdgeAnswer) -> Decision {
    match answer {
        EdgeAnswer::Verdict {
            action, message, ..
        } => Decision::from_action(&action, message, &p.moment),
        EdgeAnswer::None => Decision::Allow,
        EdgeAnswer::FailOpen { why } => {
            say(
                cli,
                &format!("{} allowed unguarded: {why}", p.moment.kind()),
            );
            Decision::Allow
        }
        EdgeAnswer::Invalid { why } => {
            say(
                cli,
                &format!(
                    "the edge refused the {} event: {why}; allowed",
                    p.moment.kind()
                ),
            );
            Decision::Allow
        }
    }
}

fn say(cli: Cli, note: &str) {
    eprintln!("loopguard hook {}: {note}", cli.name());
}

/// The common fields of an event from this hook call.
pub(crate) fn base_event(args: &HookArgs, p: &Payload, kind: &str) -> Map<String, Value> {
    let mut e = Map::new();
    e.insert("v".into(), 1.into());
    e.insert(
        "event_id".into(),
        format!("{}-{kind}-{:016x}", args.cli.name(), rand::random::<u64>()).into(),
    );
    e.insert("session_id".into(), p.session_id.clone().into());
    e.insert("ts".into(), now_ms().into());
    e.insert("type".into(), kind.into());
    let agent = args
        .agent
        .clone()
        .unwrap_or_else(|| args.cli.name().to_string());
    e.insert("agent".into(), agent.into());
    if let Some(t) = &args.tenant {
        e.insert("tenant".into(), t.clone().into());
    }
    if let Some(m) = p.model.as_ref().or(args.model.as_ref()) {
        e.insert("model".into(), m.clone().into());
    }
    e
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
#[path = "formats_test.rs"]
mod formats_test;
