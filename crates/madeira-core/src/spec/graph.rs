//! The DAG: resolving `needs` to node indexes, finding cycles (printed as a path),
//! a topological order, downstream edges, and checking that a `when` only reads
//! nodes that are upstream of it (their outputs exist when it is evaluated).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::model::{DepKind, Need, NodeDef};

use super::raw::{RawNeed, Span};
use super::report::{At, Report, did_you_mean, line_of};

/// Node ids and where each is defined, by index.
pub(crate) struct Ids<'a> {
    pub ids: Vec<&'a str>,
    pub lines: Vec<Option<usize>>,
    index: HashMap<&'a str, usize>,
}

impl<'a> Ids<'a> {
    pub fn new(ids: Vec<&'a str>, lines: Vec<Option<usize>>) -> Self {
        let mut index = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            index.entry(*id).or_insert(i);
        }
        Self { ids, lines, index }
    }

    fn at(&self, i: usize) -> At<'a> {
        At { node: Some(self.ids[i]), line: self.lines[i] }
    }

    fn get(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    fn unknown(&self, id: &str) -> String {
        did_you_mean(id, self.ids.iter().copied())
    }
}

/// Resolves node `i`'s `needs` entries.
pub(crate) fn resolve_needs(
    i: usize,
    raw: &[Span<RawNeed>],
    ids: &Ids<'_>,
    report: &mut Report,
) -> Vec<Need> {
    let mut needs: Vec<Need> = Vec::new();
    for entry in raw {
        let at = ids.at(i).at(entry);
        let (name, kind) = match &entry.value {
            RawNeed::Name(name) => (name.as_str(), DepKind::Strong),
            RawNeed::Full { node: None, .. } => {
                report.push(
                    at,
                    "a `needs` entry written as a mapping needs `node`, e.g. `{node: pull, kind: weak}`",
                );
                continue;
            }
            RawNeed::Full { node: Some(name), kind } => match kind.as_deref() {
                None | Some("strong") => (name.as_str(), DepKind::Strong),
                Some("weak") => (name.as_str(), DepKind::Weak),
                Some(other) => {
                    let hint = did_you_mean(other, ["strong", "weak"]);
                    report
                        .push(at, format!("unknown dependency kind `{other}`{hint}; use `strong` or `weak`"));
                    continue;
                }
            },
        };
        let Some(upstream) = ids.get(name) else {
            report.push(at, format!("needs unknown node `{name}`{}", ids.unknown(name)));
            continue;
        };
        if upstream == i {
            report.push(at, format!("needs itself; remove `{name}` from its `needs`"));
        } else if needs.iter().any(|n| n.upstream == upstream) {
            report.push(at, format!("lists `{name}` more than once in `needs`; keep one entry"));
        } else {
            needs.push(Need { upstream, kind });
        }
    }
    needs
}

/// Downstream edges per node, from the resolved needs.
pub(crate) fn downstream(nodes: &[NodeDef]) -> Vec<Vec<(usize, DepKind)>> {
    let mut down = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for need in &node.needs {
            down[need.upstream].push((i, need.kind));
        }
    }
    down
}

/// A topological order (file order among ready nodes); reports every cycle.
pub(crate) fn topo(nodes: &[NodeDef], ids: &Ids<'_>, report: &mut Report) -> Vec<usize> {
    let down = downstream(nodes);
    let mut waiting: Vec<usize> = nodes.iter().map(|n| n.needs.len()).collect();
    let mut done = vec![false; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..nodes.len()).filter(|i| waiting[*i] == 0).map(Reverse).collect();
    loop {
        while let Some(Reverse(i)) = ready.pop() {
            done[i] = true;
            order.push(i);
            for (d, _) in &down[i] {
                waiting[*d] = waiting[*d].saturating_sub(1);
                if waiting[*d] == 0 && !done[*d] {
                    ready.push(Reverse(*d));
                }
            }
        }
        // Whatever is left waits on a cycle: report one, take it out, peel the rest.
        let Some(cycle) = find_cycle(nodes, &done) else {
            break;
        };
        report_cycle(&cycle, ids, report);
        for &i in &cycle {
            done[i] = true;
        }
        for &i in &cycle {
            for (d, _) in &down[i] {
                waiting[*d] = waiting[*d].saturating_sub(1);
                if waiting[*d] == 0 && !done[*d] {
                    ready.push(Reverse(*d));
                }
            }
        }
    }
    order
}

