//! Detector tests: a brute-force oracle over every prefix must agree with the incremental
//! detectors on the real loops, whatever the chunking, and across a snapshot/restore.

use super::*;

const LOOP1: &str = include_str!("../../../tests/data/real/dsh-thinking-loop-guard/real_loop.txt");
const LOOP2: &str = include_str!("../../../tests/data/real/dsh-thinking-loop-guard/real_loop2.txt");
const LOOP3: &str = include_str!("../../../tests/data/real/dsh-thinking-loop-guard/real_loop3.txt");

fn shape() -> ReasoningShape {
    ReasoningShape {
        span_min: 24,
        body_min: 5,
        variant_count: 3,
        variant_min_chars: 4,
        block_window: 100,
        block_count: 3,
        tail: 8192,
    }
}

/// Char index (exclusive end) at which a brute-force scan first sees a tandem repeat.
fn oracle_tandem(chars: &[char], span: usize, body: usize) -> Option<usize> {
    (1..=chars.len()).find(|&i| {
        (span..=i / 2).any(|l| {
            chars[i - 2 * l..i - l] == chars[i - l..i]
                && chars[i - l..i].iter().filter(|c| is_body(**c)).count() >= body
        })
    })
}

/// Char index (exclusive end, in raw text) at which some normalized window occurs `count` times.
fn oracle_block(chars: &[char], w: usize, count: usize) -> Option<usize> {
    let mut norm = Vec::new();
    let mut seen = std::collections::HashMap::<Vec<char>, usize>::new();
    for (i, c) in chars.iter().enumerate() {
        if !is_body(*c) {
            continue;
        }
        norm.push(*c);
        if norm.len() >= w {
            let n = seen.entry(norm[norm.len() - w..].to_vec()).or_default();
            *n += 1;
            if *n >= count {
                return Some(i + 1);
            }
        }
    }
    None
}

fn first_hit(text: &str, chunk: usize) -> Option<(usize, Hit)> {
    let mut r = ReasoningText::new(shape());
    let chars: Vec<char> = text.chars().collect();
    let mut fed = 0;
    for piece in chars.chunks(chunk) {
        let mut hits = Vec::new();
        for c in piece {
            r.push_str(&c.to_string(), [true; 3], &mut hits);
            fed += 1;
            if let Some(h) = hits.pop() {
                return Some((fed, h));
            }
        }
    }
    None
}

#[test]
fn real_loops_are_caught_exactly_where_the_oracle_says() {
    for text in [LOOP1, LOOP2, LOOP3] {
        let chars: Vec<char> = text.chars().collect();
        let t = oracle_tandem(&chars, 24, 5);
        let b = oracle_block(&chars, 100, 3);
        let expected = [t, b].into_iter().flatten().min().expect("a real loop");
        let (at, hit) = first_hit(text, 8).expect("flagged");
        assert_eq!(at, expected, "hit {hit:?}");
        assert!(at < chars.len() * 9 / 10, "flagged well before the end");
    }
}

#[test]
fn first_block_of_real_loop_is_healthy() {
    let chars: Vec<char> = LOOP1.chars().collect();
    let block: String = chars[..1362].iter().collect();
    assert_eq!(first_hit(&block, 8), None);
    let mut r = ReasoningText::new(shape());
    let mut hits = Vec::new();
    r.push_str(&block, [true; 3], &mut hits);
    assert!(hits.is_empty());
}

#[test]
fn chunking_never_changes_the_hits() {
    let all = |text: &str, chunk: usize| {
        let mut r = ReasoningText::new(shape());
        let mut hits = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(chunk) {
            r.push_str(&piece.iter().collect::<String>(), [true; 3], &mut hits);
        }
        hits
    };
    let text = format!("{LOOP1}{LOOP2}{LOOP3}{LOOP1}");
    let whole = all(&text, usize::MAX / 2);
    assert!(whole.len() >= 4, "{}", whole.len());
    for chunk in [1, 7, 8, 13, 32, 500] {
        assert_eq!(all(&text, chunk), whole, "chunk {chunk}");
    }
}

#[test]
fn snapshot_and_restore_mid_stream_changes_nothing() {
    let text = format!("{LOOP2}{LOOP1}");
    let chars: Vec<char> = text.chars().collect();
    for cut in [100, 700, 1500, 3000] {
        let mut straight = ReasoningText::new(ReasoningShape {
            tail: 512,
            ..shape()
        });
        let mut expected = Vec::new();
        straight.push_str(&text, [true; 3], &mut expected);

        let mut first = ReasoningText::new(ReasoningShape {
            tail: 512,
            ..shape()
        });
        let mut got = Vec::new();
        first.push_str(
            &chars[..cut].iter().collect::<String>(),
            [true; 3],
            &mut got,
        );
        let json = serde_json::to_string(&first).unwrap();
        let mut second: ReasoningText = serde_json::from_str(&json).unwrap();
        second.rebuild();
        second.push_str(
            &chars[cut..].iter().collect::<String>(),
            [true; 3],
            &mut got,
        );
        assert_eq!(got, expected, "cut at {cut}");
    }
}

#[test]
fn variant_repeat_of_the_seed_example() {
    let mut r = ReasoningText::new(shape());
    let mut hits = Vec::new();
    r.push_str("继续分析！", [true; 3], &mut hits);
    r.push_str("继续分析？", [true; 3], &mut hits);
    assert!(hits.is_empty());
    r.push_str("继续分析。", [true; 3], &mut hits);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].kind, HitKind::Variant);
}

#[test]
fn punctuation_only_repeats_are_not_loops() {
    let mut r = ReasoningText::new(shape());
    let mut hits = Vec::new();
    r.push_str(&"| --- ".repeat(40), [true; 3], &mut hits);
    r.push_str(&"=".repeat(300), [true; 3], &mut hits);
    assert!(hits.is_empty(), "{hits:?}");
}

#[test]
fn short_period_chanting_needs_a_span_of_min_length() {
    let mut c = ContentText::new(100, 5, 8192);
    let mut hits = Vec::new();
    let chunk = "Thinking... Done. ";
    let mut fed = 0;
    while hits.is_empty() {
        c.push_str(chunk, &mut hits);
        fed += 1;
    }
    // 17-char period, 100-char span: 6 periods twice = 12 chunks.
    assert_eq!(fed, 12);
    assert!(hits[0].size >= 100);
}

#[test]
fn tail_bounds_memory() {
    let mut r = ReasoningText::new(ReasoningShape {
        tail: 1024,
        ..shape()
    });
    let mut hits = Vec::new();
    let mut s = String::new();
    for i in 0..20_000u32 {
        s.push_str(&format!("{i} is a number, "));
    }
    r.push_str(&s, [true; 3], &mut hits);
    assert!(r.heap_bytes() < 200_000, "{}", r.heap_bytes());
}
