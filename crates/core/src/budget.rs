//! The budget tree: tokens, USD, model calls and wall clock. A run tree starts with one root
//! [`Budget`]; a node that needs tighter limits (a sub-agent, a goal pursuit, an RLM and its
//! sub-calls) carves a child from its parent. A child can only be narrower: spending is
//! recorded at every level up to the root, a limit at any level stops the node, and a child's
//! deadline is never later than its parent's.
//!
//! Model calls are reserved before they are made (all-or-nothing over every level), and the
//! token and USD limits are checked before each call. A call whose cost the provider can
//! estimate also holds that estimate against every USD cap while it runs ([`Budget::hold_cost`]):
//! a call that would pass a cap counting what is spent and held waits until the calls in
//! flight settle, and is refused once the cap is spent — so concurrent calls overshoot a USD
//! cap by at most one call (the one that started alone), not by all of them. A token cap
//! reached while calls are in flight lets those calls finish; the model-call cap is never
//! overshot.
//!
//! A node may carry a [`SpendLedger`] (a durable run's record of spend): every model call made
//! under it writes its hold there before the request goes out and settles it after (see
//! [`crate::spend`]), and a resumed run starts the node from the ledger's total
//! ([`Budget::restore`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::message::Usage;
use crate::run::FinishReason;
use crate::spend::{SpendLedger, SpendRecord, SpendTotal};

/// Limits of one budget node. `None` means "no limit of its own" (the parent's still apply).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetLimits {
    /// Total tokens spent under this node.
    pub max_tokens: Option<u64>,
    /// Total USD spent under this node.
    pub max_cost_usd: Option<f64>,
    /// Model calls made under this node.
    pub max_model_calls: Option<u64>,
    /// Wall clock from the moment the node is created.
    #[serde(with = "crate::serde_secs::option")]
    pub wall_clock: Option<Duration>,
}

/// A limit is not a finite, non-negative number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid budget limit `{name}`: {value} (must be a finite number >= 0)")]
pub struct BudgetLimitError {
    /// The limit's name.
    pub name: &'static str,
    /// The value given.
    pub value: f64,
}

impl BudgetLimits {
    /// Checks that every limit is a finite, non-negative number (a NaN cost cap would
    /// otherwise disable the cap silently).
    pub fn validate(&self) -> Result<(), BudgetLimitError> {
        if let Some(c) = self.max_cost_usd
            && !(c.is_finite() && c >= 0.0)
        {
            return Err(BudgetLimitError { name: "max_cost_usd", value: c });
        }
        Ok(())
    }
}

/// One node of the budget tree.
#[derive(Debug)]
pub struct Budget {
    limits: BudgetLimits,
    deadline: Option<Instant>,
    started: Instant,
    tokens: AtomicU64,
    cost_micro_usd: AtomicU64,
    calls: AtomicU64,
    /// USD (micro) held by calls in flight under this node.
    held_micro_usd: AtomicU64,
    /// Woken whenever a hold anywhere in the tree is released.
    released: Arc<tokio::sync::Notify>,
    /// Where calls under this node record their spend ahead (a durable run's ledger).
    ledger: Option<Arc<dyn SpendLedger>>,
    parent: Option<Arc<Budget>>,
}

/// Why a cost hold was not granted.
#[derive(Debug, Clone, PartialEq)]
pub enum HoldRefused {
    /// A cap is spent (or a token, time limit is reached): the call must not be made.
    Stop(FinishReason),
    /// Other calls in flight hold too much: wait for a release ([`Budget::released`]), then try
    /// again.
    Busy,
}

/// USD held against every cap above a call while it runs; released when dropped (after the
/// call's real cost is recorded).
#[derive(Debug)]
pub struct CostHold {
    budget: Arc<Budget>,
    micro: u64,
}

impl Drop for CostHold {
    fn drop(&mut self) {
        for b in self.budget.chain() {
            b.held_micro_usd.fetch_sub(self.micro, Ordering::SeqCst);
        }
        self.budget.released.notify_waiters();
    }
}

fn micro_usd(cost: f64) -> u64 {
    if cost.is_finite() { (cost * 1e6).round().max(0.0) as u64 } else { 0 }
}

impl Budget {
    /// A root budget starting now.
    pub fn new(limits: BudgetLimits) -> Self {
        let started = Instant::now();
        let deadline = limits.wall_clock.and_then(|w| started.checked_add(w));
        Self {
            limits,
            deadline,
            started,
            tokens: AtomicU64::new(0),
            cost_micro_usd: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            held_micro_usd: AtomicU64::new(0),
            released: Arc::new(tokio::sync::Notify::new()),
            ledger: None,
            parent: None,
        }
    }

