//! Symmetry reduction: nodes are interchangeable, so the checker explores one state per way of
//! naming them.

use super::{Msg, Phase, State};

/// The state with its nodes in a canonical order: nodes are interchangeable, so states that
/// differ only by naming them are one (symmetry reduction).
pub fn canonical(s: &State) -> State {
    let n = s.nodes.len();
    let bit = |mask: u8, i: usize| (mask >> i) & 1;
    let key = |i: usize| {
        let mut msgs: Vec<Msg> = s
            .net
            .iter()
            .filter(|m| m.node as usize == i)
            .map(|m| Msg { node: 0, ..*m })
            .collect();
        msgs.sort_unstable();
        let per_client: Vec<(u8, u8, u8, u8, u8, u8)> = s
            .clients
            .iter()
            .map(|c| {
                let seat = c.held.as_ref().map_or(0, |h| h.seats[i]);
                match &c.phase {
                    Phase::Idle => (0, 0, 0, 0, 0, seat),
                    Phase::Acquire { tally, runs, .. } | Phase::Fence { tally, runs, .. } => (
                        bit(tally.yes, i),
                        bit(tally.not_eligible, i),
                        bit(tally.no, i),
                        runs[i],
                        0,
                        seat,
                    ),
                    Phase::Extend {
                        tally,
                        runs,
                        reseat,
                        ..
                    } => (
                        bit(tally.yes, i),
                        bit(tally.not_eligible, i),
                        bit(tally.no, i),
                        runs[i],
                        bit(*reseat, i),
                        seat,
                    ),
                }
            })
            .collect();
        (s.nodes[i].clone(), msgs, per_client)
    };
    let keys: Vec<_> = (0..n).map(key).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    if order.iter().enumerate().all(|(new, &old)| new == old) {
        return s.clone();
    }
    // new index of each old index
    let mut to = vec![0usize; n];
    for (new, &old) in order.iter().enumerate() {
        to[old] = new;
    }
    let remap = |mask: u8| (0..n).fold(0u8, |acc, old| acc | (((mask >> old) & 1) << to[old]));
    let permute = |v: &Vec<u8>| order.iter().map(|&old| v[old]).collect::<Vec<u8>>();
    let mut t = s.clone();
    t.nodes = order.iter().map(|&old| s.nodes[old].clone()).collect();
    for m in &mut t.net {
        m.node = to[m.node as usize] as u8;
    }
    t.net.sort_unstable();
    for c in &mut t.clients {
        if let Some(h) = &mut c.held {
            h.seats = permute(&h.seats);
        }
        match &mut c.phase {
            Phase::Idle => {}
            Phase::Acquire { tally, runs, .. } => {
                tally.yes = remap(tally.yes);
                tally.not_eligible = remap(tally.not_eligible);
                tally.no = remap(tally.no);
                *runs = permute(runs);
            }
            Phase::Fence {
                tally,
                runs,
                acquired,
                ..
            } => {
                tally.yes = remap(tally.yes);
                tally.not_eligible = remap(tally.not_eligible);
                tally.no = remap(tally.no);
                *runs = permute(runs);
                acquired.1 = remap(acquired.1);
                acquired.2 = remap(acquired.2);
            }
            Phase::Extend {
                tally,
                runs,
                reseat,
                ..
            } => {
                tally.yes = remap(tally.yes);
                tally.not_eligible = remap(tally.not_eligible);
                tally.no = remap(tally.no);
                *runs = permute(runs);
                *reseat = remap(*reseat);
            }
        }
    }
    t
}
