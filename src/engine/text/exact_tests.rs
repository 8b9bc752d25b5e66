//! The anchored detectors against their definitions, by proptest: the winnowing against a
//! window-by-window scan, the tight repeat and the block repeat against brute force over
//! every prefix, on texts built from a few repeated pieces so that repeats are common, and
//! on texts of long runs of one char.

use super::anchors::Winnow;
use super::{BlockRepeat, Tandem};
use proptest::prelude::*;

/// Texts of either kind below.
fn texts() -> impl Strategy<Value = Vec<char>> {
    prop_oneof![pieces(), runs()]
}

/// Texts made of pieces drawn from a small pool (so pieces recur, back to back or apart),
/// over a small alphabet with spaces and punctuation.
fn pieces() -> impl Strategy<Value = Vec<char>> {
    let piece = proptest::collection::vec(
        prop::sample::select(vec!['a', 'b', 'c', 'd', ' ', '.', 'é']),
        1..30,
    );
    (
        proptest::collection::vec(piece, 1..6),
        proptest::collection::vec(0usize..6, 1..40),
    )
        .prop_map(|(pool, picks)| {
            picks
                .iter()
                .flat_map(|i| pool[i % pool.len()].clone())
                .collect()
        })
}

/// Texts of long runs of one char (`aaaa…`, spaces, `====`) between short separators: the
/// k-gram of a run is the same all along it, the case that crowds the earlier anchors of
/// a k-gram.
fn runs() -> impl Strategy<Value = Vec<char>> {
    let run = (
        prop::sample::select(vec!['a', ' ', '=']),
        5usize..60,
        prop::sample::select(vec!['1', '2', 'x', 'b']),
    );
    proptest::collection::vec(run, 1..40).prop_map(|runs| {
        runs.into_iter()
            .flat_map(|(c, n, sep)| std::iter::repeat_n(c, n).chain([sep]))
            .collect()
    })
}

/// The anchors by definition: the newest smallest hash of every whole window of `w`
/// k-grams, each position once, in the order windows pick them.
fn winnow_by_definition(chars: &[char], k: usize, w: usize) -> Vec<u64> {
    let probe = |i: usize| {
        // The same hash as `Winnow`, from scratch over the k chars ending at `i`.
        let mut win = Winnow::new(k, 1);
        chars[i + 1 - k..=i]
            .iter()
            .enumerate()
            .filter_map(|(j, c)| win.push(j as u64, *c))
            .last()
            .expect("a whole k-gram")
            .1
    };
    let hashes: Vec<(u64, usize)> = (k - 1..chars.len()).map(|i| (probe(i), i)).collect();
    let mut out: Vec<u64> = Vec::new();
    for window in hashes.windows(w) {
        let min = window.iter().map(|(h, _)| *h).min().unwrap();
        let at = window.iter().rev().find(|(h, _)| *h == min).unwrap().1 as u64;
        if out.last() != Some(&at) {
            out.push(at);
        }
    }
    out
}

/// The char count after which brute force first sees a square of half `>= span` with at
/// least `body` body chars in the half.
fn first_tandem(chars: &[char], span: usize, body: usize) -> Option<usize> {
    (1..=chars.len()).find(|&i| {
        (span..=i / 2).any(|l| {
            chars[i - 2 * l..i - l] == chars[i - l..i]
                && chars[i - l..i]
                    .iter()
                    .filter(|c| super::is_body(**c))
                    .count()
                    >= body
        })
    })
}

/// The char count after which some `w`-char window has been seen `count` times.
fn first_block(chars: &[char], w: usize, count: usize) -> Option<usize> {
    let mut seen = std::collections::HashMap::<&[char], usize>::new();
    (w..=chars.len()).find(|&i| {
        let n = seen.entry(&chars[i - w..i]).or_default();
        *n += 1;
        *n >= count
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn winnowing_picks_what_its_definition_picks(chars in texts(), k in 1usize..9, w in 1usize..12) {
        let mut win = Winnow::new(k, w);
        let got: Vec<u64> = chars
            .iter()
            .enumerate()
            .filter_map(|(i, c)| win.push(i as u64, *c).map(|a| a.0))
            .collect();
        prop_assert_eq!(got, winnow_by_definition(&chars, k, w));
    }

    #[test]
    fn tight_repeats_are_found_where_brute_force_finds_them(
        chars in texts(),
        span in 4usize..30,
        body in 1usize..6,
    ) {
        let mut t = Tandem::new(span, body, 1 << 16);
        let got = chars.iter().position(|c| t.push(*c).is_some()).map(|i| i + 1);
        prop_assert_eq!(got, first_tandem(&chars, span, body));
    }

    #[test]
    fn block_repeats_are_found_where_brute_force_finds_them(
        chars in texts(),
        window in 4usize..60,
        count in 2usize..5,
    ) {
        let mut b = BlockRepeat::new(window, count, 1 << 16);
        let got = chars.iter().position(|c| b.push(*c).is_some()).map(|i| i + 1);
        prop_assert_eq!(got, first_block(&chars, window, count));
    }

    #[test]
    fn derived_tables_rebuilt_mid_text_change_nothing(chars in texts(), cut in 0usize..400) {
        let shape = super::ReasoningShape {
            span_min: 8,
            body_min: 2,
            variant_count: 3,
            variant_min_chars: 4,
            block_window: 12,
            block_count: 3,
            tail: 64,
        };
        let text: String = chars.iter().collect();
        let cut = chars.len().min(cut);
        let mut straight = super::ReasoningText::new(shape);
        let mut expected = Vec::new();
        straight.push_str(&text, [true; 3], &mut expected);
        let mut split = super::ReasoningText::new(shape);
        let mut got = Vec::new();
        split.push_str(&chars[..cut].iter().collect::<String>(), [true; 3], &mut got);
        split.compact();
        split.push_str(&chars[cut..].iter().collect::<String>(), [true; 3], &mut got);
        prop_assert_eq!(got, expected);
    }
}
