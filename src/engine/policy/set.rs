//! The policy set: the global policy plus per-tenant and per-agent overrides, merged as
//! tables and validated once, resolved per (tenant, agent) and cached. Pure.

use super::every_problem;
use super::Policy;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A partial policy applied to one tenant, one agent, or one (tenant, agent) pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    /// The same shape as the policy, only the keys to change.
    #[serde(default)]
    pub set: Value,
}

/// The validated policy set: the global policy and every override, resolved on demand.
#[derive(Debug, Clone)]
pub struct PolicySet {
    global_raw: Value,
    global: std::sync::Arc<Policy>,
    overrides: Vec<Override>,
    resolved: BTreeMap<(Option<String>, Option<String>), std::sync::Arc<Policy>>,
    /// `sha256:` and 12 hex chars identifying the effective policy (see `version`).
    version: std::sync::Arc<str>,
}

impl Default for PolicySet {
    fn default() -> Self {
        PolicySet::compile(&Value::Null).expect("built-in defaults are valid")
    }
}

impl PolicySet {
    /// Compiles a policy table (`{tool:…, …, overrides:[…]}`), or reports every problem.
    pub fn compile(raw: &Value) -> Result<PolicySet, Vec<String>> {
        let mut problems = Vec::new();
        let mut global_raw = match raw {
            Value::Null => Value::Object(Default::default()),
            Value::Object(_) => raw.clone(),
            _ => return Err(vec!["policy: must be a table".into()]),
        };
        // Overrides with a bad key of their own are reported, then left out of the checks
        // below (what they would say follows from the key taken out, not from the file).
        let mut bad_overrides = std::collections::BTreeSet::new();
        let overrides: Vec<Override> = match global_raw
            .as_object_mut()
            .and_then(|o| o.remove("overrides"))
        {
            None => Vec::new(),
            Some(v) => {
                let (overrides, found) = every_problem::deserialize::<Vec<Override>>(v);
                for p in &found {
                    problems.push(wrong_type("policy.overrides", "policy.overrides", p));
                    let index = p.path.strip_prefix('[').and_then(|r| r.split(']').next());
                    bad_overrides.extend(index.and_then(|i| i.parse::<usize>().ok()));
                }
                overrides.unwrap_or_default()
            }
        };
        let before = problems.len();
        let global = parse(&global_raw, "policy", "policy", &mut problems);
        let global_ok = problems.len() == before;
        let mut resolved = BTreeMap::new();
        for (i, o) in overrides.iter().enumerate() {
            if bad_overrides.contains(&i) {
                continue;
            }
            if o.tenant.is_none() && o.agent.is_none() {
                problems.push(format!(
                    "policy.overrides[{i}]: needs `tenant`, `agent` or both"
                ));
            }
            let merged = merge(global_raw.clone(), &o.set);
            let at = format!("policy.overrides[{i}]");
            let keys = format!("{at}.set");
            // A wrong-typed value is reported where it is written: the override's own keys
            // read alone; a merged table that fails only repeats that or the global's.
            let (_, found) = every_problem::deserialize::<Policy>(o.set.clone());
            problems.extend(found.iter().map(|p| wrong_type(&at, &keys, p)));
            let own = found.is_empty();
            let mut repeated = Vec::new();
            let sink = if own && global_ok {
                &mut problems
            } else {
                &mut repeated
            };
            let p = parse(&merged, &at, &keys, sink);
            resolved.insert((o.tenant.clone(), o.agent.clone()), std::sync::Arc::new(p));
        }
        let mut set = PolicySet {
            global_raw,
            global: std::sync::Arc::new(global),
            overrides,
            resolved: BTreeMap::new(),
            version: std::sync::Arc::from(""),
        };
        if problems.is_empty() {
            set.check_combinations(&mut problems);
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        // Pre-resolve the pairs named in overrides so lookups never fail later.
        for key in resolved.keys() {
            set.resolve(key.0.as_deref(), key.1.as_deref());
        }
        set.version = set.fingerprint().into();
        Ok(set)
    }

    /// The policy version every verdict carries: `sha256:` and the first 12 hex chars of
    /// SHA-256 over the canonical JSON (keys sorted, no whitespace) of the effective global
    /// policy and of the effective policy of every (tenant, agent) the overrides name.
    /// Defaults are included, so the same configuration gives the same version in `serve`
    /// and `replay`, and a release that changes a default changes it too. Computed once.
    pub fn version(&self) -> &str {
        &self.version
    }

    fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let policy = |p: &Policy| serde_json::to_value(p).unwrap_or(Value::Null);
        let overrides: Vec<Value> = self
            .resolved
            .iter()
            .map(|((tenant, agent), p)| {
                serde_json::json!({"tenant": tenant, "agent": agent, "policy": policy(p)})
            })
            .collect();
        let table = serde_json::json!({"global": policy(&self.global), "overrides": overrides});
        let digest = Sha256::digest(crate::engine::canon::canonical(&table).as_bytes());
        let mut version = String::from("sha256:");
        for b in &digest[..6] {
            version.push_str(&format!("{b:02x}"));
        }
        version
    }

    pub fn global(&self) -> &std::sync::Arc<Policy> {
        &self.global
    }