/// A cycle among the nodes not yet `done`, in upstream-to-downstream order, starting at
/// its earliest node in the file. Every such node waits on another such node, so
/// walking upstream from any of them must come back to a node already seen.
fn find_cycle(nodes: &[NodeDef], done: &[bool]) -> Option<Vec<usize>> {
    let start = (0..nodes.len()).find(|i| !done[*i])?;
    let mut path = vec![start];
    let mut seen_at: HashMap<usize, usize> = HashMap::from([(start, 0)]);
    let mut current = start;
    loop {
        let next = nodes[current].needs.iter().map(|n| n.upstream).find(|u| !done[*u])?;
        if let Some(&pos) = seen_at.get(&next) {
            let mut cycle: Vec<usize> = path[pos..].to_vec();
            cycle.reverse();
            let first = cycle.iter().enumerate().min_by_key(|(_, n)| **n).map(|(p, _)| p).unwrap_or(0);
            cycle.rotate_left(first);
            return Some(cycle);
        }
        seen_at.insert(next, path.len());
        path.push(next);
        current = next;
    }
}

fn report_cycle(cycle: &[usize], ids: &Ids<'_>, report: &mut Report) {
    let mut names: Vec<&str> = cycle.iter().map(|i| ids.ids[*i]).collect();
    let Some(first) = names.first().copied() else {
        return;
    };
    names.push(first);
    report.push(
        ids.at(cycle[0]),
        format!(
            "dependency cycle: {} (each node needs the one before it); remove one of these needs",
            names.join(" -> ")
        ),
    );
}

/// Checks that every node's `when` reads only its own upstream nodes.
pub(crate) fn check_when(
    nodes: &[NodeDef],
    when_lines: &[Option<usize>],
    ids: &Ids<'_>,
    report: &mut Report,
) {
    for (i, node) in nodes.iter().enumerate() {
        let Some(cond) = &node.when else { continue };
        let at = ids.at(i).on(when_lines[i]);
        let mut upstream: Option<Vec<bool>> = None;
        for name in cond.referenced_nodes() {
            let Some(r) = ids.get(&name) else {
                report.push(
                    at,
                    format!(
                        "`when` reads `nodes.{name}`, but there is no node `{name}`{}",
                        ids.unknown(&name)
                    ),
                );
                continue;
            };
            if r == i {
                report.push(at, format!("`when` reads `nodes.{name}`, its own node; a condition is evaluated before the node runs"));
                continue;
            }
            let ups = upstream.get_or_insert_with(|| ancestors(nodes, i));
            if !ups[r] {
                report.push(
                    at,
                    format!(
                        "`when` reads `nodes.{name}`, but `{name}` is not upstream of `{}`, so its \
                         outputs are not there yet when the condition is evaluated; add `{name}` to \
                         `needs` (`{{node: {name}, kind: weak}}` to run whatever it ends as)",
                        node.id
                    ),
                );
            }
        }
    }
}

/// `result[j]` is true when `j` is a direct or transitive upstream of `i`.
fn ancestors(nodes: &[NodeDef], i: usize) -> Vec<bool> {
    let mut seen = vec![false; nodes.len()];
    let mut stack: Vec<usize> = nodes[i].needs.iter().map(|n| n.upstream).collect();
    while let Some(j) = stack.pop() {
        if !std::mem::replace(&mut seen[j], true) {
            stack.extend(nodes[j].needs.iter().map(|n| n.upstream));
        }
    }
    seen
}

/// Line of a node's `when`, for `check_when`.
pub(crate) fn when_line(when: Option<&Span<String>>) -> Option<usize> {
    when.and_then(line_of)
}
