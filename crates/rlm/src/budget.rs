//! The sub-call budget of one top-level RLM invocation: a counter of model calls left,
//! shared by `llm_query`, `llm_query_batched` and every `rlm_query` descendant. Reservations
//! are all-or-nothing compare-and-swap operations, so the counter never goes below zero, also
//! under concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The shared counter of sub-calls left. Cloning shares the counter.
#[derive(Debug, Clone)]
pub struct CallBudget {
    left: Arc<AtomicU32>,
    total: u32,
}

/// A reservation was refused: fewer calls are left than requested. Nothing was spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sub-call budget is spent: {requested} call(s) needed, {left} of {total} left")]
pub struct BudgetExhausted {
    /// Calls requested.
    pub requested: u32,
    /// Calls left when the request was refused.
    pub left: u32,
    /// The budget's size.
    pub total: u32,
}

impl CallBudget {
    /// A fresh budget of `total` calls.
    pub fn new(total: u32) -> Self {
        Self { left: Arc::new(AtomicU32::new(total)), total }
    }

    /// Takes `n` calls at once, or none when fewer than `n` are left.
    pub fn try_reserve(&self, n: u32) -> Result<(), BudgetExhausted> {
        let mut current = self.left.load(Ordering::SeqCst);
        loop {
            if current < n {
                return Err(BudgetExhausted { requested: n, left: current, total: self.total });
            }
            match self.left.compare_exchange_weak(current, current - n, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    /// Calls left.
    pub fn left(&self) -> u32 {
        self.left.load(Ordering::SeqCst)
    }

    /// The budget's size.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Calls spent so far.
    pub fn used(&self) -> u32 {
        self.total - self.left()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_larger_than_what_is_left_spends_nothing() {
        let b = CallBudget::new(5);
        b.try_reserve(3).unwrap();
        let err = b.try_reserve(3).unwrap_err();
        assert_eq!((err.requested, err.left), (3, 2));
        assert_eq!(b.left(), 2);
        b.try_reserve(2).unwrap();
        assert!(b.try_reserve(1).is_err());
        assert_eq!(b.left(), 0);
    }

    #[test]
    fn concurrent_reservations_never_overspend() {
        let b = CallBudget::new(1000);
        let granted = std::sync::Arc::new(AtomicU32::new(0));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (b, granted) = (b.clone(), granted.clone());
                s.spawn(move || {
                    for _ in 0..400 {
                        if b.try_reserve(1).is_ok() {
                            granted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        assert_eq!(granted.load(Ordering::SeqCst), 1000);
        assert_eq!(b.left(), 0);
    }
}
