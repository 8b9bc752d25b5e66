//! A session's tool calls and results: each call recorded and judged by the repeat rules
//! before it runs, each result classified (progress, new information, failures) and its
//! round closed for the progress governor. Pure; `mod.rs` routes the events here.

use super::{calls, error_repeat, round, Pending, SessionState, MAX_PENDING_CALLS};
use crate::engine::canon::hash64;
use crate::engine::emit::Cx;
use crate::engine::event::{Body, Effect, Event, ToolStatus};

impl SessionState {
    pub(super) fn on_tool_call(
        &mut self,
        turn_id: &str,
        call_id: &str,
        tool: &str,
        args: &serde_json::Value,
        cx: &mut Cx,
    ) {
        let p = cx.policy;
        self.answers.on_tool_call();
        let req = &mut self.request;
        if let Some(turn) = self.turn.as_mut() {
            turn.tool_calls += 1;
        }
        let new_response = req.open_round.as_ref().map(|r| r.turn_id.as_str()) != Some(turn_id);
        if new_response || req.answered_since_call || req.tries == 0 {
            req.tries = req.tries.wrapping_add(1);
            req.answered_since_call = false;
        }
        if new_response {
            if req.open_round.is_some() {
                self.close_round(cx);
            }
            let req = &mut self.request;
            req.budget.on_round_start(cx);
            req.open_round = Some(round::OpenRound::new(turn_id, req.budget.rounds));
            req.non_discovery = 0;
            req.counted_calls = 0;
        }
        let req = &mut self.request;
        let round = req.open_round.as_mut().map(|r| {
            r.calls += 1;
            r.index
        });
        let named_discovery = p.progress.discovery_tools.iter().any(|t| t == tool);
        let exempt = p.tool.exempt_tools.iter().any(|t| t == tool);
        if !exempt {
            req.counted_calls += 1;
            if !named_discovery {
                req.non_discovery += 1;
            }
        }
        req.required.on_call(tool, args, cx);
        let at = req.window.next_position();
        let (mut sig, mut mutates, mut restores, mut restore_key) = (0, false, false, 0);
        let (mut digest, mut whole_write, mut shape, mut swap) = (None, None, 0, None);
        if !exempt {
            let mut record = calls::CallRecord::new(
                call_id,
                tool,
                args,
                (round.unwrap_or(0), at, cx.meta.ts_ms),
                &p.tool,
            );
            (sig, mutates, restores) = (record.sig, record.mutates, record.restores);
            restore_key = record.restore_id();
            shape = record.shape;
            swap = record.swap.take().map(Box::new);
            digest = record.digest.take().map(Box::new);
            whole_write = record.whole_write.take();
            let keep = p.tool.window.max(1);
            req.window.push(record.clone(), keep);
            let repeated = req.exact.on_call(&req.window, cx)
                || req.fuzzy.on_call(&req.window, cx)
                || req.ignored.on_call(tool, shape, cx);
            if !repeated {
                req.reverts.on_call(&record, cx);
            }
            req.near.on_call(&record, cx);
            req.cycle.on_call(&record, repeated, cx);
        }
        req.pending.push_back(Pending {
            call_id: call_id.to_string(),
            turn_id: turn_id.to_string(),
            sig,
            round: round.unwrap_or(0),
            exempt,
            named_discovery,
            mutates,
            restores,
            restore_key,
            at,
            digest,
            whole_write,
            try_no: req.tries,
            shape,
            swap,
        });
        while req.pending.len() > MAX_PENDING_CALLS {
            req.pending.pop_front();
        }
    }

