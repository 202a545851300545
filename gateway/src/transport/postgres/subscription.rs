//! A PostgreSQL subscription as the gateway reads it (the queue and the lease), and what it says
//! of its counting.

use std::time::Duration;

use crate::budget::DeliveryCounting;
use crate::subscription::Subscription;

/// A PostgreSQL subscription: `subscription.routing_key` is the queue the channel receives from,
/// and the dead-letter and invalid-message routing keys are queues too.
#[derive(Debug, Clone)]
pub struct PostgresSubscription {
    pub subscription: Subscription,
    /// The lease: how long a received row stays invisible before it is received again.
    pub lease: Duration,
    /// How long a receive waits between polls of an empty queue.
    pub poll_interval: Duration,
    /// How long a channel's call waits for the server before it fails as a `Timeout` (30 s, as
    /// Npgsql's command timeout): a server that stops answering must not hold a pump for ever.
    pub call_deadline: Duration,
}

impl PostgresSubscription {
    pub fn new(subscription: Subscription) -> PostgresSubscription {
        PostgresSubscription {
            subscription,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(50),
            call_deadline: Duration::from_secs(30),
        }
    }
}

impl DeliveryCounting for PostgresSubscription {
    /// No native redrive: only the gateway's budget routes a message away.
    fn native_redrive_limit(&self) -> Option<u32> {
        None
    }

    /// Every receive counts the row's delivery, so the budget is enforceable.
    fn unenforceable_reason(&self) -> Option<String> {
        None
    }
}
