//! Required-tool intent rules (seed 000) as configuration: which user requests require a
//! tool, matched on the typed text with injected memories stripped. Pure: no IO.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One intent: the words that reveal it and the tool call it requires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    pub name: String,
    /// The tool the request requires.
    pub tool: String,
    /// Arguments the required call must carry (a subset match), e.g. `{mode = "view"}`.
    #[serde(default)]
    pub args: Map<String, Value>,
    /// Direct intent: any of these as a substring of the request.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// Contextual follow-up: a short or referring request containing one of these ...
    #[serde(default)]
    pub followups: Vec<String>,
    /// ... when one of these markers appears in the recent context.
    #[serde(default)]
    pub markers: Vec<String>,
    /// Affirmative reply: the whole request is one of these ...
    #[serde(default)]
    pub affirmatives: Vec<String>,
    /// ... and the recent context holds one of these hints and one marker.
    #[serde(default)]
    pub hints: Vec<String>,
}

impl Intent {
    pub fn check(&self) -> Result<(), String> {
        if self.name.is_empty() || self.tool.is_empty() {
            return Err("`name` and `tool` must be non-empty".into());
        }
        if self.keywords.is_empty() && self.followups.is_empty() && self.affirmatives.is_empty() {
            return Err("needs `keywords`, `followups` or `affirmatives`".into());
        }
        if !self.followups.is_empty() && self.markers.is_empty() {
            return Err("`followups` need `markers`".into());
        }
        if !self.affirmatives.is_empty() && (self.markers.is_empty() || self.hints.is_empty()) {
            return Err("`affirmatives` need `markers` and `hints`".into());
        }
        Ok(())
    }

    /// True when a tool call satisfies this intent.
    pub fn satisfied_by(&self, tool: &str, args: &Value) -> bool {
        tool == self.tool && self.args.iter().all(|(k, v)| args.get(k) == Some(v))
    }
}

/// The seed's portfolio rules, shipped as the default rule set.
pub fn default_intents() -> Vec<Intent> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mode = |m: &str| {
        let mut a = Map::new();
        a.insert("mode".into(), Value::String(m.into()));
        a
    };
    let markers = s(&["持仓", "成本价", "代码 | 名称 | 持股"]);
    vec![
        Intent {
            name: "portfolio.view".into(),
            tool: "portfolio".into(),
            args: mode("view"),
            keywords: s(&["我有什么持仓", "我买了啥", "持仓情况"]),
            followups: vec![],
            markers: vec![],
            affirmatives: vec![],
            hints: vec![],
        },
        Intent {
            name: "portfolio.diagnose".into(),
            tool: "portfolio".into(),
            args: mode("diagnose"),
            keywords: s(&["我持仓怎么样", "持仓健康吗", "帮我审一下持仓"]),
            followups: s(&["体检", "健康吗", "分析这些", "这几只"]),
            markers,
            affirmatives: s(&["要", "好的", "可以", "行"]),
            hints: s(&["体检", "分析", "诊断"]),
        },
    ]
}

/// The text that is matched: inside `<current-user-message>` if present, with
/// `<relevant-memories>` removed, lower-cased and trimmed.
pub fn typed_text(text: &str) -> String {
    let inner = between(text, "<current-user-message>", "</current-user-message>").unwrap_or(text);
    let mut out = String::with_capacity(inner.len());
    let mut rest = inner;
    while let Some(start) = rest.find("<relevant-memories>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</relevant-memories>") {
            Some(end) => rest = &rest[start + end + "</relevant-memories>".len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.trim().to_lowercase()
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = text[start..]
        .find(close)
        .map(|e| start + e)
        .unwrap_or(text.len());
    Some(&text[start..end])
}

/// Which intent (if any) a request carries, given the recent context (oldest first,
/// already passed through `typed_text`). Direct intents win over follow-ups, which win
/// over affirmative replies, as in the seed.
pub fn resolve<'a>(intents: &'a [Intent], request: &str, context: &[String]) -> Option<&'a Intent> {
    if request.is_empty() {
        return None;
    }
    let in_context = |words: &[String]| {
        words
            .iter()
            .any(|w| context.iter().any(|c| c.contains(&w.to_lowercase())))
    };
    let contains = |words: &[String]| words.iter().any(|w| request.contains(&w.to_lowercase()));
    if let Some(i) = intents.iter().find(|i| contains(&i.keywords)) {
        return Some(i);
    }
    if let Some(i) = intents
        .iter()
        .find(|i| contains(&i.followups) && in_context(&i.markers))
    {
        return Some(i);
    }
    let bare = request.trim_end_matches(|c: char| !c.is_alphanumeric());
    intents.iter().find(|i| {
        i.affirmatives.iter().any(|a| a.to_lowercase() == bare)
            && in_context(&i.hints)
            && in_context(&i.markers)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(request: &str, context: &[&str]) -> Option<String> {
        let intents = default_intents();
        let ctx: Vec<String> = context.iter().map(|c| typed_text(c)).collect();
        resolve(&intents, &typed_text(request), &ctx).map(|i| i.name.clone())
    }

    #[test]
    fn direct_intents() {
        assert_eq!(
            name("我有什么持仓？", &[]).as_deref(),
            Some("portfolio.view")
        );
        assert_eq!(
            name("帮我审一下持仓吧", &[]).as_deref(),
            Some("portfolio.diagnose")
        );
        assert_eq!(name("今天天气如何", &[]), None);
    }

    #[test]
    fn follow_up_needs_a_marker_in_context() {
        assert_eq!(name("体检", &[]), None);
        assert_eq!(
            name("体检", &["代码 | 名称 | 持股\n600519 | 茅台 | 100"]).as_deref(),
            Some("portfolio.diagnose")
        );
    }

    #[test]
    fn affirmative_needs_hint_and_marker() {
        assert_eq!(
            name("好的", &["要不要我帮你体检一下持仓？"]).as_deref(),
            Some("portfolio.diagnose")
        );
        assert_eq!(name("好的", &["要不要我帮你看看天气？"]), None);
        assert_eq!(
            name("好的。", &["成本价 12.3", "需要分析吗"]).as_deref(),
            Some("portfolio.diagnose")
        );
    }

    #[test]
    fn memories_are_stripped_before_matching() {
        let msg = "<relevant-memories>用户常问 我有什么持仓</relevant-memories><current-user-message>讲个笑话</current-user-message>";
        assert_eq!(name(msg, &[]), None);
        let msg = "<relevant-memories>持仓情况</relevant-memories> 讲个笑话";
        assert_eq!(name(msg, &[]), None);
    }

    #[test]
    fn satisfied_by_subset_of_args() {
        let i = &default_intents()[0];
        assert!(i.satisfied_by(
            "portfolio",
            &serde_json::json!({"mode": "view", "extra": 1})
        ));
        assert!(!i.satisfied_by("portfolio", &serde_json::json!({"mode": "diagnose"})));
    }
}
