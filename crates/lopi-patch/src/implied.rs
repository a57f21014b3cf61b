//! Which probed blocks stand for a block without a probe: if any of them ran, it ran. A block
//! `u` is implied by a probed block `p` when `u` dominates `p` (every path from the function's
//! entry, or from a landing pad the unwinder enters, to `p` goes through `u`), or when `p`'s
//! only way on is into `u` and `p` makes no call (a call may not return: `exit`, `longjmp`, an
//! exception). Both hold whatever edges the graph has too many (a call to a function that does
//! not return still gets its fall-through edge), so an implication is never wrong; edges
//! missing would make it so, and the graph has none missing but the unwinder's, whose targets
//! are roots here.
//!
//! The other way, a block that makes no call, does not leave the function and dominates every
//! block it goes on to runs only on into the blocks it dominates; if each block below it in the
//! dominator tree that lacks that property has a probe, it ran exactly when one of the probed
//! blocks it dominates did (every path from it stays among the blocks it dominates until a probe,
//! and a loop's way back leaves the block it starts from, so it has a probe). Coverage probes
//! (`--probe coverage`) go only where that does not hold.
use crate::block_graph::{Block, Edge, FunctionBlocks};
use crate::Outcome;
use std::collections::HashMap;

/// What the probed blocks tell of a block without a probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Implication {
    /// Probed blocks any of which, had it run, implies the block ran.
    pub by: Vec<u64>,
    /// Probed blocks each of which must have run if the block did: those that dominate it,
    /// and the one its straight way on (no call) leads into.
    pub needs: Vec<u64>,
    /// It ran exactly when one of `by` did (see the module's comment).
    pub exactly: bool,
}

/// For each block of `f` without a probe, what the probed blocks tell of it.
pub fn implications(f: &FunctionBlocks) -> HashMap<u64, Implication> {
    let Ok(blocks) = &f.blocks else { return HashMap::new() };
    let plain: Vec<Block> = blocks.iter().map(|(b, _)| b.clone()).collect();
    if !complete(&plain) {
        // An edge to no block would make every conclusion doubtful: claim nothing.
        return blocks.iter().filter(|(_, o)| !matches!(o, Outcome::Probed(_))).map(|(b, _)| (b.start, Implication::default())).collect();
    }
    let graph = Graph::new(&plain, &f.table, f.entry);
    let dom = graph.dominators();
    let probed = |i: usize| matches!(blocks[i].1, Outcome::Probed(_));
    let own = graph.needs_own_probe(&dom);
    let covered_below = graph.covered_below(&dom, &own, &probed);
    // Walked from each block up its dominators and along its straight way on: linear in the
    // blocks times the dominator tree's depth, where every pair of blocks would be quadratic.
    let n = blocks.len();
    let mut by: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut needs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for p in (0..n).filter(|&p| probed(p)) {
        for u in strict_dominators(&dom, p).chain(straight_on(&graph, p)) {
            by[u].push(p);
        }
    }
    for u in (0..n).filter(|&u| !probed(u)) {
        needs[u].extend(strict_dominators(&dom, u).chain(straight_on(&graph, u)).filter(|&p| probed(p)));
    }
    let starts = |mut list: Vec<usize>| {
        list.sort_unstable();
        list.dedup();
        list.into_iter().map(|i| plain[i].start).collect::<Vec<u64>>()
    };
    let mut out = HashMap::new();
    for u in (0..n).filter(|&u| !probed(u)) {
        let by = starts(std::mem::take(&mut by[u]));
        let exactly = !own[u] && covered_below[u] && !by.is_empty();
        out.insert(plain[u].start, Implication { by, needs: starts(std::mem::take(&mut needs[u])), exactly });
    }
    out
}

/// `b`'s dominators, nearest first, `b` left out.
fn strict_dominators(idom: &[Option<usize>], b: usize) -> impl Iterator<Item = usize> + '_ {
    let mut at = idom.get(b).copied().flatten();
    (0..idom.len()).map_while(move |_| {
        let d = at?;
        at = idom.get(d).copied().flatten();
        Some(d)
    })
}

/// The blocks `from` goes on into only (possibly through others that do the same), none of the
/// blocks on the way calling.
fn straight_on(graph: &Graph, from: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = from;
    for _ in 0..graph.succs.len() {
        if graph.block(at).calls || graph.succs[at].len() != 1 || graph.exits[at] {
            break;
        }
        at = graph.succs[at][0];
        if at == from || out.contains(&at) {
            break;
        }
        out.push(at);
    }
    out
}

