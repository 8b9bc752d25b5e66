//! `expect.required_tool` (seed 000): when the request requires a tool (intent rules) and
//! a response ends without any tool call while it is still missing -> steer a retry, at most
//! 2 times; then one warning with `prefix_warning` for the final answer.

use crate::engine::emit::{Cx, Finding};
use crate::engine::intents::{self, Intent};
use crate::engine::verdict::{Action, Directives, Rule};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::VecDeque;

/// Messages kept for context, each clipped to this many chars.
const CONTEXT_CHARS: usize = 2000;

/// The session's recent messages (user, assistant, tool results), for contextual intents.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RecentMessages {
    messages: VecDeque<String>,
}

impl RecentMessages {
    pub fn push(&mut self, text: &str, keep: usize) {
        let typed = intents::typed_text(text);
        self.messages
            .push_back(crate::engine::verdict::clip(&typed, CONTEXT_CHARS));
        while self.messages.len() > keep {
            self.messages.pop_front();
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.messages.capacity() * std::mem::size_of::<String>()
            + self.messages.iter().map(String::capacity).sum::<usize>()
    }

    pub fn as_slice(&mut self) -> &[String] {
        self.messages.make_contiguous()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RequiredTool {
    /// Index of the intent this request carries.
    intent: Option<usize>,
    satisfied: bool,
    retries: u32,
    done: bool,
}

impl RequiredTool {
    /// A user message starts the request: resolve its intent against the prior context.
    pub fn on_user_message(text: &str, context: &mut RecentMessages, cx: &Cx) -> RequiredTool {
        let list = &cx.policy.expect.intents;
        let found = intents::resolve(list, &intents::typed_text(text), context.as_slice());
        RequiredTool {
            intent: found.and_then(|f| list.iter().position(|i| std::ptr::eq(i, f))),
            ..Default::default()
        }
    }

    pub fn on_call(&mut self, tool: &str, args: &Value, cx: &Cx) {
        if let Some(intent) = self.intent(cx) {
            if intent.satisfied_by(tool, args) {
                self.satisfied = true;
            }
        }
    }

    fn intent<'p>(&self, cx: &Cx<'p>) -> Option<&'p Intent> {
        self.intent.and_then(|i| cx.policy.expect.intents.get(i))
    }

    /// A response ended; `made_calls` says whether it called any tool.
    pub fn on_turn_end(&mut self, made_calls: bool, cx: &mut Cx) {
        let Some(intent) = self.intent(cx) else {
            return;
        };
        if self.satisfied || self.done || made_calls {
            return;
        }
        self.retries += 1;
        let args = Value::Object(intent.args.clone());
        let evidence = json!({"intent": intent.name, "tool": intent.tool, "args": args, "retry": self.retries});
        let call = if intent.args.is_empty() {
            format!("`{}`", intent.tool)
        } else {
            format!("`{}` with {}", intent.tool, args)
        };
        if self.retries <= cx.policy.expect.max_retries {
            let msg = format!("This request needs real data: call {call} before answering. Do not answer from memory.");
            cx.emit(
                Finding::new(Rule::RequiredTool, Action::Steer, msg, evidence)
                    .attempt(self.retries),
            );
        } else {
            self.done = true;
            let warning = format!("Note: this answer was given without calling {call}; it may not reflect the current data.");
            let msg = format!(
                "The model did not call {call} after {} retries.",
                cx.policy.expect.max_retries
            );
            let d = Directives {
                prefix_warning: Some(warning),
                ..Default::default()
            };
            cx.emit(
                Finding::new(Rule::RequiredTool, Action::Warn, msg, evidence)
                    .attempt(self.retries)
                    .directives(d),
            );
        }
    }
}
