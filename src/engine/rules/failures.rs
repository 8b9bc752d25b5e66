//! The error rules' dispatch for one tool result: the in-a-row form, the same call in a
//! request and across requests, and the wider forms, one verdict per failure at most.

use super::{error_repeat, error_spread, Pending, SessionState};
use crate::engine::canon::hash64;
use crate::engine::emit::Cx;

impl SessionState {
    /// The error rules, on a result of `pending` (a call of `tool`): `error` when it failed
    /// (normalized), `output` its output hash. One verdict per failure at most: a form that
    /// comes due after another spoke counts it silently.
    pub(super) fn on_failure(
        &mut self,
        pending: &Pending,
        tool: &str,
        error: Option<&str>,
        output: Option<&str>,
        cx: &mut Cx,
    ) {
        use error_repeat::Scope;
        use error_spread::{Failed, Form};
        let (sig, at) = (pending.sig, pending.at as u32);
        if let Some(e) = error {
            let window = &mut self.request.window;
            window.record_error(&pending.call_id, hash64(e.as_bytes()));
        }
        let failed = Failed {
            tool,
            sig,
            error: error.unwrap_or(""),
            digest: pending.digest.as_ref(),
        };
        // The wider forms that already spoke about this failure silence the narrower ones.
        let failing = error.is_some();
        let in_request = failing && self.request.spread.reported(&failed, Form::ToolInRequest);
        let in_session = failing && self.spread.reported(&failed, Form::ToolAcrossRequests);
        let req = &mut self.request;
        let before = cx.out.len();
        req.errors
            .on_result(sig, pending.round, tool, error, output, in_request, cx);
        let Some(error) = error else { return };
        if let Some(key) = error_repeat::failure_key(error, output) {
            let said = in_request || cx.out.len() > before;
            req.failures
                .on_failure(sig, tool, &key, at, Scope::Request, said, cx);
            let said = in_session || cx.out.len() > before;
            self.failures
                .on_failure(sig, tool, &key, self.requests, Scope::Session, said, cx);
        }
        let forms = [
            (Form::ToolInRequest, pending.round),
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
    }
}
