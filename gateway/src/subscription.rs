//! What a consumer subscribes to and the retry budget it enforces.

use std::fmt;
use std::time::Duration;

/// What channel creation does about missing infrastructure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MakeChannels {
    /// Create what is missing.
    #[default]
    Create,
    /// Check that it exists; fail channel creation if it does not.
    Validate,
    /// Assume it exists; make no broker call.
    Assume,
}

impl fmt::Display for MakeChannels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MakeChannels::Create => "create",
            MakeChannels::Validate => "validate",
            MakeChannels::Assume => "assume",
        })
    }
}

/// `requeue_count` value meaning "never consult the budget".
pub const UNLIMITED_REQUEUES: i32 = -1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub name: String,
    /// Where messages are consumed from (queue, topic or subscription, by transport).
    pub routing_key: String,
    /// The retry budget R: a message is rejected with DeliveryError once its handled count
    /// reaches it. `-1` is unlimited; `0` or below `-1` rejects on the first deferral.
    pub requeue_count: i32,
    pub requeue_delay: Duration,
    pub buffer_size: usize,
    pub receive_timeout: Duration,
    pub dead_letter_routing_key: Option<String>,
    pub invalid_message_routing_key: Option<String>,
    pub make_channels: MakeChannels,
}

impl Subscription {
    /// A subscription with the defaults: an unlimited budget, no delay, one message at a time,
    /// a 100 ms receive timeout, no rejection destinations, channels created on demand.
    pub fn new(name: impl Into<String>, routing_key: impl Into<String>) -> Subscription {
        Subscription {
            name: name.into(),
            routing_key: routing_key.into(),
            requeue_count: UNLIMITED_REQUEUES,
            requeue_delay: Duration::ZERO,
            buffer_size: 1,
            receive_timeout: Duration::from_millis(100),
            dead_letter_routing_key: None,
            invalid_message_routing_key: None,
            make_channels: MakeChannels::Create,
        }
    }

    pub fn with_requeue_count(mut self, requeue_count: i32) -> Subscription {
        self.requeue_count = requeue_count;
        self
    }

    pub fn with_requeue_delay(mut self, delay: Duration) -> Subscription {
        self.requeue_delay = delay;
        self
    }

    pub fn with_dead_letter(mut self, routing_key: impl Into<String>) -> Subscription {
        self.dead_letter_routing_key = Some(routing_key.into());
        self
    }

    pub fn with_invalid_message(mut self, routing_key: impl Into<String>) -> Subscription {
        self.invalid_message_routing_key = Some(routing_key.into());
        self
    }

    pub fn with_receive_timeout(mut self, timeout: Duration) -> Subscription {
        self.receive_timeout = timeout;
        self
    }

    pub fn with_make_channels(mut self, make_channels: MakeChannels) -> Subscription {
        self.make_channels = make_channels;
        self
    }

    /// Whether a message handled `handled_count` times has spent its budget.
    pub fn budget_spent(&self, handled_count: u32) -> bool {
        self.requeue_count != UNLIMITED_REQUEUES && i64::from(handled_count) >= i64::from(self.requeue_count)
    }
}
