//! A JetStream subscription as the gateway reads it (durable pull consumer, subject, lease,
//! native delivery limit), and what it says of its counting.

use std::time::Duration;

use crate::budget::DeliveryCounting;
use crate::subscription::{MakeChannels, Subscription};

/// A JetStream subscription: `subscription.name` is the durable consumer, `routing_key` the
/// subject (its stream is named after it); the dead-letter and invalid-message routing keys are
/// subjects too, each with its stream.
#[derive(Debug, Clone)]
pub struct NatsSubscription {
    pub subscription: Subscription,
    /// The consumer's `ack_wait`: how long a delivered message stays with its channel before the
    /// server delivers it again, counted.
    pub lease: Duration,
    /// The consumer's `max_deliver`: after this many deliveries the server stops delivering the
    /// message (it routes nothing). `None`: unlimited.
    pub max_deliver: Option<u32>,
    /// How long a settlement (a request to the message's ack subject), and each call that makes
    /// the channel (its streams, its consumer, or the check that it exists), waits for the
    /// server's answer before failing as a `Timeout`. 10 s, as the client's request timeout.
    pub call_deadline: Duration,
}

impl NatsSubscription {
    pub fn new(subscription: Subscription) -> NatsSubscription {
        NatsSubscription {
            subscription,
            lease: Duration::from_secs(30),
            max_deliver: None,
            call_deadline: Duration::from_secs(10),
        }
    }
}

impl DeliveryCounting for NatsSubscription {
    /// `max_deliver`, where the gateway created the consumer with it.
    fn native_redrive_limit(&self) -> Option<u32> {
        self.max_deliver.filter(|_| self.subscription.make_channels == MakeChannels::Create)
    }

    /// Every delivery carries the consumer's `num_delivered`.
    fn unenforceable_reason(&self) -> Option<String> {
        None
    }
}
