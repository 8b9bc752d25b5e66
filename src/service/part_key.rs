//! How the instance names an owned partition: of the shared events topic (`3`) or of a
//! tenant's own events topic (`acme/3`), in its shared views (readiness, policy, sessions,
//! the lag gauge).

use std::sync::Arc;

/// An owned partition of the instance: of the shared events topic (`tenant` `None`) or of
/// a tenant's own events topic (`kafka.events_topic_template`). Shown as `P` or `T/P`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartKey {
    pub tenant: Option<Arc<str>>,
    pub partition: i32,
}

impl PartKey {
    pub fn new(tenant: &Option<Arc<str>>, partition: i32) -> Self {
        PartKey {
            tenant: tenant.clone(),
            partition,
        }
    }

    /// How the debug view names a session of this partition: `T/id` on a tenant's topic
    /// (two tenants may use the same session id), `id` on the shared one.
    pub fn session_name(&self, id: &str) -> String {
        match &self.tenant {
            Some(t) => format!("{t}/{id}"),
            None => id.to_string(),
        }
    }
}

impl std::fmt::Display for PartKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tenant {
            Some(t) => write!(f, "{t}/{}", self.partition),
            None => write!(f, "{}", self.partition),
        }
    }
}