/// Which blocks `--probe coverage` probes: those whose running the blocks they dominate do not
/// tell (see the module's comment).
pub(crate) fn needs_own_probe(blocks: &[Block], table: &[u64], entry: u64) -> Vec<bool> {
    if !complete(blocks) {
        return vec![true; blocks.len()];
    }
    let graph = Graph::new(blocks, table, entry);
    let dom = graph.dominators();
    graph.needs_own_probe(&dom)
}

/// Every edge inside the function lands on a block's start.
fn complete(blocks: &[Block]) -> bool {
    let starts: std::collections::HashSet<u64> = blocks.iter().map(|b| b.start).collect();
    blocks.iter().flat_map(|b| &b.edges).all(|e| match e {
        Edge::Next(t) | Edge::Jump(t) => starts.contains(t),
        Edge::Table | Edge::Leaves => true,
    })
}

/// Block indices; `ROOT` stands for the entry and every landing pad, which have no edge in.
struct Graph<'b> {
    blocks: &'b [Block],
    succs: Vec<Vec<usize>>,
    preds: Vec<Vec<usize>>,
    /// The block leaves the function (returns, tail-calls, jumps out).
    exits: Vec<bool>,
    roots: Vec<usize>,
}

impl<'b> Graph<'b> {
    fn new(blocks: &'b [Block], table: &[u64], entry: u64) -> Graph<'b> {
        let index: HashMap<u64, usize> = blocks.iter().enumerate().map(|(i, b)| (b.start, i)).collect();
        let n = blocks.len();
        let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut exits = vec![false; n];
        for (i, b) in blocks.iter().enumerate() {
            for e in &b.edges {
                match e {
                    Edge::Next(t) | Edge::Jump(t) => succs[i].extend(index.get(t)),
                    Edge::Table => succs[i].extend(table.iter().filter_map(|t| index.get(t))),
                    Edge::Leaves => exits[i] = true,
                }
            }
            succs[i].sort_unstable();
            succs[i].dedup();
        }
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, s) in succs.iter().enumerate() {
            for &t in s {
                preds[t].push(i);
            }
        }
        let roots = (0..n).filter(|&i| blocks[i].start == entry || preds[i].is_empty()).collect();
        Graph { blocks, succs, preds, exits, roots }
    }

    fn block(&self, i: usize) -> &Block {
        &self.blocks[i]
    }

    /// A block whose running the blocks it dominates may not tell: it calls, leaves the
    /// function, jumps through a table, dominates nothing else, or goes on to a block it does
    /// not dominate.
    fn needs_own_probe(&self, dom: &[Option<usize>]) -> Vec<bool> {
        let mut dominates_other = vec![false; self.blocks.len()];
        for &d in dom.iter().flatten() {
            dominates_other[d] = true;
        }
        (0..self.blocks.len())
            .map(|i| {
                let b = self.block(i);
                b.calls
                    || self.exits[i]
                    || b.edges.contains(&Edge::Table)
                    || !dominates_other[i]
                    || self.succs[i].iter().any(|&s| s == i || !dominates(dom, i, s))
            })
            .collect()
    }

    /// For each block: every block at or below it in the dominator tree that needs a probe of
    /// its own has one.
    fn covered_below(&self, dom: &[Option<usize>], own: &[bool], probed: &dyn Fn(usize) -> bool) -> Vec<bool> {
        let n = self.blocks.len();
        let mut ok: Vec<bool> = (0..n).map(|i| !own[i] || probed(i)).collect();
        let depth = |mut i: usize| {
            let mut d = 0;
            while let Some(p) = dom[i] {
                i = p;
                d += 1;
                if d > n {
                    break;
                }
            }
            d
        };
        // Children before their parents: the deepest first.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(depth(i)));
        for i in order {
            if let Some(p) = dom[i] {
                ok[p] &= ok[i];
            }
        }
        ok
    }

    /// Immediate dominators (`None`: unreachable, or a root), by Cooper, Harvey and Kennedy's
    /// iteration over reverse postorder, with a virtual root above the real ones.
    fn dominators(&self) -> Vec<Option<usize>> {
        let n = self.blocks.len();
        let root = n;
        let order = self.reverse_postorder();
        let mut rank = vec![usize::MAX; n + 1];
        rank[root] = 0;
        for (k, &b) in order.iter().enumerate() {
            rank[b] = k + 1;
        }
        let mut idom: Vec<Option<usize>> = vec![None; n + 1];
        idom[root] = Some(root);
        for &r in &self.roots {
            idom[r] = Some(root);
        }
        let intersect = |idom: &[Option<usize>], mut a: usize, mut b: usize| {
            while a != b {
                while rank[a] > rank[b] {
                    a = idom[a].expect("processed");
                }
                while rank[b] > rank[a] {
                    b = idom[b].expect("processed");
                }
            }
            a
        };
        let mut changed = true;
        while changed {
            changed = false;
            for &b in order.iter().filter(|b| !self.roots.contains(b)) {
                let mut new = None;
                for &p in self.preds[b].iter().filter(|&&p| idom[p].is_some()) {
                    new = Some(new.map_or(p, |d| intersect(&idom, p, d)));
                }
                if new.is_some() && idom[b] != new {
                    idom[b] = new;
                    changed = true;
                }
            }
        }
        idom.truncate(n);
        idom.iter().map(|d| d.filter(|&d| d != root)).collect()
    }

