//! Budget rules of ADR 0077, and the channel-creation diagnostic. Pure
//! functions over a subscription; the pump stays the only enforcer.

use std::fmt;

use crate::subscription::{Subscription, UNLIMITED_REQUEUES};

/// Implemented by the subscription of a transport that reads a broker delivery counter.
/// Republishing transports (such as the in-memory one) do not implement it and pass R-10 and
/// R-11 vacuously.
pub trait DeliveryCounting {
    /// The broker's own redrive limit M, when the project created it and can see it.
    fn native_redrive_limit(&self) -> Option<u32>;
    /// Why this subscription cannot advance its count (R-11's predicate), if it cannot.
    fn unenforceable_reason(&self) -> Option<String>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetWarning {
    /// a budget of 0 or below -1 rejects on the first deferral.
    RejectsOnFirstDeferral { subscription: String, requeue_count: i32 },
    /// the broker's native limit M is reached no later than the budget R.
    NativeLimitFirst { subscription: String, requeue_count: i32, native_limit: u32 },
    /// the broker cannot supply a growing count, so the budget never fires.
    Unenforceable { subscription: String, requeue_count: i32, reason: String },
}

impl fmt::Display for BudgetWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetWarning::RejectsOnFirstDeferral { subscription, requeue_count } => write!(
                f,
                "subscription {subscription}: requeue_count {requeue_count} rejects every message on its first deferral; \
                 did you mean -1 (unlimited) or 1 (one attempt)?"
            ),
            BudgetWarning::NativeLimitFirst { subscription, requeue_count, native_limit } => write!(
                f,
                "subscription {subscription}: requeue_count {requeue_count} >= the broker's native redrive limit {native_limit}; \
                 the effective limit is {native_limit} and natively dead-lettered messages carry no rejection metadata"
            ),
            BudgetWarning::Unenforceable { subscription, requeue_count, reason } => write!(
                f,
                "subscription {subscription}: requeue_count {requeue_count} cannot be enforced: {reason}"
            ),
        }
    }
}

/// `requeue_count == 0 || requeue_count < -1`.
pub fn rejects_on_first_deferral(subscription: &Subscription) -> Option<BudgetWarning> {
    let count = subscription.requeue_count;
    (count == 0 || count < UNLIMITED_REQUEUES).then(|| BudgetWarning::RejectsOnFirstDeferral {
        subscription: subscription.name.clone(),
        requeue_count: count,
    })
}

/// `R != -1 && M is known && R >= M`.
pub fn native_limit_first(subscription: &Subscription, counting: &dyn DeliveryCounting) -> Option<BudgetWarning> {
    let count = subscription.requeue_count;
    let limit = counting.native_redrive_limit()?;
    (count != UNLIMITED_REQUEUES && i64::from(count) >= i64::from(limit)).then(|| BudgetWarning::NativeLimitFirst {
        subscription: subscription.name.clone(),
        requeue_count: count,
        native_limit: limit,
    })
}

/// `R != -1 && the subscription reports a reason it cannot count`.
pub fn unenforceable(subscription: &Subscription, counting: &dyn DeliveryCounting) -> Option<BudgetWarning> {
    if subscription.requeue_count == UNLIMITED_REQUEUES {
        return None;
    }
    let reason = counting.unenforceable_reason()?;
    Some(BudgetWarning::Unenforceable {
        subscription: subscription.name.clone(),
        requeue_count: subscription.requeue_count,
        reason,
    })
}

/// Every budget warning for a subscription; `counting` is `None` for republishing transports.
pub fn validate(subscription: &Subscription, counting: Option<&dyn DeliveryCounting>) -> Vec<BudgetWarning> {
    let mut warnings: Vec<BudgetWarning> = rejects_on_first_deferral(subscription).into_iter().collect();
    if let Some(counting) = counting {
        warnings.extend(native_limit_first(subscription, counting));
        warnings.extend(unenforceable(subscription, counting));
    }
    warnings
}

/// What a channel knows of its broker's delivery counting, kept at creation so a pump can ask for
/// it when it starts. Channels of republishing transports have none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountingReport {
    pub native_redrive_limit: Option<u32>,
    pub unenforceable_reason: Option<String>,
}

