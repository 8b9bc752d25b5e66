//! The crate's module import graph, read from the sources: no import circle among the
//! service's modules, and no arrow from config/ or engine/ up into service/ (the layout in
//! src/service/mod.rs).
//!
//! An arrow A -> B is any path in A's code (outside its test module) that names module B:
//! `crate::...`, `super::...` or a child module's name. Declaring a child (`mod b;`) is not
//! an arrow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path of a source file: src/lib.rs -> crate, src/a/mod.rs -> crate::a.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts = vec!["crate".to_string()];
    for c in rel.components() {
        let c = c.as_os_str().to_string_lossy().to_string();
        if c != "mod" && c != "lib" && c != "main" {
            parts.push(c);
        }
    }
    parts.join("::")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its test module and comments.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod ").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn parent(m: &str) -> String {
    m.rsplit_once("::")
        .map_or("crate".into(), |(p, _)| p.to_string())
}

/// Every path the code names, absolute (`crate::a::b::Item`), braces expanded one level.
fn paths(module: &str, code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (ident(bytes[i]) || bytes[i] == b':') {
            i += 1;
        }
        let raw = &code[start..i];
        let mut path = raw.trim_end_matches(':').to_string();
        let first = path.split("::").next().unwrap_or("").to_string();
        let absolute = match first.as_str() {
            "crate" => path.clone(),
            "super" => {
                let mut base = parent(module);
                let mut rest = path.strip_prefix("super").unwrap();
                while let Some(r) = rest.strip_prefix("::super") {
                    base = parent(&base);
                    rest = r;
                }
                format!("{base}{rest}")
            }
            "self" => format!("{module}{}", path.strip_prefix("self").unwrap()),
            f if children.contains(f) && path.contains("::") => format!("{module}::{path}"),
            _ => continue,
        };
        // `a::{b, c::d}`: one path per item.
        if raw.ends_with("::") && code[i..].starts_with('{') {
            path = absolute;
            let close = code[i..].find('}').map_or(code.len(), |c| i + c);
            for item in code[i + 1..close].split(',') {
                let item = item.trim().split(" as ").next().unwrap_or("").trim();
                if !item.is_empty() && item != "self" {
                    out.push(format!("{path}::{item}"));
                }
            }
            out.push(path);
            i = close;
            continue;
        }
        out.push(absolute);
    }
    out
}

fn graph() -> Graph {
    // Another tree's sources may be read instead (to see the check fail on a past commit).
    let src = std::env::var_os("MODULE_GRAPH_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: BTreeMap<String, PathBuf> = all
        .iter()
        .map(|f| (module_of(&src, f), f.clone()))
        .collect();
    let known: BTreeSet<&String> = modules.keys().collect();
    let mut g = Graph::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let code = code(&text);
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let l = l
                    .trim()
                    .trim_start_matches("pub ")
                    .trim_start_matches("pub(crate) ");
                l.strip_prefix("mod ")?
                    .strip_suffix(';')
                    .map(str::to_string)
            })
            .collect();
        let edges = g.entry(module.clone()).or_default();
        for p in paths(module, &code, &children) {
            // The longest prefix that is a module of the crate.
            let segs: Vec<&str> = p.split("::").collect();
            let target = (1..=segs.len())
                .rev()
                .map(|n| segs[..n].join("::"))
                .find(|m| known.contains(m));
            if let Some(t) = target {
                if &t != module {
                    edges.insert(t);
                }
            }
        }
    }
    g
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let l = t.low[w].min(t.low[v]);
                t.low.insert(v, l);
            } else if t.on.contains(w) {
                let l = t.index[w].min(t.low[v]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn the_service_has_no_import_circle() {
    let g = graph();
    let service: Graph = g
        .iter()
        .filter(|(m, _)| m.starts_with("crate::service"))
        .map(|(m, e)| {
            let e = e
                .iter()
                .filter(|t| t.starts_with("crate::service"))
                .cloned();
            (m.clone(), e.collect())
        })
        .collect();
    assert!(service.len() > 20, "the service's modules were not found");
    let found = circles(&service);
    assert!(found.is_empty(), "import circles in service/: {found:#?}");
}

#[test]
fn nothing_below_the_service_imports_it() {
    let g = graph();
    let up: Vec<(String, String)> = g
        .iter()
        .filter(|(m, _)| m.starts_with("crate::config") || m.starts_with("crate::engine"))
        .flat_map(|(m, e)| e.iter().map(move |t| (m.clone(), t.clone())))
        .filter(|(_, t)| t.starts_with("crate::service"))
        .collect();
    assert!(up.is_empty(), "arrows up into service/: {up:#?}");
}

/// The reader itself: a circle and an arrow up are seen when they are there.
#[test]
fn the_reader_sees_circles_and_braced_imports() {
    let kids = BTreeSet::from(["child".to_string()]);
    let p = paths(
        "crate::a::b",
        "use super::{c::D, e};\nuse crate::f::G;\nlet x = child::h();\nfoo::bar();",
        &kids,
    );
    for want in [
        "crate::a::c::D",
        "crate::a::e",
        "crate::f::G",
        "crate::a::b::child::h",
    ] {
        assert!(p.contains(&want.to_string()), "{want} in {p:?}");
    }
    assert!(!p.iter().any(|x| x.contains("foo")), "{p:?}");
    let g: Graph = [
        ("x".to_string(), BTreeSet::from(["y".to_string()])),
        ("y".to_string(), BTreeSet::from(["x".to_string()])),
        ("z".to_string(), BTreeSet::from(["x".to_string()])),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&g), vec![vec!["x".to_string(), "y".to_string()]]);
}
