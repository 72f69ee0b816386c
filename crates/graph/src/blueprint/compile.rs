//! Parse and compile: the blueprint's text becomes a checked [`Blueprint`], or every problem
//! found is reported at once with its position — a TOML error, a node with no capability or
//! two, an unknown channel in a template or a condition, an output or a condition that does
//! not fit the channel's type, an edge to an unknown node, a node no edge reaches, a cycle
//! with no condition to leave it. Compiling runs nothing and binds nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::blueprint::diag::{Diagnostic, Diagnostics};
use crate::blueprint::format::{At, Blueprint, Kind, NodeDecl};
use crate::graph::{END, START};
use crate::state::{Channel, Reducer, ValueType};
use crate::template::{Template, json_channels};

/// Parses `text` (diagnostics name `origin`), with no checks beyond the format's.
pub fn parse(text: &str, origin: &str) -> Result<Blueprint, Diagnostics> {
    toml::from_str::<Blueprint>(text).map_err(|e| {
        let mut d = Diagnostics::new(origin, text);
        let span = e.span().unwrap_or(0..0);
        d.push(Diagnostic::new(e.message().trim().to_string(), span));
        d
    })
}

/// The canonical text of a blueprint: the same graph, formatted the one way `format`
/// writes it (comments are not kept). Formatting it again changes nothing.
pub fn format(text: &str, origin: &str) -> Result<String, Diagnostics> {
    let blueprint = parse(text, origin)?;
    toml::to_string(&blueprint).map_err(|e| {
        let mut d = Diagnostics::new(origin, text);
        d.push(Diagnostic::new(format!("cannot format: {e}"), 0..0));
        d
    })
}

/// Parses and checks `text`.
pub fn compile(text: &str, origin: &str) -> Result<Blueprint, Diagnostics> {
    let blueprint = parse(text, origin)?;
    let mut d = Diagnostics::new(origin, text);
    Checker { bp: &blueprint, d: &mut d, text }.check();
    d.into_result().map(|()| blueprint)
}

/// The channels of a blueprint, as the runtime declares them.
pub fn channels(bp: &Blueprint) -> BTreeMap<String, Channel> {
    bp.state
        .iter()
        .map(|(name, decl)| {
            let (kind, reducer, default) = decl.get().parts();
            (name.clone(), Channel { kind, reducer, default: default.cloned() })
        })
        .collect()
}

struct Checker<'a> {
    bp: &'a Blueprint,
    d: &'a mut Diagnostics,
    text: &'a str,
}

