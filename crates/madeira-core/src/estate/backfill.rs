//! Backfill ordering: the `(flow, date)` pairs of a backfill (one flow, or it and
//! every flow downstream of it) in an order where each pair comes after every pair
//! of the backfill it waits for, dates ascending (or descending) otherwise, flows in
//! estate order within a date.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, NaiveDate};

use super::{BusinessDays, DateError, Estate, node_requirements, requirements};

/// The order dates are taken in when nothing else decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackfillOrder {
    #[default]
    Asc,
    Desc,
}

impl BackfillOrder {
    pub const ALL: [BackfillOrder; 2] = [BackfillOrder::Asc, BackfillOrder::Desc];

    pub fn as_str(self) -> &'static str {
        match self {
            BackfillOrder::Asc => "asc",
            BackfillOrder::Desc => "desc",
        }
    }
}

impl std::str::FromStr for BackfillOrder {
    type Err = super::UnknownBackfillName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|v| v.as_str() == s.trim()).ok_or_else(|| super::UnknownBackfillName {
            kind: "backfill order",
            value: s.to_string(),
            allowed: "asc, desc".into(),
        })
    }
}

/// One run of a backfill: a flow for a business date.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dated {
    pub flow: String,
    pub date: NaiveDate,
}

/// The backfill's runs in start order; `waits[i]`: indexes (all `< i`) of the runs
/// of this backfill that run `i` waits for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BackfillPlan {
    pub steps: Vec<Dated>,
    pub waits: Vec<Vec<usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackfillError {
    #[error("flow `{0}` does not exist")]
    UnknownFlow(String),
    #[error(transparent)]
    Date(#[from] DateError),
    #[error("{0}")]
    Cycle(String),
}

/// Orders the backfill of `root` (with its dependents when `with_dependents`) over
/// `dates` (duplicates ignored).
pub fn backfill_order(
    estate: &Estate,
    root: &str,
    dates: &[NaiveDate],
    with_dependents: bool,
    order: BackfillOrder,
    days: &dyn BusinessDays,
) -> Result<BackfillPlan, BackfillError> {
    if estate.get(root).is_none() {
        return Err(BackfillError::UnknownFlow(root.to_string()));
    }
    let flows: BTreeSet<String> =
        if with_dependents { estate.with_dependents(root) } else { BTreeSet::from([root.to_string()]) };
    let rank: BTreeMap<String, usize> = estate.topo().into_iter().enumerate().map(|(i, f)| (f, i)).collect();
    let dates: BTreeSet<NaiveDate> = dates.iter().copied().collect();
    let pairs: Vec<Dated> =
        dates.iter().flat_map(|d| flows.iter().map(move |f| Dated { flow: f.clone(), date: *d })).collect();
    let index: BTreeMap<&Dated, usize> = pairs.iter().enumerate().map(|(i, p)| (p, i)).collect();
    // Edges inside the backfill: pair i waits for pair j.
    let mut needs: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); pairs.len()];
    for (i, p) in pairs.iter().enumerate() {
        let Some(flow) = estate.get(&p.flow) else { continue };
        let node_level = node_requirements(flow, p.date, days)?.into_iter().map(|(_, r)| r);
        for r in requirements(flow, p.date, days)?.into_iter().chain(node_level) {
            if let Some(&j) = index.get(&Dated { flow: r.flow, date: r.date }) {
                needs[i].insert(j);
            }
        }
    }
    let key = |i: usize| {
        let day = i64::from(pairs[i].date.num_days_from_ce());
        let day = if order == BackfillOrder::Desc { -day } else { day };
        (day, rank.get(&pairs[i].flow).copied().unwrap_or(usize::MAX), i)
    };
    let mut waiting: Vec<usize> = needs.iter().map(BTreeSet::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); pairs.len()];
    for (i, n) in needs.iter().enumerate() {
        for &j in n {
            dependents[j].push(i);
        }
    }
    let mut ready: BTreeSet<(i64, usize, usize)> =
        (0..pairs.len()).filter(|&i| waiting[i] == 0).map(key).collect();
    let mut position = vec![usize::MAX; pairs.len()];
    let mut plan = BackfillPlan::default();
    while let Some(first) = ready.pop_first() {
        let i = first.2;
        position[i] = plan.steps.len();
        plan.steps.push(pairs[i].clone());
        plan.waits.push(needs[i].iter().map(|&j| position[j]).collect());
        for &d in &dependents[i] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.insert(key(d));
            }
        }
    }
    if plan.steps.len() < pairs.len() {
        let stuck: Vec<String> = (0..pairs.len())
            .filter(|&i| position[i] == usize::MAX)
            .take(5)
            .map(|i| format!("{} {}", pairs[i].flow, pairs[i].date))
            .collect();
        return Err(BackfillError::Cycle(format!(
            "the backfill's runs wait for each other in a cycle: {}",
            stuck.join(", ")
        )));
    }
    Ok(plan)
}
