//! A Pub/Sub subscription as the gateway creates and reads it: consumption, ordering, the
//! DeadLetterPolicy that makes Pub/Sub count deliveries, leases; and what it says of its counting.

use std::time::Duration;

use crate::budget::DeliveryCounting;
use crate::subscription::{MakeChannels, Subscription};

/// How a subscription's messages are consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumption {
    /// Unary Pull, ModifyAckDeadline and Acknowledge.
    Pull,
    /// StreamingPull through the official subscriber.
    Stream,
}

/// A Pub/Sub subscription: `subscription.name` is the Pub/Sub subscription, `routing_key` its topic,
/// the dead-letter and invalid-message routing keys are topics.
#[derive(Debug, Clone)]
pub struct GcpSubscription {
    pub subscription: Subscription,
    pub consumption: Consumption,
    /// Message ordering on the subscription; the partition key is the ordering key.
    pub ordering: bool,
    /// The DeadLetterPolicy's max_delivery_attempts (M), set on the dead-letter topic. Without a
    /// policy Pub/Sub reports no delivery attempt.
    pub dead_letter_policy: Option<u32>,
    /// The DeadLetterPolicy's topic where the subscription routes no rejections itself (a
    /// native-only redrive, which still makes Pub/Sub count delivery attempts). Default: the
    /// dead-letter routing key.
    pub native_dead_letter_topic: Option<String>,
    pub ack_deadline: Duration,
    /// How long an Acknowledge or ModifyAckDeadline (a pull's settlement), and each call that
    /// makes the channel (its topics, its subscription, the check that it exists), waits for
    /// its answer before failing as a `Timeout`: the generated client has no deadline of its
    /// own, and a server that stops answering must not hold a pump or its setup for ever. 60 s,
    /// as a Pull's.
    pub call_deadline: Duration,
    /// Stream only: how long the subscriber keeps extending a held message's lease (the
    /// official client's default, 60 minutes, when `None`).
    pub max_lease: Option<Duration>,
}

/// `GcpSubscription::call_deadline`'s default, also the deadline of a topic made outside a channel.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(60);

impl GcpSubscription {
    pub fn new(subscription: Subscription, consumption: Consumption) -> GcpSubscription {
        GcpSubscription {
            subscription,
            consumption,
            ordering: false,
            dead_letter_policy: None,
            native_dead_letter_topic: None,
            ack_deadline: Duration::from_secs(10),
            call_deadline: DEFAULT_CALL_DEADLINE,
            max_lease: None,
        }
    }

    pub(super) fn has_policy(&self) -> bool {
        self.dead_letter_policy.is_some() && self.policy_topic().is_some()
    }

    pub(super) fn policy_topic(&self) -> Option<&String> {
        self.subscription.dead_letter_routing_key.as_ref().or(self.native_dead_letter_topic.as_ref())
    }
}

impl DeliveryCounting for GcpSubscription {
    fn native_redrive_limit(&self) -> Option<u32> {
        let created = self.subscription.make_channels == MakeChannels::Create;
        self.dead_letter_policy.filter(|_| created && self.has_policy())
    }

    fn unenforceable_reason(&self) -> Option<String> {
        (!self.has_policy()).then(|| {
            "the subscription has no DeadLetterPolicy, so Pub/Sub reports delivery_attempt 0 and a redelivery \
             presents the same handled count"
                .to_owned()
        })
    }
}
