//! Fenced code blocks (```` ``` ```` or `~~~` lines) in streamed visible content. Lines that
//! repeat inside a block (generated tests, tables of constants) are code, not chanting: the
//! content detector does not see them, and only a whole block seen again is a repeat. Pure.

use super::{mix, Hit, HitKind, BASE};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Blocks remembered per request to recognise a whole block written again.
const RECENT_BLOCKS: usize = 8;
/// Chars of a line kept to recognise a fence.
const PREFIX: usize = 8;

/// Where one char of content belongs.
pub struct Step {
    /// Prose: the repeat detector should see it.
    pub prose: bool,
    /// A whole code block that repeats an earlier one, when this char closed it.
    pub hit: Option<Hit>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Fences {
    /// Start of the current line (leading spaces dropped), to recognise a fence.
    prefix: String,
    in_block: bool,
    line_hash: u64,
    block_hash: u64,
    block_chars: usize,
    block_head: String,
    recent: VecDeque<u64>,
}

fn is_fence(prefix: &str) -> bool {
    prefix.starts_with("```") || prefix.starts_with("~~~")
}

impl Fences {
    #[inline(always)]
    pub fn push(&mut self, c: char) -> Step {
        if c == '\n' {
            return self.end_line();
        }
        if self.prefix.len() < PREFIX && !(self.prefix.is_empty() && c == ' ') {
            self.prefix.push(c);
        }
        if self.in_block {
            self.line_hash = self.line_hash.wrapping_mul(BASE).wrapping_add(mix(c));
            if self.block_head.len() < 200 {
                self.block_head.push(c);
            }
        }
        Step {
            prose: !self.in_block,
            hit: None,
        }
    }

    /// A line ended: a fence opens or closes a block, a line inside one is hashed into it.
    #[inline(never)]
    fn end_line(&mut self) -> Step {
        let fence = is_fence(&self.prefix);
        self.prefix.clear();
        let line = std::mem::take(&mut self.line_hash);
        if !self.in_block {
            if fence {
                self.in_block = true;
                self.block_hash = 0;
                self.block_chars = 0;
                self.block_head.clear();
            }
            return Step {
                prose: true,
                hit: None,
            };
        }
        if !fence {
            self.block_hash = self.block_hash.wrapping_mul(BASE).wrapping_add(line | 1);
            self.block_chars += 1;
            if self.block_head.len() < 200 {
                self.block_head.push('\n');
            }
            return Step {
                prose: false,
                hit: None,
            };
        }
        self.in_block = false;
        let h = self.block_hash | 1;
        let hit = (self.block_chars > 0 && self.recent.contains(&h)).then(|| Hit {
            kind: HitKind::Tandem,
            span: crate::engine::verdict::clip(self.block_head.trim(), 200),
            size: self.block_head.chars().count(),
            count: 2,
        });
        self.recent.push_back(h);
        if self.recent.len() > RECENT_BLOCKS {
            self.recent.pop_front();
        }
        Step { prose: false, hit }
    }

    pub fn heap_bytes(&self) -> usize {
        self.prefix.capacity() + self.block_head.capacity() + self.recent.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> (String, usize) {
        let mut f = Fences::default();
        let mut prose = String::new();
        let mut hits = 0;
        for c in text.chars() {
            let s = f.push(c);
            if s.prose {
                prose.push(c);
            }
            hits += usize::from(s.hit.is_some());
        }
        (prose, hits)
    }

    #[test]
    fn lines_inside_a_block_are_code_and_a_whole_block_again_is_a_repeat() {
        let block = "```py\nassert f(1)\nassert f(1)\nassert f(1)\n```\n";
        let (prose, hits) = run(&format!("Tests:\n{block}Done."));
        assert_eq!(prose, "Tests:\n```py\nDone.");
        assert_eq!(hits, 0);
        let (_, hits) = run(&format!("{block}and again\n{block}"));
        assert_eq!(hits, 1);
    }
}