    fn reverse_postorder(&self) -> Vec<usize> {
        let n = self.blocks.len();
        let mut seen = vec![false; n];
        let mut post = Vec::with_capacity(n);
        for &r in &self.roots {
            if seen[r] {
                continue;
            }
            seen[r] = true;
            let mut stack = vec![(r, 0)];
            while let Some((b, next)) = stack.pop() {
                if let Some(&s) = self.succs[b].get(next) {
                    stack.push((b, next + 1));
                    if !seen[s] {
                        seen[s] = true;
                        stack.push((s, 0));
                    }
                } else {
                    post.push(b);
                }
            }
        }
        post.reverse();
        post
    }
}

/// `u` dominates `p`: it is on `p`'s chain of immediate dominators (or is `p`).
fn dominates(idom: &[Option<usize>], u: usize, p: usize) -> bool {
    let mut at = Some(p);
    for _ in 0..=idom.len() {
        match at {
            Some(b) if b == u => return true,
            Some(b) => at = idom[b],
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Refusal, Tactic};

    fn block(start: u64, edges: Vec<Edge>, calls: bool) -> Block {
        Block { start, end: start + 1, instructions: 1, edges, calls }
    }

    /// A diamond, 1 -> {2, 3} -> 4 -> leaves; 3 calls.
    fn diamond(probed: &[u64]) -> FunctionBlocks {
        let blocks = vec![
            block(1, vec![Edge::Jump(3), Edge::Next(2)], false),
            block(2, vec![Edge::Jump(4)], false),
            block(3, vec![Edge::Next(4)], true),
            block(4, vec![Edge::Leaves], false),
        ];
        let outcome = |b: &Block| if probed.contains(&b.start) { Outcome::Probed(Tactic::Jmp32) } else { Outcome::Skipped(Refusal::TooShort) };
        FunctionBlocks { function: 0, entry: 1, blocks: Ok(blocks.into_iter().map(|b| (b.clone(), outcome(&b))).collect()), table: Vec::new() }
    }

    #[test]
    fn the_entry_is_implied_by_every_block_it_dominates() {
        let i = implications(&diamond(&[2, 3, 4]));
        // Both its ways on stay among the blocks it dominates, all probed: exactly.
        assert_eq!(i[&1], Implication { by: vec![2, 3, 4], needs: vec![], exactly: true });
        // Without a probe in 3 (a leaf of the dominator tree), its not running tells nothing.
        let i = implications(&diamond(&[2, 4]));
        assert_eq!(i[&1], Implication { by: vec![2, 4], needs: vec![], exactly: false });
    }

    #[test]
    fn an_edge_to_no_block_makes_no_claim() {
        // 2's way on lands between blocks (padding dropped by mistake, say): 4's dominator
        // could then be taken for 1 alone, and 1 "implied" by a block 2 leads to.
        let mut f = diamond(&[2, 3, 4]);
        if let Ok(blocks) = &mut f.blocks {
            blocks[1].0.edges = vec![Edge::Jump(5)];
        }
        assert_eq!(implications(&f)[&1], Implication::default());
        let blocks: Vec<Block> = f.blocks.unwrap().into_iter().map(|(b, _)| b).collect();
        assert_eq!(needs_own_probe(&blocks, &[], 1), vec![true; 4]);
    }

    #[test]
    fn coverage_probes_all_but_the_blocks_their_dominated_blocks_tell() {
        let d = diamond(&[]);
        let blocks: Vec<Block> = d.blocks.unwrap().into_iter().map(|(b, _)| b).collect();
        assert_eq!(needs_own_probe(&blocks, &[], 1), vec![false, true, true, true]);
    }

    #[test]
    fn a_join_is_implied_only_through_a_way_in_without_calls() {
        let i = implications(&diamond(&[1, 2, 3]));
        // 2 jumps straight into 4; 3 calls, which may not return.
        assert_eq!(i[&4].by, vec![2]);
        assert_eq!(i[&4].needs, vec![1]);
    }

    #[test]
    fn a_branch_needs_its_dominator_and_where_it_goes_straight() {
        let i = implications(&diamond(&[1, 4]));
        assert_eq!(i[&2], Implication { by: vec![], needs: vec![1, 4], exactly: false });
        assert_eq!(i[&3], Implication { by: vec![], needs: vec![1], exactly: false });
    }
}
