//! A Kafka subscription as the gateway reads it: a consumer group on a topic, and the group's
//! session bounds.

use std::time::Duration;

use crate::subscription::Subscription;

/// A Kafka subscription: `subscription.name` is the consumer group, `routing_key` the topic,
/// the dead-letter and invalid-message routing keys are topics.
#[derive(Debug, Clone)]
pub struct KafkaSubscription {
    pub subscription: Subscription,
    /// The group session timeout: how long the coordinator waits for a silent member before it
    /// moves the member's partitions to another (and its uncommitted records with them).
    pub session_timeout: Duration,
    /// How long a settlement's commit waits for the node before failing as a `Timeout`:
    /// librdkafka's synchronous commit would wait out its socket timeout (60 s). 10 s.
    pub call_deadline: Duration,
}

impl KafkaSubscription {
    pub fn new(subscription: Subscription) -> KafkaSubscription {
        KafkaSubscription { subscription, session_timeout: Duration::from_secs(45), call_deadline: super::CALL_TIMEOUT }
    }
}