    /// A root budget with no limits.
    pub fn unlimited() -> Self {
        Self::new(BudgetLimits::default())
    }

    /// A child node carved from this one: its own limits apply to what is spent under it, and
    /// every ancestor's limits still apply. Its deadline is the earlier of its own and this
    /// node's.
    pub fn child(self: &Arc<Self>, limits: BudgetLimits) -> Arc<Budget> {
        let mut child = Budget::new(limits);
        child.deadline = earliest(child.deadline, self.deadline);
        child.released = self.released.clone();
        child.parent = Some(self.clone());
        Arc::new(child)
    }

    /// A child node (as [`Budget::child`]) whose model calls, and those of every node under
    /// it, record their spend in `ledger` ahead of each call.
    pub fn child_with_ledger(self: &Arc<Self>, limits: BudgetLimits, ledger: Arc<dyn SpendLedger>) -> Arc<Budget> {
        let mut child = Budget::new(limits);
        child.deadline = earliest(child.deadline, self.deadline);
        child.released = self.released.clone();
        child.ledger = Some(ledger);
        child.parent = Some(self.clone());
        Arc::new(child)
    }

    /// Writes a call's hold to every ledger of this node and its ancestors, before the call is
    /// made; the first write that fails is returned (the call must not be made).
    pub async fn write_hold(&self, call: &str, estimate_usd: f64) -> std::io::Result<()> {
        let record = SpendRecord::hold(call, estimate_usd);
        for ledger in self.ledgers() {
            ledger.record(&record).await?;
        }
        Ok(())
    }

    /// Writes a call's settlement to every ledger of this node and its ancestors; every ledger
    /// is tried, the first failure returned.
    pub async fn write_settle(&self, call: &str, usage: &Usage, cost_usd: f64) -> std::io::Result<()> {
        let record = SpendRecord::settle(call, cost_usd, *usage);
        let mut first = Ok(());
        for ledger in self.ledgers() {
            let written = ledger.record(&record).await;
            if first.is_ok() {
                first = written;
            }
        }
        first
    }

    /// Whether a ledger records the spend of calls under this node.
    pub fn has_ledger(&self) -> bool {
        self.ledgers().next().is_some()
    }

    fn ledgers(&self) -> impl Iterator<Item = &Arc<dyn SpendLedger>> {
        self.chain().filter_map(|b| b.ledger.as_ref())
    }

    /// Starts this node from what a ledger says earlier processes spent: its settled usage
    /// and cost, plus the holds of calls that never settled, counted at their hold (recorded
    /// here and at every ancestor, like spending).
    pub fn restore(&self, spent: &SpendTotal) {
        self.record(&spent.usage, Some(spent.usd()));
    }

    /// This node's own limits.
    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    fn chain(&self) -> impl Iterator<Item = &Budget> {
        std::iter::successors(Some(self), |b| b.parent.as_deref())
    }

    /// Records spending here and at every ancestor.
    pub fn record(&self, usage: &Usage, cost_usd: Option<f64>) {
        let micro = cost_usd.filter(|c| c.is_finite()).map(|c| (c * 1e6).round().max(0.0) as u64).unwrap_or(0);
        for b in self.chain() {
            b.tokens.fetch_add(usage.total(), Ordering::SeqCst);
            b.cost_micro_usd.fetch_add(micro, Ordering::SeqCst);
        }
    }

    /// Reserves `n` model calls at every level, or none when any level has fewer left (or a
    /// token, USD or time limit is reached). Reserved calls count as spent.
    pub fn reserve_calls(&self, n: u64) -> Result<(), FinishReason> {
        if let Some(reason) = self.exhausted() {
            return Err(reason);
        }
        let levels: Vec<&Budget> = self.chain().collect();
        for (i, b) in levels.iter().enumerate() {
            if !b.try_take_calls(n) {
                for done in &levels[..i] {
                    done.calls.fetch_sub(n, Ordering::SeqCst);
                }
                return Err(FinishReason::CallBudgetExceeded);
            }
        }
        Ok(())
    }

