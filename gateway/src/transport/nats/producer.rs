//! Publishing: a message as one JetStream message on its header topic's subject, stored once the
//! stream acknowledges it.

use std::time::Duration;

use async_nats::jetstream::Context;
use async_trait::async_trait;

use super::broker_error;
use super::message::to_headers;
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::kit;

/// Publishes to the subject in each message's header topic (or to a given subject, for rejection
/// copies), waiting for the stream's acknowledgement: a message no stream stored is an error.
#[derive(Clone)]
pub struct NatsProducer {
    jetstream: Context,
    runtime: GatewayRuntime,
}

impl NatsProducer {
    pub(super) fn new(jetstream: Context, runtime: GatewayRuntime) -> NatsProducer {
        NatsProducer { jetstream, runtime }
    }

    pub async fn publish_to(&self, subject: &str, message: &Message) -> Result<(), ChannelError> {
        let (jetstream, subject_owned) = (self.jetstream.clone(), subject.to_owned());
        let (headers, payload) = (to_headers(message), message.body.bytes.clone());
        self.runtime
            .call(async move {
                let stored = jetstream.publish_with_headers(subject_owned, headers, payload.into()).await?;
                stored.await.map(drop).map_err(crate::error::BoxError::from)
            })
            .await
            .map_err(|e| broker_error(subject, "send", e))
    }
}

#[async_trait]
impl Producer for NatsProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message).await
    }

    /// Refused unless `delay` is zero: a stored message is deliverable at once.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        kit::refuse_delay(
            message,
            delay,
            "the gateway does not schedule JetStream messages: a stored message is deliverable at once",
        )?;
        self.send(message).await
    }
}
