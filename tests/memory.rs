//! Memory per session, for docs/benchmarks.md. Ignored by default; run with
//! `cargo test --release --test memory -- --ignored --nocapture`.
//!
//! Two figures per state: the engine's own estimate (`Engine::session_bytes`) and the heap
//! really held, counted by a global allocator wrapper over 200 sessions in that state
//! (their key, slot and every allocation; the policy is shared); for the idle states also
//! once the engine has frozen them (an event of another session ten minutes later makes it
//! sweep); and the hand-over record's size, binary and the JSON of earlier versions.

#[allow(dead_code)]
#[path = "../benches/workloads/mod.rs"]
mod workloads;

use loopguard::engine::event::{Body, Event, Meta};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::{Engine, Limits};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts live heap bytes (this test binary only; the library stays free of unsafe code).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const T0: i64 = 1_767_225_600_000;

/// Events for one session, in order.
struct Feed {
    id: String,
    n: u64,
    events: Vec<Event>,
}

impl Feed {
    fn new(id: String) -> Self {
        Feed {
            id,
            n: 0,
            events: Vec::new(),
        }
    }

    fn push(&mut self, body: Body) {
        self.n += 1;
        let meta = Meta {
            event_id: format!("{}-e{}", self.id, self.n),
            session_id: self.id.clone(),
            ts_ms: T0 + self.n as i64 * 20,
            seq: Some(self.n),
            tenant: Some("acme".into()),
            agent: Some("coder".into()),
            model: Some("m1".into()),
        };
        self.events.push(Event { meta, body });
    }

    /// A short healthy request: a question, a little reasoning, a read, the answer.
    fn short_request(&mut self) {
        for body in workloads::short_request() {
            self.push(body);
        }
    }

    /// A new request whose response is still reasoning: `chars` chars in 16-char chunks.
    fn reasoning(&mut self, text: &str, chars: usize) {
        self.push(Body::UserMessage {
            text: "now make the error message clearer".into(),
            limits: Default::default(),
        });
        let all: Vec<char> = text.chars().take(chars).collect();
        for chunk in all.chunks(16) {
            self.push(Body::Reasoning {
                turn_id: "t3".into(),
                text: chunk.iter().collect(),
                is_final: false,
            });
        }
    }
}

const SESSIONS: usize = 200;

/// A named way to bring a session into a state.
type State<'a> = (&'static str, Box<dyn Fn(&mut Feed) + 'a>);

/// Builds `SESSIONS` sessions in one state, `hot` of them keeping their text lookup tables,
/// then, with `idle_until` (an event number of another session: 20 ms each), left idle
/// until then (frozen after a minute, deflated if long after ten); returns (estimate, real
/// heap, binary and JSON snapshots) per session.
fn measure(state: &dyn Fn(&mut Feed), hot: usize, idle_until: Option<u64>) -> [usize; 4] {
    let feeds: Vec<Feed> = (0..SESSIONS)
        .map(|i| {
            let mut f = Feed::new(format!("session-{i:06}"));
            state(&mut f);
            f
        })
        .collect();
    let ids: Vec<String> = feeds.iter().map(|f| f.id.clone()).collect();
    let mut events: Vec<Event> = feeds.into_iter().flat_map(|f| f.events).collect();
    // Fed as clones, so the events' own heap is allocated and freed inside the window.
    events.sort_by_key(|e| e.meta.ts_ms);
    let limits = Limits {
        hot_text_sessions: hot,
        ..Limits::default()
    };
    let mut engine = Engine::new(PolicySet::default(), limits);
    let mut out = Vec::new();
    // Warm up: the first session creates shared structures (policy resolution cache).
    let mut warm = Feed::new("warm".into());
    warm.short_request();
    for e in warm.events {
        engine.handle_event(e, &mut out);
    }
    engine.forget("warm");
    let before = LIVE.load(Ordering::Relaxed);
    for e in &events {
        engine.handle_event(e.clone(), &mut out);
        out.clear();
    }
    if let Some(n) = idle_until {
        let mut tick = Feed::new("tick".into());
        tick.n = n;
        tick.push(Body::Compaction);
        engine.handle_event(tick.events.pop().unwrap(), &mut out);
        engine.forget("tick");
        assert_eq!(engine.frozen_count(), SESSIONS);
    }
    let real = (LIVE.load(Ordering::Relaxed) - before) as usize / SESSIONS;
    let estimate = ids
        .iter()
        .map(|id| engine.session_bytes(id).expect("kept"))
        .sum::<usize>()
        / SESSIONS;
    let snapshot = |f: &dyn Fn(&str) -> Option<Vec<u8>>| {
        ids.iter()
            .map(|id| f(id).expect("kept").len())
            .sum::<usize>()
            / SESSIONS
    };
    [
        estimate,
        real,
        snapshot(&|id| engine.snapshot(id)),
        snapshot(&|id| engine.snapshot_json(id)),
    ]
}

#[test]
#[ignore = "a measurement for docs/benchmarks.md, not a check"]
fn bytes_per_session() {
    let text = workloads::healthy_text(&mut StdRng::seed_from_u64(3), 24_000);
    let states: [State; 4] = [
        (
            "idle after a short request",
            Box::new(|f| f.short_request()),
        ),
        (
            "mid-reasoning, 8 KB",
            Box::new(|f| {
                f.short_request();
                f.reasoning(&text, 8 * 1024);
            }),
        ),
        (
            "mid-reasoning, 20 KB",
            Box::new(|f| {
                f.short_request();
                f.reasoning(&text, 20 * 1024);
            }),
        ),
        (
            "idle after 20 KB of reasoning",
            Box::new(|f| {
                f.short_request();
                f.reasoning(&text, 20 * 1024);
                f.push(Body::TurnEnd {
                    turn_id: "t3".into(),
                    usage: None,
                });
            }),
        ),
    ];
    println!(
        "| state | text tables | session_bytes | real heap | binary snapshot | JSON snapshot |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for (name, state) in &states {
        let idle = name.starts_with("idle");
        for (tables, hot, idle_until) in [
            ("kept (hot)", SESSIONS, None),
            ("freed (cold)", 0, None),
            ("frozen (idle 60 s)", 0, Some(5_000)),
            ("frozen, idle 20 min (deflated if long)", 0, Some(60_000)),
        ] {
            if idle_until.is_some() && !idle {
                continue;
            }
            let [estimate, real, binary, json] = measure(state.as_ref(), hot, idle_until);
            println!("| {name} | {tables} | {estimate} | {real} | {binary} | {json} |");
        }
    }
}