impl CountingReport {
    pub fn of(counting: &dyn DeliveryCounting) -> CountingReport {
        CountingReport {
            native_redrive_limit: counting.native_redrive_limit(),
            unenforceable_reason: counting.unenforceable_reason(),
        }
    }
}

impl DeliveryCounting for CountingReport {
    fn native_redrive_limit(&self) -> Option<u32> {
        self.native_redrive_limit
    }
    fn unenforceable_reason(&self) -> Option<String> {
        self.unenforceable_reason.clone()
    }
}

/// when a pump starts, every finding of `validate` for its subscription is logged once, as
/// a warning (never a refusal), and returned so the pump's handle can show it.
pub fn warn_at_start(
    subscription: &Subscription,
    counting: Option<&CountingReport>,
    channel: &str,
) -> Vec<BudgetWarning> {
    let warnings = validate(subscription, counting.map(|c| c as &dyn DeliveryCounting));
    for warning in &warnings {
        tracing::warn!(channel, "{warning}");
    }
    warnings
}

/// Called once by each channel factory when it creates a channel, never on the receive path:
/// logs R-11 so that a budget that cannot fire is never silent.
pub fn warn_if_unenforceable(subscription: &Subscription, counting: &dyn DeliveryCounting) {
    if let Some(warning) = unenforceable(subscription, counting) {
        tracing::warn!(subscription = %subscription.name, "{warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    struct Counting {
        limit: Option<u32>,
        reason: Option<&'static str>,
    }

    impl DeliveryCounting for Counting {
        fn native_redrive_limit(&self) -> Option<u32> {
            self.limit
        }
        fn unenforceable_reason(&self) -> Option<String> {
            self.reason.map(str::to_owned)
        }
    }

    fn with_budget(requeue_count: i32) -> Subscription {
        Subscription::new("orders", "orders").with_requeue_count(requeue_count)
    }

    #[rstest]
    #[case(0, true)]
    #[case(-2, true)]
    #[case(i32::MIN, true)]
    #[case(-1, false)]
    #[case(1, false)]
    #[case(3, false)]
    fn r7_fires_for_zero_and_below_minus_one(#[case] requeue_count: i32, #[case] fires: bool) {
        assert_eq!(rejects_on_first_deferral(&with_budget(requeue_count)).is_some(), fires);
    }

    #[rstest]
    #[case(3, Some(5), false)]
    #[case(5, Some(5), true)]
    #[case(6, Some(5), true)]
    #[case(-1, Some(5), false)]
    #[case(9, None, false)]
    fn r10_fires_when_the_native_limit_comes_first(
        #[case] requeue_count: i32,
        #[case] limit: Option<u32>,
        #[case] fires: bool,
    ) {
        let counting = Counting { limit, reason: None };
        let warning = native_limit_first(&with_budget(requeue_count), &counting);
        assert_eq!(warning.is_some(), fires);
        if let Some(warning) = warning {
            let text = warning.to_string();
            assert!(
                text.contains(&format!("requeue_count {requeue_count}")) && text.contains("effective limit is 5"),
                "{text}"
            );
        }
    }

    #[rstest]
    #[case(3, Some("no dead-letter policy"), true)]
    #[case(-1, Some("no dead-letter policy"), false)]
    #[case(3, None, false)]
    fn r11_fires_when_a_limited_budget_cannot_advance(
        #[case] requeue_count: i32,
        #[case] reason: Option<&'static str>,
        #[case] fires: bool,
    ) {
        let counting = Counting { limit: None, reason };
        assert_eq!(unenforceable(&with_budget(requeue_count), &counting).is_some(), fires);
    }

    #[test]
    fn validate_runs_every_rule_and_republishing_transports_pass_r10_r11_vacuously() {
        let counting = Counting { limit: Some(0), reason: Some("no counter") };
        let all = validate(&with_budget(0), Some(&counting));
        assert_eq!(all.len(), 3, "{all:?}");
        let republishing = validate(&with_budget(0), None);
        assert_eq!(
            republishing,
            vec![BudgetWarning::RejectsOnFirstDeferral { subscription: "orders".into(), requeue_count: 0 }]
        );
        assert!(validate(&with_budget(3), None).is_empty());
    }
}
