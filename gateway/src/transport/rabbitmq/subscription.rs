//! A RabbitMQ subscription as the gateway reads it (queue, queue type, delivery limit), and what
//! it says of its counting.

use std::time::Duration;

use crate::budget::DeliveryCounting;
use crate::subscription::Subscription;

/// A receive's default call deadline.
const CALL_DEADLINE: Duration = Duration::from_secs(20);

/// The queue type the channel's queues are declared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    /// No delivery counter: requeue republishes the copy with its count.
    Classic,
    /// The broker counts returns (`x-delivery-count`).
    Quorum,
}

impl QueueType {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        }
    }
}

/// A RabbitMQ subscription: `subscription.routing_key` is the queue read, the dead-letter and
/// invalid-message routing keys are queues (published to through the default exchange).
#[derive(Debug, Clone)]
pub struct RabbitMqSubscription {
    pub subscription: Subscription,
    pub queue_type: QueueType,
    /// Quorum only: `x-delivery-limit` N on the work queue (the broker delivers a message at most
    /// N + 1 times, then dead-letters it to the dead-letter queue, or drops it without one).
    pub delivery_limit: Option<u32>,
    /// How long a receive's `basic.get`, and each call that makes the channel (opening it, the
    /// declares), waits for the node before it fails as a `Timeout` (20 s, as RabbitMQ.Client's
    /// continuation timeout): lapin has no deadline of its own, and a node that stops answering
    /// must not hold a pump, or the code making one, for ever.
    pub call_deadline: Duration,
}

impl RabbitMqSubscription {
    pub fn classic(subscription: Subscription) -> RabbitMqSubscription {
        RabbitMqSubscription {
            subscription,
            queue_type: QueueType::Classic,
            delivery_limit: None,
            call_deadline: CALL_DEADLINE,
        }
    }

    pub fn quorum(subscription: Subscription, delivery_limit: Option<u32>) -> RabbitMqSubscription {
        RabbitMqSubscription {
            subscription,
            queue_type: QueueType::Quorum,
            delivery_limit,
            call_deadline: CALL_DEADLINE,
        }
    }
}

impl DeliveryCounting for RabbitMqSubscription {
    /// The quorum queue's `x-delivery-limit`, which the project declares and so knows.
    fn native_redrive_limit(&self) -> Option<u32> {
        match self.queue_type {
            QueueType::Quorum => self.delivery_limit,
            QueueType::Classic => None,
        }
    }

    /// A quorum queue always carries the broker's count on a redelivery (measured); a classic
    /// queue republishes, so its count travels with the copy.
    fn unenforceable_reason(&self) -> Option<String> {
        None
    }
}