    /// Holds `estimate` USD at every level for a call about to be made: granted when, at
    /// every level with a USD cap, what is spent plus what is held plus the estimate stays
    /// within the cap — or nothing else is held there (a lone call may overshoot by its own
    /// cost). [`HoldRefused::Busy`] means wait for a release; [`HoldRefused::Stop`] that a limit
    /// is reached.
    pub fn hold_cost(self: &Arc<Self>, estimate: f64) -> Result<CostHold, HoldRefused> {
        if let Some(reason) = self.exhausted() {
            return Err(HoldRefused::Stop(reason));
        }
        let micro = micro_usd(estimate);
        let levels: Vec<&Budget> = self.chain().collect();
        for (i, b) in levels.iter().enumerate() {
            let cap = b.limits.max_cost_usd.map(micro_usd);
            let spent = b.cost_micro_usd.load(Ordering::SeqCst);
            let granted = b.held_micro_usd.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| match cap {
                Some(cap) if held > 0 && spent + held + micro > cap => None,
                _ => Some(held + micro),
            });
            if granted.is_err() {
                for done in &levels[..i] {
                    done.held_micro_usd.fetch_sub(micro, Ordering::SeqCst);
                }
                return Err(HoldRefused::Busy);
            }
        }
        Ok(CostHold { budget: self.clone(), micro })
    }

    /// Fires when a cost hold anywhere in the tree is released.
    pub fn released(&self) -> &tokio::sync::Notify {
        &self.released
    }

    /// USD held by calls in flight under this node.
    pub fn cost_held(&self) -> f64 {
        self.held_micro_usd.load(Ordering::SeqCst) as f64 / 1e6
    }

    fn try_take_calls(&self, n: u64) -> bool {
        let Some(max) = self.limits.max_model_calls else {
            self.calls.fetch_add(n, Ordering::SeqCst);
            return true;
        };
        self.calls.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| (c + n <= max).then_some(c + n)).is_ok()
    }

    /// Tokens spent under this node.
    pub fn tokens_used(&self) -> u64 {
        self.tokens.load(Ordering::SeqCst)
    }

    /// USD spent under this node.
    pub fn cost_used(&self) -> f64 {
        self.cost_micro_usd.load(Ordering::SeqCst) as f64 / 1e6
    }

    /// Model calls made (or reserved) under this node.
    pub fn calls_used(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Model calls left before a limit at any level is reached (`None`: unlimited).
    pub fn calls_left(&self) -> Option<u64> {
        self.chain().filter_map(|b| b.limits.max_model_calls.map(|m| m.saturating_sub(b.calls_used()))).min()
    }

    /// Time since this node was created.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The instant the wall clock runs out at this node or any ancestor.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Time left before [`Budget::deadline`].
    pub fn remaining_time(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Whether a USD cap applies here (at this node or any ancestor).
    pub fn caps_cost(&self) -> bool {
        self.chain().any(|b| b.limits.max_cost_usd.is_some())
    }

    /// Why no further model call may be made, if a token, USD or time limit is reached at
    /// this node or any ancestor.
    pub fn exhausted(&self) -> Option<FinishReason> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(FinishReason::WallClockExceeded);
        }
        for b in self.chain() {
            if b.limits.max_tokens.is_some_and(|t| b.tokens_used() >= t) {
                return Some(FinishReason::TokenBudgetExceeded);
            }
            if b.limits.max_cost_usd.is_some_and(|c| b.cost_used() >= c) {
                return Some(FinishReason::CostBudgetExceeded);
            }
        }
        None
    }
}

