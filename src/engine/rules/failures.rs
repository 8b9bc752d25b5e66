//! The error rules' dispatch for one tool result: the in-a-row form, the same call in a
//! request and across requests, and the wider forms, one verdict per failure at most.

use super::{error_repeat, error_spread, ignored_steer, Pending, SessionState};
use crate::engine::canon::hash64;
use crate::engine::emit::Cx;
use crate::engine::verdict::{Action, Rule};

impl SessionState {
    /// The error rules, on a result of `pending` (a call of `tool`): `error` when it failed
    /// (normalized), `output` its output hash, `novel` when that output is new to the
    /// request. One verdict per failure at most: a form that comes due after another spoke
    /// counts it silently. A failure steered about and tried again climbs the ladder
    /// (`ignored_steer`).
    pub(super) fn on_failure(
        &mut self,
        pending: &Pending,
        tool: &str,
        error: Option<&str>,
        output: Option<&str>,
        novel: bool,
        cx: &mut Cx,
    ) {
        use error_repeat::Scope;
        use error_spread::{Failed, Form};
        let (sig, at, try_no) = (pending.sig, pending.at as u32, pending.try_no);
        if let Some(e) = error {
            let window = &mut self.request.window;
            window.record_error(&pending.call_id, hash64(e.as_bytes()));
        }
        // A try that tells something new: its output is new to the request, and its error
        // is not about one of its own values (then nothing new was learnt about that value).
        let quoted = match (error, pending.digest.as_deref()) {
            (Some(e), Some(d)) => d.quoted_in(e),
            _ => false,
        };
        let informative = novel && !quoted;
        let failed = Failed::new(tool, sig, error, pending.digest.as_deref(), informative);
        let attempt = |key: u64| ignored_steer::Try {
            tool,
            key,
            shape: pending.shape,
            sig,
            try_no,
            novel: informative,
        };
        if error.is_some() && self.request.ignored.armed() {
            self.request
                .ignored
                .on_failure(&attempt(failed.shape_key()));
        }
        // The wider forms that already spoke about this failure silence the narrower ones.
        let failing = error.is_some();
        let in_request = failing && self.request.spread.reported(&failed, Form::ToolInRequest);
        let in_session = failing && self.spread.reported(&failed, Form::ToolAcrossRequests);
        let req = &mut self.request;
        let before = cx.out.len();
        req.errors.on_result(
            sig,
            try_no,
            tool,
            error,
            output,
            informative,
            in_request,
            cx,
        );
        let Some(error) = error else { return };
        if let Some(key) = error_repeat::failure_key(error, output) {
            let said = in_request || cx.out.len() > before;
            let req_no = self.requests;
            req.failures
                .on_failure(sig, tool, &key, (at, req_no), Scope::Request, said, cx);
            let said = in_session || cx.out.len() > before;
            // A try of the session: the request's number and the try in it.
            let try_in_session = req_no.wrapping_mul(1 << 16).wrapping_add(try_no);
            self.failures.on_failure(
                sig,
                tool,
                &key,
                (try_in_session, req_no),
                Scope::Session,
                said,
                cx,
            );
        }
        let forms = [
            (Form::ToolInRequest, try_no),
            (Form::ToolAcrossRequests, self.requests),
            (Form::CallAcrossRequests, self.requests),
        ];
        for (form, occasion) in forms {
            let said = cx.out.len() > before;
            let scope = match form {
                Form::ToolInRequest => &mut self.request.spread,
                _ => &mut self.spread,
            };
            scope.on_failure(&failed, form, occasion, said, cx);
        }
        let steered = cx.out[before..]
            .iter()
            .any(|v| v.rule == Rule::ErrorRepeat && v.action == Action::Steer);
        if steered {
            let since = cx.out[before..]
                .iter()
                .find_map(|v| v.loop_since_ms)
                .unwrap_or(cx.meta.ts_ms);
            self.request
                .ignored
                .on_steered(&attempt(failed.shape_key()), since);
        }
    }
}
