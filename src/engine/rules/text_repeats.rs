//! `reasoning.repeat`, `reasoning.variant_repeat`, `reasoning.block_repeat` and
//! `content.repeat` (seed 003), over the request's streamed text: chunks are fed to the
//! incremental detectors as they arrive, so a loop is caught mid-stream.

use super::escalation::Ladder;
use crate::engine::emit::Cx;
use crate::engine::policy::ReasoningPolicy;
use crate::engine::text::{ContentText, Hit, HitKind, ReasoningShape, ReasoningText};
use crate::engine::verdict::Rule;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TextRepeats {
    reasoning: Option<Box<ReasoningText>>,
    content: Option<Box<ContentText>>,
}

fn shape(r: &ReasoningPolicy) -> ReasoningShape {
    ReasoningShape {
        span_min: r.repeat_span_min,
        body_min: r.repeat_body_min,
        variant_count: r.variant_count,
        variant_min_chars: r.variant_min_chars,
        block_window: r.block_repeat_min,
        block_count: r.block_repeat_count,
        tail: r.tail_chars,
    }
}

impl TextRepeats {
    /// Feeds reasoning text; returns the number of hits given up on.
    pub fn on_reasoning(&mut self, text: &str, ladder: &mut Ladder, cx: &mut Cx) -> u32 {
        let enabled = [
            Rule::ReasoningRepeat,
            Rule::VariantRepeat,
            Rule::BlockRepeat,
        ]
        .map(|r| cx.enabled(r));
        if !enabled.iter().any(|e| *e) {
            return 0;
        }
        let stream = self
            .reasoning
            .get_or_insert_with(|| Box::new(ReasoningText::new(shape(&cx.policy.reasoning))));
        let mut hits = Vec::new();
        stream.push_str(text, enabled, &mut hits);
        report(hits, false, ladder, cx)
    }

    pub fn on_content(&mut self, text: &str, ladder: &mut Ladder, cx: &mut Cx) -> u32 {
        if !cx.enabled(Rule::ContentRepeat) {
            return 0;
        }
        let r = &cx.policy.reasoning;
        let stream = self.content.get_or_insert_with(|| {
            Box::new(ContentText::new(
                r.content_repeat_span_min,
                r.repeat_body_min,
                r.tail_chars,
            ))
        });
        let mut hits = Vec::new();
        stream.push_str(text, &mut hits);
        report(hits, true, ladder, cx)
    }

    /// A new model response starts: text on either side of it is not one passage.
    pub fn boundary(&mut self) {
        if let Some(r) = self.reasoning.as_mut() {
            r.boundary();
        }
        if let Some(c) = self.content.as_mut() {
            c.boundary();
        }
    }

    /// The agent made progress since the text so far: a round whose every call brought back
    /// something the request had not seen. Text written before it repeated after it is a
    /// habit of phrasing between steps that move on ("Now I find X. Next, I need to take
    /// it."), not a loop: the detectors start afresh (issue 34).
    pub fn fence(&mut self) {
        if let Some(r) = self.reasoning.as_mut() {
            r.reset();
        }
        if let Some(c) = self.content.as_mut() {
            c.reset();
        }
    }

    /// A response ended: keep the text, free the lookup tables until the next response.
    pub fn compact(&mut self) {
        if let Some(r) = self.reasoning.as_mut() {
            r.compact();
        }
        if let Some(c) = self.content.as_mut() {
            c.compact();
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.reasoning
            .as_ref()
            .map_or(0, |r| r.heap_bytes() + std::mem::size_of::<ReasoningText>())
            + self
                .content
                .as_ref()
                .map_or(0, |c| c.heap_bytes() + std::mem::size_of::<ContentText>())
    }
}

fn report(hits: Vec<Hit>, content: bool, ladder: &mut Ladder, cx: &mut Cx) -> u32 {
    let mut gave_up = 0;
    for hit in hits {
        let (rule, detail, evidence) = match hit.kind {
            HitKind::Tandem if content => (
                Rule::ContentRepeat,
                format!("visible output repeats a {}-char passage", hit.size),
                json!({"span": hit.span, "span_chars": hit.size, "repeats": hit.count}),
            ),
            HitKind::Tandem => (
                Rule::ReasoningRepeat,
                format!("a {}-char passage repeated back to back", hit.size),
                json!({"span": hit.span, "span_chars": hit.size, "repeats": hit.count}),
            ),
            HitKind::Variant => (
                Rule::VariantRepeat,
                format!("the same sentence {} times in a row", hit.count),
                json!({"span": hit.span, "repeats": hit.count}),
            ),
            HitKind::Block => (
                Rule::BlockRepeat,
                format!("a {}-char block seen {} times", hit.size, hit.count),
                json!({"span": hit.span, "window": hit.size, "occurrences": hit.count}),
            ),
        };
        if ladder.escalate(rule, &detail, evidence, cx) {
            gave_up += 1;
        }
    }
    gave_up
}
