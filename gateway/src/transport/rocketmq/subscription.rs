//! A RocketMQ subscription as the gateway reads it (consumer group, topic, invisible time), and
//! what it says of its counting.

use std::time::Duration;

use crate::budget::DeliveryCounting;
use crate::subscription::Subscription;

/// A RocketMQ subscription: `subscription.name` is the consumer group, `routing_key` the topic,
/// the dead-letter and invalid-message routing keys are topics.
#[derive(Debug, Clone)]
pub struct RocketMqSubscription {
    pub subscription: Subscription,
    /// The lease: how long a popped message stays invisible before the broker redelivers it.
    pub invisible_time: Duration,
    /// How long making the channel (its topics' creation and route lookups, each a round trip
    /// to the name server and most to the broker too) may take before it fails as a `Timeout`:
    /// 10 s, as the other transports' call deadlines. Receives and settlements keep the
    /// client's own timeouts.
    pub setup_deadline: Duration,
}

impl RocketMqSubscription {
    pub fn new(subscription: Subscription) -> RocketMqSubscription {
        RocketMqSubscription {
            subscription,
            invisible_time: Duration::from_secs(30),
            setup_deadline: Duration::from_secs(10),
        }
    }
}

impl DeliveryCounting for RocketMqSubscription {
    /// The group's maximum reconsume times lives on the broker, invisible to the client.
    fn native_redrive_limit(&self) -> Option<u32> {
        None
    }

    /// Pop always carries the broker's count (AC-23 measured it), so the budget is enforceable.
    fn unenforceable_reason(&self) -> Option<String> {
        None
    }
}
