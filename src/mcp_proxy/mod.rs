//! `loopguard mcp-proxy -- <server command...>`: a stdio MCP proxy between any MCP client and
//! server. Every `tools/call` is checked with the local edge before it is forwarded: a block
//! answers it with the tool's error result (`isError: true`) carrying the verdict's message,
//! an abort does the same and then ends the session (the server is stopped, the streams
//! closed); each result is published as a `tool_result` (off the response's path, before
//! the next call), and a steer reaches the model as a text block added to the call's result
//! (a steer on a result, read from the session's verdict stream, to the next one). Every other message passes through byte
//! for byte (docs/decisions.md (ef)).

mod messages;

use crate::edge::{EdgeAnswer, EdgeClient};
use crate::hook::Decision;
use messages::{CallFrame, Inbound};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct McpProxyArgs {
    /// The local edge.
    #[arg(long, env = "LOOPGUARD_EDGE", default_value = crate::edge::DEFAULT_URL)]
    pub edge: String,
    /// The edge's token file (an edge started with `--token-file`): its token is sent as
    /// `Authorization: Bearer`.
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_EDGE_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// The session these calls belong to (default: a new id per proxy process, which is one
    /// MCP session on stdio).
    #[arg(long, env = "LOOPGUARD_SESSION")]
    pub session: Option<String>,
    #[arg(long, env = "LOOPGUARD_TENANT")]
    pub tenant: Option<String>,
    /// The agent's name on its events (default `mcp`).
    #[arg(long, env = "LOOPGUARD_AGENT", default_value = "mcp")]
    pub agent: String,
    #[arg(long, env = "LOOPGUARD_MODEL")]
    pub model: Option<String>,
    /// The longest a call waits for the guard (ms); then it is forwarded and counted.
    #[arg(long, default_value_t = 1000)]
    pub deadline_ms: u64,
    /// The MCP server to run, after `--`.
    #[arg(last = true, required = true)]
    pub server: Vec<String>,
}

/// What both directions share.
struct Proxy {
    args: McpProxyArgs,
    session: String,
    edge: EdgeClient,
    out: Mutex<std::io::Stdout>,
    /// Forwarded `tools/call` requests by JSON-RPC id, until their response.
    calls: Mutex<HashMap<String, CallFrame>>,
    /// Results handed to the publisher and not yet acknowledged: the next call waits for
    /// them, so the guard always sees call, result, call.
    results_in_flight: (Mutex<u32>, Condvar),
    results: Mutex<std::sync::mpsc::Sender<Value>>,
    /// What the guard said on results since the last response: added to the next one.
    notes: Mutex<Vec<String>>,
    /// The ids of the result events published: their verdicts come on the session's stream.
    result_ids: Mutex<std::collections::HashSet<String>>,
    server_in: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
}

