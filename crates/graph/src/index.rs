//! Lookups a superstep makes, computed once when a graph is built so that a step's cost does
//! not grow with the graph or the thread: a node's position (declaration order), the edges
//! leaving a node, and each node's rank in a topological order of the graph's strongly
//! connected components. Every edge goes from a rank to the same or a higher one, so a node
//! ranked below every node of the next step can never run again in this run: the executor
//! drops its visit count instead of copying it into every later checkpoint.

use std::collections::HashMap;

use crate::graph::Edge;

/// A built graph's lookups.
#[derive(Debug, Clone, Default)]
pub(crate) struct Index {
    /// Node name → position in declaration order.
    position: HashMap<String, usize>,
    /// Edge source (a node or START) → the positions of its edges, in declaration order.
    outgoing: HashMap<String, Vec<usize>>,
    /// Node position → rank of its strongly connected component.
    rank: Vec<usize>,
}

impl Index {
    /// The lookups of nodes `names` (in declaration order) joined by `edges`.
    pub(crate) fn new<'a>(names: impl IntoIterator<Item = &'a str>, edges: &[Edge]) -> Self {
        let position: HashMap<String, usize> = names.into_iter().enumerate().map(|(i, n)| (n.to_string(), i)).collect();
        let mut outgoing: HashMap<String, Vec<usize>> = HashMap::new();
        let mut successors = vec![Vec::new(); position.len()];
        for (i, edge) in edges.iter().enumerate() {
            outgoing.entry(edge.from.clone()).or_default().push(i);
            if let (Some(&from), Some(&to)) = (position.get(&edge.from), position.get(&edge.to)) {
                successors[from].push(to);
            }
        }
        let rank = component_ranks(&successors);
        Self { position, outgoing, rank }
    }

    /// A node's position in declaration order.
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        self.position.get(name).copied()
    }

    /// The positions of the edges leaving `source`.
    pub(crate) fn outgoing(&self, source: &str) -> &[usize] {
        self.outgoing.get(source).map_or(&[], Vec::as_slice)
    }

    /// A node's rank: no edge leads from a node to one of a lower rank.
    pub(crate) fn rank(&self, name: &str) -> Option<usize> {
        self.position(name).and_then(|p| self.rank.get(p).copied())
    }
}

/// The rank of each node's strongly connected component in a topological order of the
/// components (Kosaraju's algorithm, without recursion so a long chain cannot exhaust the
/// stack): the components come out of the second pass sources first.
fn component_ranks(successors: &[Vec<usize>]) -> Vec<usize> {
    let n = successors.len();
    let mut predecessors = vec![Vec::new(); n];
    for (from, tos) in successors.iter().enumerate() {
        for &to in tos {
            predecessors[to].push(from);
        }
    }
    let mut rank = vec![usize::MAX; n];
    let mut next = 0;
    for start in finish_order(successors).into_iter().rev() {
        if rank[start] != usize::MAX {
            continue;
        }
        rank[start] = next;
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for &p in &predecessors[node] {
                if rank[p] == usize::MAX {
                    rank[p] = next;
                    stack.push(p);
                }
            }
        }
        next += 1;
    }
    rank
}

/// The nodes in the order a depth-first search finishes them.
fn finish_order(successors: &[Vec<usize>]) -> Vec<usize> {
    let n = successors.len();
    let mut seen = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for root in 0..n {
        if seen[root] {
            continue;
        }
        seen[root] = true;
        let mut stack = vec![(root, 0)];
        while let Some(top) = stack.last_mut() {
            let (node, child) = *top;
            match successors[node].get(child) {
                Some(&next) => {
                    top.1 += 1;
                    if !seen[next] {
                        seen[next] = true;
                        stack.push((next, 0));
                    }
                }
                None => {
                    order.push(node);
                    stack.pop();
                }
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{END, Guard, START};

    fn edges(pairs: &[(&str, &str)]) -> Vec<Edge> {
        pairs.iter().map(|(f, t)| Edge { from: f.to_string(), to: t.to_string(), guard: Guard::Always }).collect()
    }

    #[test]
    fn no_edge_leads_to_a_lower_rank_and_a_loop_shares_one_rank() {
        // START → a → b ⇄ c → d → END, and a → d.
        let e = edges(&[(START, "a"), ("a", "b"), ("b", "c"), ("c", "b"), ("c", "d"), ("a", "d"), ("d", END)]);
        let index = Index::new(["d", "c", "b", "a"], &e);
        let rank = |n: &str| index.rank(n).unwrap();
        assert_eq!(rank("b"), rank("c"), "a loop is one component");
        assert!(rank("a") < rank("b") && rank("c") < rank("d") && rank("a") < rank("d"));
        assert_eq!(index.position("b"), Some(2));
        assert_eq!(index.outgoing("a"), [1, 5]);
        assert!(index.outgoing("d").len() == 1 && index.outgoing("nowhere").is_empty());
    }

    #[test]
    fn a_long_chain_is_ranked_in_order_without_exhausting_the_stack() {
        let names: Vec<String> = (0..100_000).map(|i| format!("n{i}")).collect();
        let pairs: Vec<(&str, &str)> = names.windows(2).map(|w| (w[0].as_str(), w[1].as_str())).collect();
        let index = Index::new(names.iter().map(String::as_str), &edges(&pairs));
        assert!(names.windows(2).all(|w| index.rank(&w[0]) < index.rank(&w[1])));
    }
}
