//! Picking a sidecar of a group for an attempt: round-robin (default), least-busy,
//! random, or consistent hashing on a key (rendezvous hashing, so only the keys of a
//! sidecar that comes or goes move).

use madeira_core::model::SidecarRoute;

/// A sidecar that could take the attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub name: String,
    /// Attempts it runs now.
    pub busy: u32,
}

/// The index in `candidates` to use. `counter` is the group's round-robin position;
/// `key` is the evaluated `hash_key` for `SidecarRoute::Hash`; `unit` is a uniform
/// draw in [0, 1) for `SidecarRoute::Random`.
pub fn pick(
    route: &SidecarRoute,
    candidates: &[Candidate],
    counter: &mut u64,
    key: &str,
    unit: f64,
) -> Option<usize> {
    if candidates.is_empty() {
        return None;
    }
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|a, b| candidates[*a].name.cmp(&candidates[*b].name));
    match route {
        SidecarRoute::RoundRobin => {
            let i = (*counter % candidates.len() as u64) as usize;
            *counter = counter.wrapping_add(1);
            Some(order[i])
        }
        SidecarRoute::LeastBusy => {
            let least = order.iter().map(|i| candidates[*i].busy).min()?;
            let tied: Vec<usize> = order.into_iter().filter(|i| candidates[*i].busy == least).collect();
            let i = (*counter % tied.len() as u64) as usize;
            *counter = counter.wrapping_add(1);
            Some(tied[i])
        }
        SidecarRoute::Random => {
            let i = ((unit.clamp(0.0, 1.0) * candidates.len() as f64) as usize).min(candidates.len() - 1);
            Some(order[i])
        }
        SidecarRoute::Hash(_) => {
            order.into_iter().max_by_key(|i| (fnv1a(key, &candidates[*i].name), candidates[*i].name.clone()))
        }
    }
}

/// FNV-1a over `key`, a separator and `name`: stable across processes and builds.
fn fnv1a(key: &str, name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(std::iter::once(0xff)).chain(name.bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use madeira_core::keyexpr::KeyExpr;

    fn c(name: &str, busy: u32) -> Candidate {
        Candidate { name: name.into(), busy }
    }

    #[test]
    fn round_robin_cycles_in_name_order() {
        let cands = [c("b", 0), c("a", 0), c("c", 0)];
        let mut counter = 0;
        let picks: Vec<&str> = (0..4)
            .map(|_| {
                cands[pick(&SidecarRoute::RoundRobin, &cands, &mut counter, "", 0.0).expect("pick")]
                    .name
                    .as_str()
            })
            .collect();
        assert_eq!(picks, ["a", "b", "c", "a"]);
    }

    #[test]
    fn random_spreads_over_every_candidate() {
        let cands = [c("a", 0), c("b", 0), c("c", 0)];
        let mut counter = 0;
        let picks: Vec<usize> = [0.0, 0.34, 0.67, 0.999_999, 1.0]
            .iter()
            .map(|u| pick(&SidecarRoute::Random, &cands, &mut counter, "", *u).expect("pick"))
            .collect();
        assert_eq!(picks, [0, 1, 2, 2, 2], "the draw maps onto the candidates in name order");
        assert_eq!(counter, 0, "random does not move the round-robin position");
    }

    #[test]
    fn least_busy_prefers_the_idle_one() {
        let cands = [c("a", 3), c("b", 1), c("c", 2)];
        let mut counter = 0;
        assert_eq!(pick(&SidecarRoute::LeastBusy, &cands, &mut counter, "", 0.0), Some(1));
    }

    #[test]
    fn hashing_is_stable_and_moves_few_keys() {
        let route = SidecarRoute::Hash(KeyExpr::compile("params.tenant").expect("compiles"));
        let three = [c("a", 0), c("b", 0), c("c", 0)];
        let two = [c("a", 0), c("b", 0)];
        let mut counter = 0;
        let mut moved = 0;
        for k in 0..300 {
            let key = format!("tenant-{k}");
            let first = &three[pick(&route, &three, &mut counter, &key, 0.0).expect("pick")].name;
            let again = &three[pick(&route, &three, &mut counter, &key, 0.0).expect("pick")].name;
            assert_eq!(first, again);
            let after = &two[pick(&route, &two, &mut counter, &key, 0.0).expect("pick")].name;
            if first != "c" && first != after {
                moved += 1;
            }
        }
        assert_eq!(moved, 0, "keys of surviving sidecars stay where they were");
    }
}