    pub(super) fn on_tool_result(&mut self, event: &Event, cx: &mut Cx) {
        let Body::ToolResult {
            call_id,
            tool,
            status,
            error,
            evidence,
        } = &event.body
        else {
            return;
        };
        let req = &mut self.request;
        let pending = req
            .pending
            .iter()
            .position(|p| &p.call_id == call_id)
            .and_then(|i| req.pending.remove(i));
        let outcome = round::classify(*status, evidence.as_ref(), &mut req.reads);
        req.answered_since_call = true;
        req.window.record_answered(call_id);
        let output_hash = evidence
            .as_ref()
            .and_then(|e| e.output_hash.as_ref())
            .map(|o| hash64(o.as_bytes()));
        let novel = output_hash.map(|h| req.seen.note(h));
        if let Some(out) = evidence.as_ref().and_then(|e| e.output_hash.as_ref()) {
            req.window.record_output(call_id, hash64(out.as_bytes()));
        }
        let Some(pending) = pending else { return };
        let failed = *status == ToolStatus::Error;
        let error_hash = failed.then(|| hash64(error.as_deref().unwrap_or("").as_bytes()));
        req.cycle.on_result(pending.at, output_hash.or(error_hash));
        if !failed {
            req.ignored.on_success(tool, pending.shape);
        }
        let effect = evidence.as_ref().and_then(|e| e.effect);
        let mutated = !failed
            && match effect {
                Some(Effect::Mutation) => true,
                Some(Effect::Read) | Some(Effect::None) => false,
                Some(Effect::Unknown) | None => pending.mutates,
            };
        if mutated {
            let unchanged = evidence
                .as_ref()
                .is_some_and(|e| e.state_before.is_some() && e.state_before == e.state_after);
            req.window.record_mutation(pending.sig, !unchanged);
            if pending.restores {
                let key = match pending.restore_key {
                    0 => pending.sig,
                    key => key,
                };
                req.reverts.on_restored(key);
            }
            let reported = evidence
                .as_ref()
                .and_then(|ev| Some((ev.resource.as_deref()?, ev.state_after.as_deref()?)));
            if let (None, Some((file, content))) = (reported, &pending.whole_write) {
                // No state reported: a file written whole is in the state its content says.
                req.reverts
                    .on_state(file, None, &format!("{content:016x}"), cx);
            }
            if let (None, Some(swap)) = (reported, &pending.swap) {
                // Nor for a partial edit: the file is in the state its edits add up to.
                req.reverts.on_swap(&swap.0, swap.1, cx);
            }
            if let Some(ev) = evidence.as_ref() {
                if let (Some(resource), Some(after)) = (&ev.resource, &ev.state_after) {
                    req.reverts
                        .on_state(resource, ev.state_before.as_deref(), after, cx);
                }
            }
        }
        if !pending.exempt {
            let output = evidence.as_ref().and_then(|e| e.output_hash.as_deref());
            let err = failed.then(|| error.as_deref().unwrap_or(""));
            let normalized = err.map(error_repeat::normalize);
            let novel = novel == Some(true);
            self.on_failure(&pending, tool, normalized.as_deref(), output, novel, cx);
            let req = &mut self.request;
            req.no_change
                .on_result(pending.sig, tool, pending.round, outcome, cx);
        }
        let req = &mut self.request;
        let is_read = evidence.as_ref().and_then(|e| e.effect) == Some(Effect::Read);
        let Some(open) = req.open_round.as_mut().filter(|r| r.index == pending.round) else {
            return;
        };
        if is_read && !pending.named_discovery && !pending.exempt {
            req.non_discovery = req.non_discovery.saturating_sub(1);
        }
        open.add(outcome);
        // A failure that brought back something new (a lookup suggesting other names)
        // is new information too; one without an output says nothing new.
        open.fresh.add(if failed {
            Some(novel == Some(true))
        } else {
            novel
        });
        if open.complete() {
            self.close_round(cx);
        }
    }

    pub(super) fn close_round(&mut self, cx: &mut Cx) {
        let req = &mut self.request;
        let Some(open) = req.open_round.take() else {
            return;
        };
        let outcome = open.outcome();
        let all_new = open.all_new();
        req.no_progress.on_round(outcome, cx);
        // A round of polling calls only is neither discovery nor work for this rule.
        if req.counted_calls > 0 {
            let budget = req.budget.max_rounds(cx);
            req.discovery
                .on_round(req.non_discovery == 0, all_new, budget, cx);
        }
        if all_new {
            req.text.fence();
        }
        req.budget.on_round_end(outcome);
    }
}