impl Checker<'_> {
    fn err(&mut self, message: impl Into<String>, span: Range<usize>) {
        self.d.push(Diagnostic::new(message, span));
    }

    fn check(&mut self) {
        let channels = channels(self.bp);
        self.check_channels(&channels);
        let names = self.check_nodes(&channels);
        self.check_edges(&channels, &names);
        self.check_limits();
        if !self.d.items.iter().any(|d| d.message.contains("unknown node")) {
            self.check_reachable();
            self.check_cycles();
        }
    }

    fn check_limits(&mut self) {
        let Some(limits) = &self.bp.limits else { return };
        let l = limits.get();
        for (name, v) in
            [("max_supersteps", l.max_supersteps), ("max_visits", l.max_visits), ("max_depth", l.max_depth)]
        {
            if v == Some(0) {
                self.err(format!("`{name}` must be at least 1"), limits.span());
            }
        }
    }

    fn check_channels(&mut self, channels: &BTreeMap<String, Channel>) {
        for (name, decl) in &self.bp.state {
            let channel = &channels[name];
            if let Err(e) = channel.check() {
                self.err(format!("channel `{name}`: {e}"), decl.span());
            }
            if let Some(default) = &channel.default
                && !channel.kind.accepts(default)
            {
                self.err(
                    format!("channel `{name}` is a {}, but its default is {default}", channel.kind.as_str()),
                    decl.span(),
                );
            }
        }
    }

    fn check_nodes(&mut self, channels: &BTreeMap<String, Channel>) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for node in &self.bp.nodes {
            let name = node.name.get();
            if name == START || name == END {
                self.err(format!("`{name}` is reserved for edges"), node.name.span());
            } else if !names.insert(name.clone()) {
                self.err(format!("node `{name}` is declared twice"), node.name.span());
            }
            self.check_node(node, channels);
        }
        names
    }

    fn check_node(&mut self, node: &NodeDecl, channels: &BTreeMap<String, Channel>) {
        let name = node.name.get().clone();
        let kinds = node.kinds();
        let kind = match kinds.as_slice() {
            [] => {
                self.d.push(
                    Diagnostic::new(format!("node `{name}` names no capability"), node.name.span())
                        .help("give it one of: model, agent, tool, rlm, goal, graph, function, ask"),
                );
                return;
            }
            [(kind, _)] => *kind,
            [_, (second, at), ..] => {
                self.err(
                    format!("node `{name}` names more than one capability (also `{}`)", second.as_str()),
                    at.span(),
                );
                return;
            }
        };
        self.check_fields(node, kind);
        for (field, template) in [("prompt", &node.prompt), ("system", &node.system), ("input", &node.input)]
            .into_iter()
            .chain([("question", &node.question), ("objective", &node.objective)])
            .chain([("ask", if kind == Kind::Ask { &node.ask } else { &None })])
        {
            if let Some(t) = template {
                self.check_template(field, t, channels);
            }
        }
        if let Some(args) = &node.args {
            match json_channels(args.get()) {
                Ok(used) => {
                    for c in used.iter().filter(|c| !channels.contains_key(*c)) {
                        self.err(format!("`args` reads unknown channel `{c}`"), args.span());
                    }
                }
                Err(e) => self.err(format!("`args`: {e}"), args.span()),
            }
        }
        for input in &node.inputs {
            if !channels.contains_key(input.get()) {
                self.err(format!("`inputs` names unknown channel `{}`", input.get()), input.span());
            }
        }
        if let Some(map) = &node.map_in {
            for parent in map.get().values().filter(|p| !channels.contains_key(*p)) {
                self.err(format!("`map_in` reads unknown channel `{parent}`"), map.span());
            }
        }
        if let Some(map) = &node.map_out {
            for parent in map.get().keys().filter(|p| !channels.contains_key(*p)) {
                self.err(format!("`map_out` writes unknown channel `{parent}`"), map.span());
            }
        }
        self.check_output(node, kind, channels);
    }

    /// Required and stray fields per kind.
    fn check_fields(&mut self, node: &NodeDecl, kind: Kind) {
        let name = node.name.get();
        let required: &[(&str, bool)] = match kind {
            Kind::Model => &[("prompt", node.prompt.is_some()), ("output", node.output.is_some())],
            Kind::Agent => &[("input", node.input.is_some()), ("output", node.output.is_some())],
            Kind::Tool => &[("output", node.output.is_some())],
            Kind::Rlm => &[("question", node.question.is_some()), ("output", node.output.is_some())],
            Kind::Goal => &[("objective", node.objective.is_some()), ("output", node.output.is_some())],
            Kind::Ask => &[("output", node.output.is_some())],
            Kind::Graph | Kind::Function => &[],
        };
        for (field, present) in required {
            if !present {
                self.err(format!("{} node `{name}` needs `{field}`", kind.as_str()), node.name.span());
            }
        }
        let allowed: &[&str] = match kind {
            Kind::Model => &["prompt", "system"],
            Kind::Agent => &["input"],
            Kind::Tool => &["args"],
            Kind::Rlm => &["question", "inputs"],
            Kind::Goal => &["objective"],
            Kind::Graph => &["map_in", "map_out"],
            Kind::Function | Kind::Ask => &[],
        };
        let present: [(&str, Option<Range<usize>>); 9] = [
            ("prompt", node.prompt.as_ref().map(At::span)),
            ("system", node.system.as_ref().map(At::span)),
            ("input", node.input.as_ref().map(At::span)),
            ("args", node.args.as_ref().map(At::span)),
            ("question", node.question.as_ref().map(At::span)),
            ("inputs", node.inputs.first().map(At::span)),
            ("objective", node.objective.as_ref().map(At::span)),
            ("map_in", node.map_in.as_ref().map(At::span)),
            ("map_out", node.map_out.as_ref().map(At::span)),
        ];
        for (field, span) in present {
            if let Some(span) = span
                && !allowed.contains(&field)
            {
                self.err(format!("`{field}` does not apply to a {} node", kind.as_str()), span);
            }
        }
    }

    fn check_template(&mut self, field: &str, t: &At<String>, channels: &BTreeMap<String, Channel>) {
        // The text starts after the opening quote (exact for strings without escapes).
        let base = t.span().start + quote_len(self.text, t.span().start);
        match Template::parse(t.get()) {
            Ok(template) => {
                for (channel, offset) in template.channels() {
                    if !channels.contains_key(channel) {
                        let start = base + offset;
                        self.d.push(
                            Diagnostic::new(
                                format!("`{field}` reads unknown channel `{channel}`"),
                                start..start + channel.len() + 2,
                            )
                            .help(known(channels)),
                        );
                    }
                }
            }
            Err(e) => self.err(format!("`{field}`: {}", e.message), base + e.offset..base + e.offset + 1),
        }
    }

    fn check_output(&mut self, node: &NodeDecl, kind: Kind, channels: &BTreeMap<String, Channel>) {
        let Some(output) = &node.output else { return };
        if matches!(kind, Kind::Graph | Kind::Function) {
            self.err(format!("`output` does not apply to a {} node", kind.as_str()), output.span());
            return;
        }
        let Some(channel) = channels.get(output.get()) else {
            self.d.push(
                Diagnostic::new(format!("`output` names unknown channel `{}`", output.get()), output.span())
                    .help(known(channels)),
            );
            return;
        };
        // Model, agent, tool and goal nodes produce text; an RLM or a person may give any value.
        let produces_text = matches!(kind, Kind::Model | Kind::Agent | Kind::Tool | Kind::Goal);
        let fits = !produces_text
            || matches!(channel.kind, ValueType::String | ValueType::Any)
            || (channel.reducer == Reducer::Append);
        if !fits {
            self.err(
                format!(
                    "a {} node writes text, but channel `{}` holds a {}",
                    kind.as_str(),
                    output.get(),
                    channel.kind.as_str()
                ),
                output.span(),
            );
        }
    }

    fn check_edges(&mut self, channels: &BTreeMap<String, Channel>, names: &BTreeSet<String>) {
        let mut starts = false;
        for edge in &self.bp.edges {
            let from = edge.from.get();
            starts |= from == START;
            if from != START && !names.contains(from) {
                self.unknown_node(from, edge.from.span(), names);
            }
            for to in edge.to.get().each() {
                if to != END && !names.contains(to) {
                    self.unknown_node(to, edge.to.span(), names);
                }
            }
            if let Some(when) = &edge.when {
                let test = when.get();
                match channels.get(&test.channel) {
                    None => self.err(format!("the condition reads unknown channel `{}`", test.channel), when.span()),
                    Some(c) if !test.fits(c.kind) => self.err(
                        format!(
                            "the condition's comparison does not work on channel `{}`, which holds a {}",
                            test.channel,
                            c.kind.as_str()
                        ),
                        when.span(),
                    ),
                    Some(_) => {}
                }
                if edge.otherwise {
                    self.err("an edge is either `when` or `otherwise`, not both", when.span());
                }
            }
        }
        if !starts {
            let span = self.bp.name.span();
            self.d.push(
                Diagnostic::new("no edge from START: nothing would run", span)
                    .help("add [[edges]] with from = \"START\" and to = the first node"),
            );
        }
    }

    fn unknown_node(&mut self, name: &str, span: Range<usize>, names: &BTreeSet<String>) {
        let mut d = Diagnostic::new(format!("unknown node `{name}` in an edge"), span);
        if let Some(close) = names.iter().find(|n| strsim_close(n, name)) {
            d = d.help(format!("did you mean `{close}`?"));
        }
        self.d.push(d);
    }

    fn successors(&self) -> BTreeMap<&str, Vec<(&str, bool)>> {
        let mut out: BTreeMap<&str, Vec<(&str, bool)>> = BTreeMap::new();
        for edge in &self.bp.edges {
            let guarded = edge.when.is_some() || edge.otherwise;
            for to in edge.to.get().each() {
                out.entry(edge.from.get().as_str()).or_default().push((to.as_str(), guarded));
            }
        }
        out
    }

    fn check_reachable(&mut self) {
        let succ = self.successors();
        let mut seen = BTreeSet::from([START]);
        let mut stack = vec![START];
        while let Some(n) = stack.pop() {
            for (to, _) in succ.get(n).into_iter().flatten() {
                if seen.insert(to) {
                    stack.push(to);
                }
            }
        }
        let unreachable: Vec<(String, Range<usize>)> = self
            .bp
            .nodes
            .iter()
            .filter(|n| !seen.contains(n.name.get().as_str()))
            .map(|n| (n.name.get().clone(), n.name.span()))
            .collect();
        for (name, span) in unreachable {
            self.err(format!("node `{name}` is unreachable: no edge from START leads to it"), span);
        }
    }

    /// A cycle made only of unconditional edges never ends.
    fn check_cycles(&mut self) {
        let succ = self.successors();
        let always = |n: &str| -> Vec<&str> {
            succ.get(n).into_iter().flatten().filter(|(_, g)| !g).map(|(to, _)| *to).collect()
        };
        let mut reported: BTreeSet<String> = BTreeSet::new();
        let mut found = Vec::new();
        for node in &self.bp.nodes {
            let start = node.name.get().as_str();
            if let Some(cycle) = find_cycle(start, &always) {
                let key: BTreeSet<&str> = cycle.iter().copied().collect();
                let key = key.into_iter().collect::<Vec<_>>().join(",");
                if reported.insert(key) {
                    let path = cycle.join(" → ");
                    found.push(
                        Diagnostic::new(
                            format!("the cycle {path} has no exit condition: it would never end"),
                            node.name.span(),
                        )
                        .help("guard one of its edges with `when` (and add an `otherwise` or exit edge)"),
                    );
                }
            }
        }
        for d in found {
            self.d.push(d);
        }
    }
}

