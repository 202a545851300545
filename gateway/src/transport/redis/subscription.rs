//! A Redis Streams subscription as the gateway reads it (consumer group, stream, lease), and what
//! it says of its counting.

use std::time::Duration;

use crate::budget::DeliveryCounting;
use crate::subscription::Subscription;

/// A Redis Streams subscription: `subscription.name` is the consumer group, `routing_key` the
/// stream (one per topic); the dead-letter and invalid-message routing keys are streams too.
#[derive(Debug, Clone)]
pub struct RedisSubscription {
    pub subscription: Subscription,
    /// The lease: how long a delivered entry stays with its consumer before the receive path's
    /// `XAUTOCLAIM` takes it back (its minimum idle time). It is also the longest requeue delay:
    /// Redis clamps an idle time to zero, so a longer delay comes back after the lease.
    pub lease: Duration,
}

impl RedisSubscription {
    pub fn new(subscription: Subscription) -> RedisSubscription {
        RedisSubscription { subscription, lease: Duration::from_secs(30) }
    }
}

impl DeliveryCounting for RedisSubscription {
    /// Redis Streams has no dead-lettering of its own: nothing moves an entry after N deliveries.
    fn native_redrive_limit(&self) -> Option<u32> {
        None
    }

    /// Every delivery goes through the group's pending entries list, which counts it.
    fn unenforceable_reason(&self) -> Option<String> {
        None
    }
}
