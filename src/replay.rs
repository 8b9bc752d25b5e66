//! `loopguard replay`: runs the engine over a JSONL file of recorded events and writes one
//! verdict per line. The same engine as the service; the output is identical every run.

use crate::cost_summary::CostSummary;
use crate::engine::event::{Body, Event, EVENT_TYPES};
use crate::engine::verdict::{Action, Rule};
use crate::engine::{Engine, Handled};
use crate::service::records::marker::Marker;
use crate::service::records::policy_change::PolicyTimeline;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReplayError {
    #[error("line {line}: {reason}")]
    Malformed { line: usize, reason: String },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// What a replay saw.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    pub lines: usize,
    pub events: usize,
    pub sessions: BTreeSet<String>,
    pub malformed: Vec<(usize, String)>,
    pub duplicates: usize,
    pub unknown_types: usize,
    /// The lines whose event type this guard does not know, with the type (the first 1,000).
    pub unknown: Vec<(usize, String)>,
    pub verdicts: BTreeMap<(Rule, Action), usize>,
}

impl Summary {
    pub fn total_verdicts(&self) -> usize {
        self.verdicts.values().sum()
    }

    /// A human summary for stderr.
    pub fn render(&self) -> String {
        let mut s = format!(
            "replayed {} events from {} lines: {} sessions, {} verdicts, {} malformed, {} duplicates, {} unknown types\n",
            self.events,
            self.lines,
            self.sessions.len(),
            self.total_verdicts(),
            self.malformed.len(),
            self.duplicates,
            self.unknown_types
        );
        for ((rule, action), n) in &self.verdicts {
            s.push_str(&format!(
                "  {:<28} {:<6} {n}\n",
                rule.as_str(),
                action.as_str()
            ));
        }
        for (line, reason) in self.malformed.iter().take(20) {
            s.push_str(&format!("  malformed line {line}: {reason}\n"));
        }
        for (line, kind) in self.unknown.iter().take(20) {
            s.push_str(&format!("  line {line}, skipped: {}\n", unknown_type(kind)));
        }
        s
    }
}

/// How a replay reads and what it writes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options {
    /// Stop at the first malformed line.
    pub strict: bool,
    /// Stop at the first event of a type this guard does not know (`--strict` sets both:
    /// in a recorded file such a type is more often a typo than a newer runtime's).
    pub strict_types: bool,
    /// After each line's verdicts, the judged-through marker the service would write: the
    /// file is read as partition 0, the line numbered n at offset n - 1 (no `emitted_at`,
    /// so the output stays the same every run).
    pub judged: bool,
    /// Instead of the verdicts, what loops cost (`cost_summary`): the engine must track
    /// spending (`Engine::track_spending`).
    pub summary: bool,
}

/// Replays `input` through `engine`, writing verdicts to `out` as JSON lines.
/// `progress` is called every 10 000 lines with the count so far.
pub fn run(
    engine: &mut Engine,
    input: impl BufRead,
    out: impl Write,
    opts: Options,
    progress: impl FnMut(usize),
) -> Result<Summary, ReplayError> {
    run_with_changes(
        engine,
        input,
        out,
        opts,
        &PolicyTimeline::default(),
        progress,
    )
}

/// As `run`, with the policy changes the service recorded for the partition the file holds
/// (line n at offset n - 1): before each line, the policy in force at its offset.
pub fn run_with_changes(
    engine: &mut Engine,
    input: impl BufRead,
    out: impl Write,
    opts: Options,
    changes: &PolicyTimeline,
    progress: impl FnMut(usize),
) -> Result<Summary, ReplayError> {
    run_as(engine, input, out, opts, changes, None, progress)
}

/// As `run_with_changes`, the file read as tenant `writer`'s own events topic when given
/// (`kafka.events_topic_template`): an event naming no tenant is `writer`'s, one naming
/// another is malformed (`tenant_mismatch`), as the service judges that topic.
pub fn run_as(
    engine: &mut Engine,
    input: impl BufRead,
    mut out: impl Write,
    opts: Options,
    changes: &PolicyTimeline,
    writer: Option<&str>,
    mut progress: impl FnMut(usize),
) -> Result<Summary, ReplayError> {
    let strict = opts.strict;
    let mut summary = Summary::default();
    let mut cost = CostSummary::default();
    let mut verdicts = Vec::new();
    for (i, line) in input.split(b'\n').enumerate() {
        let line = line?;
        let number = i + 1;
        summary.lines = number;
        if number % 10_000 == 0 {
            progress(number);
        }
        if let Some(set) = changes.in_force(i as i64) {
            if set.version() != engine.policy_version() {
                engine.set_policies(set.clone());
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let decoded = Event::decode(&line).map_err(|e| e.to_string());
        let event = match decoded.and_then(|mut e| match writer {
            Some(w) => crate::service::records::dead_letter::written_by(&mut e, w)
                .map(|()| e)
                .map_err(|why| format!("tenant_mismatch: {why}")),
            None => Ok(e),
        }) {
            Ok(e) => e,
            Err(e) => {
                if strict {
                    return Err(ReplayError::Malformed {
                        line: number,
                        reason: e.to_string(),
                    });
                }
                summary.malformed.push((number, e.to_string()));
                write_marker(&mut out, opts.judged, number)?;
                continue;
            }
        };
        if let Body::Unknown { kind } = &event.body {
            // Skipped and counted, as the service does (a newer runtime's type); named here,
            // since in a recorded file it is more often a typo.
            if opts.strict_types {
                return Err(ReplayError::Malformed {
                    line: number,
                    reason: unknown_type(kind),
                });
            }
            if summary.unknown.len() < 1_000 {
                summary.unknown.push((number, kind.clone()));
            }
        }
        summary.sessions.insert(event.meta.session_id.clone());
        verdicts.clear();
        match engine.handle_event(event, &mut verdicts) {
            Handled::Duplicate => summary.duplicates += 1,
            Handled::UnknownType => summary.unknown_types += 1,
            Handled::Processed | Handled::SessionEnded => summary.events += 1,
        }
        for s in engine.take_spending() {
            cost.add(&s);
        }
        for v in &verdicts {
            *summary.verdicts.entry((v.rule, v.action)).or_default() += 1;
            if !opts.summary {
                serde_json::to_writer(&mut out, v).map_err(std::io::Error::from)?;
                out.write_all(b"\n")?;
            }
        }
        write_marker(&mut out, opts.judged, number)?;
    }
    if opts.summary {
        engine.end_open_loops();
        for s in engine.take_spending() {
            cost.add(&s);
        }
        out.write_all(cost.render().as_bytes())?;
    }
    out.flush()?;
    Ok(summary)
}

/// What an event of an unknown type is called in a replay's report.
fn unknown_type(kind: &str) -> String {
    format!(
        "unknown event type `{kind}` (known: {})",
        EVENT_TYPES.join(", ")
    )
}

/// The marker covering every line up to `number`, when markers are asked for.
fn write_marker(out: &mut impl Write, judged: bool, number: usize) -> std::io::Result<()> {
    if judged {
        out.write_all(&Marker::new(0, number as i64, None).to_json())?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