/// Runs the server and relays until either side closes; the proxy's exit code.
pub fn run(args: McpProxyArgs) -> std::process::ExitCode {
    let (program, rest) = args.server.split_first().expect("clap requires a command");
    let mut child = match Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("loopguard mcp-proxy: cannot start `{program}`: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let server_out = child.stdout.take().expect("piped");
    let server_in = child.stdin.take();
    let session = args
        .session
        .clone()
        .unwrap_or_else(|| format!("mcp-{:016x}", rand::random::<u64>()));
    let (results, judged) = std::sync::mpsc::channel();
    let (edge, unread) = EdgeClient::for_caller(&args.edge, args.token_file.as_deref());
    if let Some(e) = unread {
        eprintln!("loopguard mcp-proxy: {e}; asking the edge without its token");
    }
    let proxy = Arc::new(Proxy {
        edge,
        args,
        session,
        out: Mutex::new(std::io::stdout()),
        calls: Mutex::new(HashMap::new()),
        results_in_flight: (Mutex::new(0), Condvar::new()),
        results: Mutex::new(results),
        notes: Mutex::new(Vec::new()),
        result_ids: Mutex::new(std::collections::HashSet::new()),
        server_in: Mutex::new(server_in),
        child: Mutex::new(child),
    });
    let publisher = Arc::clone(&proxy);
    std::thread::spawn(move || publisher.publish_results(judged));
    let follower = Arc::clone(&proxy);
    std::thread::spawn(move || follower.follow_result_verdicts());
    let back = Arc::clone(&proxy);
    let from_server = std::thread::spawn(move || back.server_to_client(server_out));
    proxy.client_to_server();
    // The client closed: the server gets EOF and is left a moment to exit by itself.
    drop(proxy.server_in.lock().unwrap().take());
    let _ = from_server.join();
    let status = proxy.child.lock().unwrap().wait();
    match status.ok().and_then(|s| s.code()) {
        Some(0) | None => std::process::ExitCode::SUCCESS,
        Some(c) => std::process::ExitCode::from(u8::try_from(c).unwrap_or(1)),
    }
}

impl Proxy {
    fn deadline(&self) -> Duration {
        Duration::from_millis(self.args.deadline_ms)
    }

    fn say(&self, note: &str) {
        eprintln!("loopguard mcp-proxy: {note}");
    }

    fn to_client(&self, line: &str) {
        let mut out = self.out.lock().unwrap();
        // A client gone: the relay ends when its stdin closes.
        let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    }

    fn to_server(&self, line: &str) -> bool {
        let mut server = self.server_in.lock().unwrap();
        match server.as_mut() {
            Some(s) => writeln!(s, "{line}").and_then(|_| s.flush()).is_ok(),
            None => false,
        }
    }

    fn check(&self, event: &Value) -> Decision {
        match self.edge.check(event, self.deadline()) {
            EdgeAnswer::Verdict {
                action, message, ..
            } => Decision::from_action(&action, message, &messages::moment_of(event)),
            EdgeAnswer::None => Decision::Allow,
            EdgeAnswer::FailOpen { why } => {
                self.say(&format!("forwarded unguarded: {why}"));
                Decision::Allow
            }
            EdgeAnswer::Invalid { why } => {
                self.say(&format!("the edge refused the event: {why}; forwarded"));
                Decision::Allow
            }
        }
    }

    fn client_to_server(&self) {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            let frame = match messages::inbound(&line) {
                Inbound::ToolCall(frame) => frame,
                Inbound::Other => {
                    if !self.to_server(&line) {
                        break;
                    }
                    continue;
                }
            };
            let event = frame.call_event(self);
            self.results_judged();
            match self.check(&event) {
                Decision::Deny(m) => self.to_client(&messages::refused(&frame.id, &m)),
                Decision::Stop(m) => {
                    self.to_client(&messages::refused(&frame.id, &m));
                    self.end_session(&m);
                    return;
                }
                decision => {
                    let steer = match decision {
                        Decision::Context(m) => Some(m),
                        _ => None,
                    };
                    let id = frame.id_key();
                    self.calls
                        .lock()
                        .unwrap()
                        .insert(id, CallFrame { steer, ..frame });
                    if !self.to_server(&line) {
                        break;
                    }
                }
            }
        }
    }

    fn server_to_client(&self, server_out: std::process::ChildStdout) {
        for line in BufReader::new(server_out).lines() {
            let Ok(line) = line else { break };
            let call =
                messages::response_id(&line).and_then(|id| self.calls.lock().unwrap().remove(&id));
            let Some(call) = call else {
                self.to_client(&line);
                continue;
            };
            let (mut response, event) = call.result_event(self, &line);
            // The result is published off the response's path: the client has its answer now,
            // and a steer on the result (from the session's stream) comes with the next one.
            *self.results_in_flight.0.lock().unwrap() += 1;
            if self.results.lock().unwrap().send(event).is_err() {
                *self.results_in_flight.0.lock().unwrap() -= 1;
            }
            let mut notes: Vec<String> = call.steer.iter().cloned().collect();
            notes.append(&mut self.notes.lock().unwrap());
            if notes.is_empty() {
                self.to_client(&line);
            } else {
                messages::add_text(&mut response, &notes.join("\n"));
                self.to_client(&response.to_string());
            }
        }
    }

    /// The result publisher: each result published in order (the next call waits for the
    /// broker's acknowledgement, a few ms, not for the guard's judgement).
    fn publish_results(&self, results: std::sync::mpsc::Receiver<Value>) {
        for event in results {
            if let Some(id) = event["event_id"].as_str() {
                self.result_ids.lock().unwrap().insert(id.to_string());
            }
            if let Err(e) = self.edge.publish(&event, self.deadline()) {
                self.say(&format!("a tool result was not recorded: {e}"));
            }
            let (count, changed) = &self.results_in_flight;
            *count.lock().unwrap() -= 1;
            changed.notify_all();
        }
    }

    /// The session's verdicts, from the edge's stream: those on results (a steer on a
    /// repeated error) go with the next response, an abort ends the session. Verdicts on
    /// calls are the checks' answers and are left to them.
    fn follow_result_verdicts(&self) {
        self.edge.follow_verdicts(&self.session, |v| {
            let on_result = v["event_id"]
                .as_str()
                .is_some_and(|id| self.result_ids.lock().unwrap().remove(id));
            if !on_result || v["enforce"] == false {
                return true;
            }
            let message = v["message"].as_str().unwrap_or_default().to_string();
            let action = v["action"].as_str().unwrap_or_default();
            let after = messages::moment_of(&json!({"type": "tool_result"}));
            match Decision::from_action(action, message, &after) {
                Decision::Stop(m) => self.end_session(&m),
                Decision::Context(m) | Decision::Deny(m) => self.notes.lock().unwrap().push(m),
                Decision::Allow => {}
            }
            true
        });
    }

    /// Waits (at most the deadline) until every result sent is acknowledged.
    fn results_judged(&self) {
        let (count, changed) = &self.results_in_flight;
        let guard = count.lock().unwrap();
        let (_count, waited) = changed
            .wait_timeout_while(guard, self.deadline(), |n| *n > 0)
            .unwrap();
        if waited.timed_out() {
            self.say(
                "a result was not judged within the deadline; the next call is checked anyway",
            );
        }
    }

    /// An abort: the server is stopped and the proxy exits, which closes the client's
    /// transport: the only way stdio has to end a session.
    fn end_session(&self, message: &str) {
        self.say(&format!(
            "session {} aborted by the guard: {message}",
            self.session
        ));
        drop(self.server_in.lock().unwrap().take());
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        std::process::exit(0);
    }
}
