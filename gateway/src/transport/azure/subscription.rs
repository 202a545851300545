//! An Azure queue subscription as the gateway reads it (the queue, the lease, the call
//! deadline), and what it says of its counting.

use std::time::Duration;

use crate::budget::DeliveryCounting;
use crate::subscription::Subscription;

/// An Azure queue subscription: `subscription.name` names the channel, `routing_key` is the
/// queue it consumes; the dead-letter and invalid-message routing keys are queues too.
#[derive(Debug, Clone)]
pub struct AzureQueueSubscription {
    pub subscription: Subscription,
    /// The visibility timeout each receive sets (whole seconds, at least 1): how long a received
    /// message stays invisible before the service hands it out again, counted.
    pub lease: Duration,
    /// How long any call waits for the service's answer before failing as a `Timeout`: 30 s, as
    /// the SQS transport's.
    pub call_deadline: Duration,
}

impl AzureQueueSubscription {
    pub fn new(subscription: Subscription) -> AzureQueueSubscription {
        AzureQueueSubscription { subscription, lease: Duration::from_secs(30), call_deadline: Duration::from_secs(30) }
    }
}

impl DeliveryCounting for AzureQueueSubscription {
    /// Azure queues have no delivery limit of their own: the pump's budget is the only one.
    fn native_redrive_limit(&self) -> Option<u32> {
        None
    }

    /// Every message handed out carries its `DequeueCount`.
    fn unenforceable_reason(&self) -> Option<String> {
        None
    }
}