/// A path of unconditional edges from `start` back to `start`, if there is one.
fn find_cycle<'a>(start: &'a str, next: &dyn Fn(&str) -> Vec<&'a str>) -> Option<Vec<&'a str>> {
    let mut stack = vec![(start, vec![start])];
    let mut seen = BTreeSet::new();
    while let Some((n, path)) = stack.pop() {
        for to in next(n) {
            if to == start {
                let mut cycle = path.clone();
                cycle.push(start);
                return Some(cycle);
            }
            if seen.insert(to) {
                let mut p = path.clone();
                p.push(to);
                stack.push((to, p));
            }
        }
    }
    None
}

fn quote_len(text: &str, start: usize) -> usize {
    let rest = text.get(start..).unwrap_or("");
    if rest.starts_with("\"\"\"") || rest.starts_with("'''") {
        3 + usize::from(rest[3..].starts_with('\n'))
    } else {
        usize::from(rest.starts_with('"') || rest.starts_with('\''))
    }
}

fn known(channels: &BTreeMap<String, Channel>) -> String {
    if channels.is_empty() {
        "the blueprint declares no channels: add them under [state]".into()
    } else {
        format!("channels: {}", channels.keys().cloned().collect::<Vec<_>>().join(", "))
    }
}

fn strsim_close(a: &str, b: &str) -> bool {
    strsim::levenshtein(a, b) <= 2
}
