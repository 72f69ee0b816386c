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
        // Edges naming unknown nodes (reported above) lead nowhere; the rest is checked.
        self.check_reachable();
        self.check_cycles();
    }

    fn check_limits(&mut self) {
        let Some(limits) = &self.bp.limits else { return };
        for (name, v) in limits.get().each() {
            if let Some(v) = v
                && *v.get() == 0
            {
                self.err(format!("`{name}` must be at least 1"), v.span());
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
                    format!(
                        "channel `{name}` is {}, but its default is {default}",
                        with_article(channel.kind.as_str())
                    ),
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
            Kind::Model => &["prompt", "system", "provider"],
            Kind::Agent => &["input"],
            Kind::Tool => &["args"],
            Kind::Rlm => &["question", "inputs"],
            Kind::Goal => &["objective"],
            Kind::Graph => &["map_in", "map_out"],
            Kind::Function | Kind::Ask => &[],
        };
        let present: [(&str, Option<Range<usize>>); 10] = [
            ("prompt", node.prompt.as_ref().map(At::span)),
            ("provider", node.provider.as_ref().map(At::span)),
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
        let start = t.span().start;
        let at = |decoded: usize| source_offset(self.text, start, decoded);
        match Template::parse(t.get()) {
            Ok(template) => {
                for (channel, offset) in template.channels() {
                    if !channels.contains_key(channel) {
                        // `{channel}` decoded; its end is found the same way (escapes inside count).
                        let span = at(offset)..at(offset + channel.len() + 2);
                        self.d.push(
                            Diagnostic::new(format!("`{field}` reads unknown channel `{channel}`"), span)
                                .help(known(channels)),
                        );
                    }
                }
            }
            Err(e) => self.err(format!("`{field}`: {}", e.message), at(e.offset)..at(e.offset) + 1),
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
                    "a {} node writes text, but channel `{}` holds {}",
                    kind.as_str(),
                    output.get(),
                    with_article(channel.kind.as_str())
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
                            "the condition's comparison does not work on channel `{}`, which holds {}",
                            test.channel,
                            with_article(c.kind.as_str())
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

    /// A cycle made only of unconditional edges never ends: each strongly connected component
    /// of the unconditional edges that holds a cycle is reported once, with one of its cycles
    /// (linear in the graph's size).
    fn check_cycles(&mut self) {
        let succ = self.successors();
        let nodes: Vec<&str> = self.bp.nodes.iter().map(|n| n.name.get().as_str()).collect();
        let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let always: Vec<Vec<usize>> = nodes
            .iter()
            .map(|n| {
                succ.get(n)
                    .into_iter()
                    .flatten()
                    .filter(|(_, g)| !g)
                    .filter_map(|(to, _)| index.get(to).copied())
                    .collect()
            })
            .collect();
        let mut found = Vec::new();
        for component in strongly_connected(&always) {
            let first = component[0];
            let cyclic = component.len() > 1 || always[first].contains(&first);
            if !cyclic {
                continue;
            }
            // Components are sorted: the cycle is reported at its first-declared node.
            let cycle: Vec<&str> = cycle_through(first, &component, &always).into_iter().map(|i| nodes[i]).collect();
            found.push(
                Diagnostic::new(
                    format!("the cycle {} has no exit condition: it would never end", cycle.join(" → ")),
                    self.bp.nodes[first].name.span(),
                )
                .help("guard one of its edges with `when` (and add an `otherwise` or exit edge)"),
            );
        }
        found.sort_by_key(|d| d.span.start);
        for d in found {
            self.d.push(d);
        }
    }
}

/// The strongly connected components of a graph given as successor lists (Tarjan's algorithm,
/// iterative so that a long chain cannot overflow the stack).
fn strongly_connected(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = succ.len();
    let (mut index, mut low, mut on_stack) = (vec![UNSEEN; n], vec![0; n], vec![false; n]);
    let (mut stack, mut components, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        // (node, position in its successor list)
        let mut work = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut pos)) = work.last_mut() {
            if let Some(&w) = succ[v].get(*pos) {
                *pos += 1;
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort_unstable();
                components.push(component);
            }
        }
    }
    components
}

/// A cycle from `start` back to it inside `component` (breadth first: a shortest one).
fn cycle_through(start: usize, component: &[usize], succ: &[Vec<usize>]) -> Vec<usize> {
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &succ[v] {
            if w == start {
                let mut path = vec![start];
                let mut at = v;
                while at != start {
                    path.push(at);
                    at = parent[&at];
                }
                path[1..].reverse();
                path.push(start);
                return path;
            }
            if inside.contains(&w) && !parent.contains_key(&w) {
                parent.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    vec![start, start]
}

/// Where, in `text`, the byte `decoded` of the TOML string whose literal starts at `start`
/// comes from: escapes (`\n`, `\"`, `\u00e9`…) and a multi-line string's line-ending backslash
/// take more source than they give, so columns are counted through them.
fn source_offset(text: &str, start: usize, decoded: usize) -> usize {
    let rest = text.get(start..).unwrap_or("");
    let after_newline = |n: usize| n + usize::from(rest.get(n..).is_some_and(|r| r.starts_with('\n')));
    let (open, basic) = if rest.starts_with("\"\"\"") {
        (after_newline(3), true)
    } else if rest.starts_with("'''") {
        (after_newline(3), false)
    } else if rest.starts_with('"') {
        (1, true)
    } else {
        (usize::from(rest.starts_with('\'')), false)
    };
    if !basic {
        return start + open + decoded;
    }
    let body = rest.get(open..).unwrap_or("");
    let bytes = body.as_bytes();
    let (mut raw, mut out) = (0, 0);
    while out < decoded && raw < bytes.len() {
        if bytes[raw] != b'\\' {
            raw += 1;
            out += 1;
            continue;
        }
        let digits = body.get(raw + 2..).unwrap_or("");
        match bytes.get(raw + 1) {
            Some(b'u') => (raw, out) = (raw + 6, out + unicode_len(digits, 4)),
            Some(b'U') => (raw, out) = (raw + 10, out + unicode_len(digits, 8)),
            Some(c) if c.is_ascii_whitespace() => {
                // A line-ending backslash: it and the whitespace after it give nothing.
                raw += 1;
                while bytes.get(raw).is_some_and(u8::is_ascii_whitespace) {
                    raw += 1;
                }
            }
            _ => (raw, out) = (raw + 2, out + 1),
        }
    }
    start + open + raw
}

/// The UTF-8 length of the character that a `\u` or `\U` escape's `count` hex digits name.
fn unicode_len(hex: &str, count: usize) -> usize {
    hex.get(..count).and_then(|h| u32::from_str_radix(h, 16).ok()).and_then(char::from_u32).map_or(1, char::len_utf8)
}

/// `a string`, `an integer`.
fn with_article(kind: &str) -> String {
    match kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => format!("an {kind}"),
        false => format!("a {kind}"),
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