/// The earlier of two optional instants.
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(tokens: u64) -> Usage {
        Usage { input_tokens: tokens, ..Default::default() }
    }

    #[test]
    fn child_spending_counts_against_every_ancestor() {
        let root = Arc::new(Budget::new(BudgetLimits { max_tokens: Some(100), ..Default::default() }));
        let child = root.child(BudgetLimits::default());
        child.record(&usage(100), Some(0.5));
        assert_eq!(root.tokens_used(), 100);
        assert_eq!(root.exhausted(), Some(FinishReason::TokenBudgetExceeded));
        assert_eq!(child.exhausted(), Some(FinishReason::TokenBudgetExceeded), "the parent's cap stops the child");
    }

    #[test]
    fn child_limit_stops_the_child_but_not_the_parent() {
        let root = Arc::new(Budget::unlimited());
        let child = root.child(BudgetLimits { max_cost_usd: Some(0.01), ..Default::default() });
        child.record(&usage(1), Some(0.02));
        assert_eq!(child.exhausted(), Some(FinishReason::CostBudgetExceeded));
        assert_eq!(root.exhausted(), None);
    }

    #[test]
    fn child_deadline_is_never_later_than_the_parent() {
        let root =
            Arc::new(Budget::new(BudgetLimits { wall_clock: Some(Duration::from_secs(5)), ..Default::default() }));
        let child = root.child(BudgetLimits { wall_clock: Some(Duration::from_secs(3600)), ..Default::default() });
        assert_eq!(child.deadline(), root.deadline());
        let tighter = root.child(BudgetLimits { wall_clock: Some(Duration::from_millis(1)), ..Default::default() });
        assert!(tighter.deadline() < root.deadline());
    }

    #[test]
    fn call_reservation_is_all_or_nothing_over_every_level() {
        let root = Arc::new(Budget::new(BudgetLimits { max_model_calls: Some(10), ..Default::default() }));
        let child = root.child(BudgetLimits { max_model_calls: Some(5), ..Default::default() });
        assert_eq!(child.reserve_calls(6), Err(FinishReason::CallBudgetExceeded));
        assert_eq!((root.calls_used(), child.calls_used()), (0, 0), "a refused batch spends nothing");
        child.reserve_calls(5).unwrap();
        assert_eq!(child.calls_left(), Some(0));
        root.reserve_calls(5).unwrap();
        assert_eq!(root.reserve_calls(1), Err(FinishReason::CallBudgetExceeded));
        assert_eq!(root.calls_used(), 10);
    }

    #[test]
    fn concurrent_reservations_never_overspend() {
        let root = Arc::new(Budget::new(BudgetLimits { max_model_calls: Some(1000), ..Default::default() }));
        let child = root.child(BudgetLimits::default());
        let granted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..400 {
                        if child.reserve_calls(1).is_ok() {
                            granted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        assert_eq!(granted.load(Ordering::SeqCst), 1000);
        assert_eq!(root.calls_used(), 1000);
    }

    #[test]
    fn a_cost_hold_waits_while_others_would_pass_the_cap_and_stops_once_it_is_spent() {
        let root = Arc::new(Budget::new(BudgetLimits { max_cost_usd: Some(0.10), ..Default::default() }));
        let child = root.child(BudgetLimits::default());
        let first = child.hold_cost(0.06).unwrap();
        assert_eq!(child.hold_cost(0.06).err(), Some(HoldRefused::Busy), "0.12 held would pass 0.10");
        let small = child.hold_cost(0.03).unwrap();
        assert!((root.cost_held() - 0.09).abs() < 1e-9);
        child.record(&usage(1), Some(0.05));
        drop(first);
        drop(small);
        assert_eq!(root.cost_held(), 0.0);
        let lone = child.hold_cost(0.50).expect("a lone call may start under the cap");
        drop(lone);
        child.record(&usage(1), Some(0.06));
        assert_eq!(child.hold_cost(0.01).err(), Some(HoldRefused::Stop(FinishReason::CostBudgetExceeded)));
    }

    #[tokio::test]
    async fn holds_and_settlements_reach_every_ledger_above_the_call() {
        let outer = Arc::new(crate::spend::MemorySpendLedger::default());
        let inner = Arc::new(crate::spend::MemorySpendLedger::default());
        let root = Arc::new(Budget::unlimited()).child_with_ledger(BudgetLimits::default(), outer.clone());
        let leaf = root.child_with_ledger(BudgetLimits::default(), inner.clone()).child(BudgetLimits::default());
        leaf.write_hold("c1", 0.25).await.unwrap();
        leaf.write_settle("c1", &usage(7), 0.125).await.unwrap();
        for ledger in [&outer, &inner] {
            assert_eq!(ledger.records(), [SpendRecord::hold("c1", 0.25), SpendRecord::settle("c1", 0.125, usage(7))]);
        }
        assert!(!Budget::unlimited().has_ledger());
    }

    #[test]
    fn a_restored_node_counts_settled_spend_and_unsettled_holds_against_its_caps() {
        let records =
            [SpendRecord::hold("a", 0.2), SpendRecord::settle("a", 0.1, usage(30)), SpendRecord::hold("b", 0.3)];
        let root = Arc::new(Budget::new(BudgetLimits { max_cost_usd: Some(0.4), ..Default::default() }));
        root.restore(&SpendTotal::of(&records));
        assert!((root.cost_used() - 0.4).abs() < 1e-9, "{}", root.cost_used());
        assert_eq!(root.tokens_used(), 30);
        assert_eq!(root.exhausted(), Some(FinishReason::CostBudgetExceeded));
    }

    #[test]
    fn nan_cost_cap_is_refused() {
        let limits = BudgetLimits { max_cost_usd: Some(f64::NAN), ..Default::default() };
        assert!(limits.validate().is_err());
        assert!(BudgetLimits { max_cost_usd: Some(0.5), ..Default::default() }.validate().is_ok());
    }
}
