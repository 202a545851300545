//! Publishing: a `Message` as a row of its queue, visible at once or after its delay.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::{Client, GenericClient};

use super::broker_error;
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::{attributes, kit};

const INSERT: &str = "INSERT INTO gateway_queue (queue, visible_at, attribute_names, attribute_values, body) \
                      VALUES ($1, now() + make_interval(secs => $2), $3, $4, $5)";

/// Inserts `message` into `queue` through `client` (a connection or an open transaction),
/// visible after `delay` by the server's clock.
pub(super) async fn insert<C: GenericClient + Sync>(
    client: &C,
    queue: &str,
    message: &Message,
    delay: Duration,
) -> Result<(), tokio_postgres::Error> {
    let (names, values): (Vec<&str>, Vec<String>) = attributes::header_attributes(message).into_iter().unzip();
    let delay = delay.as_secs_f64();
    client.execute(INSERT, &[&queue, &delay, &names, &values, &message.body.bytes]).await.map(drop)
}

/// How long a send waits for the server: as a channel's calls (`PostgresSubscription::call_deadline`).
const SEND_DEADLINE: Duration = Duration::from_secs(30);

/// Inserts into the queue in each message's header topic.
#[derive(Clone)]
pub struct PostgresProducer {
    client: Arc<Client>,
    runtime: GatewayRuntime,
    call_deadline: Duration,
}

impl PostgresProducer {
    pub(super) fn new(client: Arc<Client>, runtime: GatewayRuntime) -> PostgresProducer {
        PostgresProducer { client, runtime, call_deadline: SEND_DEADLINE }
    }

    /// This producer with its sends failing as a `Timeout` once `deadline` has passed (30 s by
    /// default): tokio-postgres has no deadline of its own.
    pub fn with_call_deadline(self, deadline: Duration) -> PostgresProducer {
        PostgresProducer { call_deadline: deadline, ..self }
    }

    /// Inserts `message` into `queue`, visible after `delay`. A send cut off at its deadline may
    /// still commit (the insert reached the server): the message is then there once, and a retry
    /// sends it twice (handlers are at-least-once).
    pub async fn publish_to(&self, queue: &str, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let (client, target, message) = (self.client.clone(), queue.to_owned(), message.clone());
        let inserting = async move { insert(&*client, &target, &message, delay).await };
        kit::within(&self.runtime, queue, "send", self.call_deadline, inserting)
            .await?
            .map_err(|e| broker_error(queue, "send", e))
    }
}

#[async_trait]
impl Producer for PostgresProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, Duration::ZERO).await
    }

    /// The row's `visible_at` is now + the delay: received not before it.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, delay).await
    }
}
