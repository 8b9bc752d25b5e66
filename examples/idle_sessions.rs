//! Writes N sessions that each do one thing and then stay idle, as wire events (JSON
//! lines) for `loopguard replay`: the memory per idle session in docs/benchmarks.md is the
//! difference of replay's peak RSS between two such files over the difference of their
//! session counts (what every run keeps alike, the hot and not yet frozen sessions at the
//! end, cancels out).
//!
//!   cargo run --release --example idle_sessions -- short 20000 > short-20k.jsonl
//!   cargo run --release --example idle_sessions -- long 500 > long-500.jsonl
//!
//! `short`: a question, 70 chars of reasoning, one read and its result, the answer (seven
//! events, 20 ms apart; a session starts every 20 ms). `long`: a question, then 19,900
//! chars (~20 KB, under the 20,000-char overflow limit) of loop-free English and Chinese
//! reasoning (`benches/workloads`' healthy text, each session its own) in 256-char chunks
//! 10 ms apart, the response's end; sessions one after another.
//! Both stay within the one-hour session TTL up to 120,000 short or 3,000 long sessions.

#[allow(dead_code)]
#[path = "../benches/workloads/mod.rs"]
mod workloads;

use loopguard::engine::event::{Body, Event, Meta};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::io::Write;

const T0: i64 = 1_767_225_600_000;

struct Session {
    id: String,
    n: u64,
    ts: i64,
    step: i64,
}

impl Session {
    fn event(&mut self, body: Body) -> Event {
        self.n += 1;
        self.ts += self.step;
        let meta = Meta {
            event_id: format!("{}-e{}", self.id, self.n),
            session_id: self.id.clone(),
            ts_ms: self.ts,
            seq: Some(self.n),
            tenant: Some("acme".into()),
            agent: Some("coder".into()),
            model: Some("m1".into()),
        };
        Event { meta, body }
    }
}

fn short(s: &mut Session) -> Vec<Event> {
    workloads::short_request()
        .into_iter()
        .map(|b| s.event(b))
        .collect()
}

fn long(s: &mut Session, text: &str) -> Vec<Event> {
    let mut events = vec![s.event(Body::UserMessage {
        text: "explain the design of the parser in detail".into(),
        limits: Default::default(),
    })];
    let chars: Vec<char> = text.chars().collect();
    for chunk in chars.chunks(256) {
        events.push(s.event(Body::Reasoning {
            turn_id: "t1".into(),
            text: chunk.iter().collect(),
            is_final: false,
        }));
    }
    events.push(s.event(Body::TurnEnd {
        turn_id: "t1".into(),
        usage: None,
    }));
    events
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: idle_sessions short|long SESSIONS";
    let kind = args.get(1).expect(usage).as_str();
    let count: usize = args.get(2).and_then(|n| n.parse().ok()).expect(usage);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut rng = StdRng::seed_from_u64(19);
    let mut events: Vec<Event> = Vec::new();
    for i in 0..count {
        let id = format!("idle-{kind}-{i:06}");
        match kind {
            "short" => {
                let mut s = Session {
                    id,
                    n: 0,
                    ts: T0 + i as i64 * 20,
                    step: 20,
                };
                events.extend(short(&mut s));
            }
            "long" => {
                // 80 events 10 ms apart: under 0.82 s a session, one after another.
                let mut s = Session {
                    id,
                    n: 0,
                    ts: T0 + i as i64 * 820,
                    step: 10,
                };
                let text = workloads::healthy_text(&mut rng, 19_900);
                for e in long(&mut s, &text) {
                    writeln!(out, "{}", e.to_wire()).expect("write");
                }
            }
            _ => panic!("{usage}"),
        }
    }
    // Short sessions overlap (seven events over 140 ms, one starting every 20 ms): in
    // time order, as a fleet would send them.
    events.sort_by_key(|e| e.meta.ts_ms);
    for e in events {
        writeln!(out, "{}", e.to_wire()).expect("write");
    }
}
