//! A steer given before a Gemini tool call, kept for that call's `AfterTool` (Gemini's
//! `BeforeTool` has no field the model reads on an allowed call). One small file per call
//! under the user's runtime directory, read and removed by the `AfterTool` hook.

use super::moment::{Decision, Moment, Payload};
use std::path::PathBuf;
use xxhash_rust::xxh3::xxh3_64;

fn path(p: &Payload, call_id: &str) -> PathBuf {
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join("loopguard-hook");
    let key = format!("{}\u{0}{call_id}", p.session_id);
    dir.join(format!("{:016x}.steer", xxh3_64(key.as_bytes())))
}

/// Before the call: a steer is stored and the call allowed. After it: a stored steer is
/// joined to whatever the result's own check said.
pub fn across_the_call(p: &Payload, decision: Decision) -> Decision {
    match (&p.moment, decision) {
        (Moment::BeforeTool { call_id, .. }, Decision::Context(m)) => {
            let file = path(p, call_id);
            let stored = file
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| std::fs::write(&file, &m));
            if let Err(e) = stored {
                eprintln!("loopguard hook gemini: the steer could not be kept for after the call ({e}): {m}");
            }
            Decision::Allow
        }
        (Moment::AfterTool { call_id, .. }, d) => {
            let file = path(p, call_id);
            let Ok(carried) = std::fs::read_to_string(&file) else {
                return d;
            };
            let _ = std::fs::remove_file(&file);
            match d {
                Decision::Allow => Decision::Context(carried),
                Decision::Context(m) if m != carried => {
                    Decision::Context(format!("{carried}\n{m}"))
                }
                other => other,
            }
        }
        (_, d) => d,
    }
}
