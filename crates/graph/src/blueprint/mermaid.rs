//! A blueprint as a Mermaid flowchart: nodes with their kind, guarded edges labelled with
//! their condition, `otherwise` edges dotted, paused nodes marked.

use crate::blueprint::format::{Blueprint, PauseAt};
use crate::graph::{END, Op, START};

/// The flowchart's text.
pub fn mermaid(bp: &Blueprint) -> String {
    let mut out = String::from("flowchart TD\n");
    out.push_str(&format!("    {START}([{START}])\n    {END}([{END}])\n"));
    for node in &bp.nodes {
        let kind = node.kinds().first().map(|(k, name)| format!("{} {}", k.as_str(), name.get())).unwrap_or_default();
        let pause = match node.interrupt {
            Some(PauseAt::Before) => " · pause before",
            Some(PauseAt::After) => " · pause after",
            None => "",
        };
        let kind = if kind.starts_with("ask ") { "ask".to_string() } else { kind };
        out.push_str(&format!(
            "    {}[\"{}<br/><small>{}{}</small>\"]\n",
            id(node.name.get()),
            node.name.get(),
            escape(&kind),
            pause
        ));
    }
    for edge in &bp.edges {
        for to in edge.to.get().each() {
            let (from, to) = (id(edge.from.get()), id(to));
            let line = match (&edge.when, edge.otherwise) {
                (Some(test), _) => format!("    {from} -- \"{}\" --> {to}\n", escape(&condition(test.get()))),
                (None, true) => format!("    {from} -. otherwise .-> {to}\n"),
                (None, false) => format!("    {from} --> {to}\n"),
            };
            out.push_str(&line);
        }
    }
    out
}

fn condition(test: &crate::graph::Test) -> String {
    let c = &test.channel;
    match &test.op {
        Op::Equals(v) => format!("{c} = {v}"),
        Op::NotEquals(v) => format!("{c} ≠ {v}"),
        Op::Contains(s) => format!("{c} contains {s}"),
        Op::NotContains(s) => format!("{c} lacks {s}"),
        Op::Lt(n) => format!("{c} < {n}"),
        Op::Le(n) => format!("{c} ≤ {n}"),
        Op::Gt(n) => format!("{c} > {n}"),
        Op::Ge(n) => format!("{c} ≥ {n}"),
        Op::Exists(true) => format!("{c} set"),
        Op::Exists(false) => format!("{c} empty"),
    }
}

/// A Mermaid-safe node id.
fn id(name: &str) -> String {
    if name == START || name == END {
        return name.to_string();
    }
    let safe: String = name.chars().map(|c| if c.is_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("n_{safe}")
}

fn escape(s: &str) -> String {
    s.replace('"', "#quot;")
}