    /// Each override is valid on its own; a tenant's and an agent's can still clash when a
    /// session has both (one raises a warning threshold past the other's block threshold).
    /// Checks every tenant x agent combination the overrides name, so `resolve` never meets
    /// an invalid policy at run time.
    fn check_combinations(&self, problems: &mut Vec<String>) {
        let names = |f: fn(&Override) -> Option<&String>| -> Vec<Option<&str>> {
            let mut v: Vec<Option<&str>> = self
                .overrides
                .iter()
                .filter_map(f)
                .map(|s| Some(s.as_str()))
                .collect();
            v.sort();
            v.dedup();
            v.push(None);
            v
        };
        let (tenants, agents) = (names(|o| o.tenant.as_ref()), names(|o| o.agent.as_ref()));
        for tenant in &tenants {
            for agent in &agents {
                let (raw, touched) = self.layered(*tenant, *agent);
                if touched {
                    let at = format!(
                        "policy for tenant `{}` with agent `{}`",
                        tenant.unwrap_or("*"),
                        agent.unwrap_or("*")
                    );
                    parse(&raw, &at, &at, problems);
                }
            }
        }
    }

    /// The global table with the matching overrides merged on: tenant, then agent, then the
    /// pair. `touched` is false when none matched.
    fn layered(&self, tenant: Option<&str>, agent: Option<&str>) -> (Value, bool) {
        let mut raw = self.global_raw.clone();
        let mut touched = false;
        for stage in 0..3 {
            for o in &self.overrides {
                if applies(o, stage, tenant, agent) {
                    raw = merge(raw, &o.set);
                    touched = true;
                }
            }
        }
        (raw, touched)
    }

    /// A rule's effective mode for a (tenant, agent), and the layer that decided it: the
    /// last of global table, tenant, agent, pair whose table sets the rule's mode (or
    /// `enabled`) or the policy-wide `mode`.
    pub fn mode_of(
        &mut self,
        tenant: Option<&str>,
        agent: Option<&str>,
        rule: super::super::verdict::Rule,
    ) -> (super::Mode, super::ModeSource) {
        use super::ModeSource;
        let mode = self.resolve(tenant, agent).mode(rule);
        let sets_mode = |table: &Value| {
            let wide = table.get("mode").is_some();
            let own = table
                .get("rules")
                .and_then(Value::as_array)
                .is_some_and(|rules| {
                    rules.iter().any(|r| {
                        r.get("rule").and_then(Value::as_str) == Some(rule.as_str())
                            && (r.get("mode").is_some() || r.get("enabled").is_some())
                    })
                });
            wide || own
        };
        let mut source = if sets_mode(&self.global_raw) {
            ModeSource::Policy
        } else {
            ModeSource::Default
        };
        for (stage, layer) in [
            ModeSource::Tenant,
            ModeSource::Agent,
            ModeSource::TenantAgent,
        ]
        .into_iter()
        .enumerate()
        {
            for o in &self.overrides {
                if applies(o, stage, tenant, agent) && sets_mode(&o.set) {
                    source = layer;
                }
            }
        }
        (mode, source)
    }

    /// The policy for a (tenant, agent): global, then the tenant's override, then the
    /// agent's, then the pair's; cached. Every combination was checked by `compile`.
    pub fn resolve(&mut self, tenant: Option<&str>, agent: Option<&str>) -> std::sync::Arc<Policy> {
        if self.overrides.is_empty() {
            return self.global.clone();
        }
        let key = (tenant.map(str::to_string), agent.map(str::to_string));
        if let Some(p) = self.resolved.get(&key) {
            return p.clone();
        }
        let (raw, touched) = self.layered(tenant, agent);
        let policy = if touched {
            let mut ignored = Vec::new();
            std::sync::Arc::new(parse(&raw, "policy", "policy", &mut ignored))
        } else {
            self.global.clone()
        };
        // Bounded: unknown tenants share the global policy and are not cached.
        if touched && self.resolved.len() < 10_000 {
            self.resolved.insert(key, policy.clone());
        }
        policy
    }
}

/// Whether override `o` is one of layering stage `stage` (0 tenant, 1 agent, 2 the pair)
/// that applies to (tenant, agent).
fn applies(o: &Override, stage: usize, tenant: Option<&str>, agent: Option<&str>) -> bool {
    match stage {
        0 => o.agent.is_none() && o.tenant.is_some() && o.tenant.as_deref() == tenant,
        1 => o.tenant.is_none() && o.agent.is_some() && o.agent.as_deref() == agent,
        _ => {
            o.tenant.is_some()
                && o.agent.is_some()
                && o.tenant.as_deref() == tenant
                && o.agent.as_deref() == agent
        }
    }
}

/// A policy table; a wrong-typed value is reported with its key, under `keys` (`policy.tool.window:
/// invalid type: ...`; an override's are under `policy.overrides[N].set`).
/// Every problem of `raw`: each bad key named, and the rest, read without them, checked too.
fn parse(raw: &Value, at: &str, keys: &str, problems: &mut Vec<String>) -> Policy {
    let (policy, found) = every_problem::deserialize::<Policy>(raw.clone());
    problems.extend(found.iter().map(|p| wrong_type(at, keys, p)));
    match policy {
        Some(p) => p.finish(problems, at),
        None => Policy::default(),
    }
}

/// `keys.the.key: serde's text`, or `at: serde's text` when no key was reached.
fn wrong_type(at: &str, keys: &str, p: &every_problem::Problem) -> String {
    match p.path.as_str() {
        "." => format!("{at}: {}", p.message),
        key if key.starts_with('[') => format!("{keys}{key}: {}", p.message),
        key => format!("{keys}.{key}: {}", p.message),
    }
}

/// Deep-merges `patch` onto `base`: tables merge key by key; `rules` lists append.
fn merge(mut base: Value, patch: &Value) -> Value {
    match (&mut base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                let merged = match (k.as_str(), b.remove(k)) {
                    ("rules", Some(Value::Array(mut old))) => {
                        if let Value::Array(new) = v {
                            old.extend(new.iter().cloned());
                        }
                        Value::Array(old)
                    }
                    (_, Some(old)) => merge(old, v),
                    (_, None) => v.clone(),
                };
                b.insert(k.clone(), merged);
            }
            base
        }
        _ => patch.clone(),
    }
}
