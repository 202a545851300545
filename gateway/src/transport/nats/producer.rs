//! Publishing: a message as one JetStream message on its header topic's subject, stored once the
//! stream acknowledges it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use async_trait::async_trait;

use super::broker_error;
use super::disconnects::Disconnects;
use super::message::to_headers;
use crate::channel::Producer;
use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::kit;

/// The headers of a message schedule (ADR-51).
const SCHEDULE: &str = "Nats-Schedule";
const SCHEDULE_TARGET: &str = "Nats-Schedule-Target";

/// The subject a delayed message waits on, `token` its last token (the message's id as a name,
/// or `*` for the stream's subjects): one per message (a schedule rolls its subject up), in the
/// topic's stream, never delivered to the topic's consumers (they filter on the topic).
pub(super) fn schedule_subject(topic: &str, token: &str) -> String {
    format!("{topic}.schedule.{token}")
}

/// Whether a server of `version` (`2.12.0`, `v2.15.3`) schedules messages: 2.12 and later.
fn schedules_messages(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.').map(|part| part.parse::<u32>().ok());
    matches!((parts.next().flatten(), parts.next().flatten()), (Some(major), Some(minor)) if (major, minor) >= (2, 12))
}

/// `instant` in RFC 3339, rounded up to the whole second (the schedule's precision).
fn schedule_instant(instant: SystemTime) -> Result<String, BoxError> {
    let since_epoch = instant.duration_since(UNIX_EPOCH)?;
    let seconds = since_epoch.as_secs() + u64::from(since_epoch.subsec_nanos() > 0);
    let at = time::OffsetDateTime::from_unix_timestamp(i64::try_from(seconds)?)?;
    Ok(at.format(&time::format_description::well_known::Rfc3339)?)
}

/// Publishes to the subject in each message's header topic (or to a given subject, for rejection
/// copies), waiting for the stream's acknowledgement: a message no stream stored is an error.
#[derive(Clone)]
pub struct NatsProducer {
    jetstream: Context,
    runtime: GatewayRuntime,
    disconnects: Disconnects,
}

impl NatsProducer {
    pub(super) fn new(jetstream: Context, runtime: GatewayRuntime, disconnects: Disconnects) -> NatsProducer {
        NatsProducer { jetstream, runtime, disconnects }
    }

    pub async fn publish_to(&self, subject: &str, message: &Message) -> Result<(), ChannelError> {
        self.store(subject.to_owned(), to_headers(message), message, subject, "send").await
    }

    /// Publishes `message`'s body with `headers` to `subject` and waits for the stream's
    /// acknowledgement; a failure is named after `channel` and `operation`.
    async fn store(
        &self,
        subject: String,
        headers: HeaderMap,
        message: &Message,
        channel: &str,
        operation: &'static str,
    ) -> Result<(), ChannelError> {
        let (jetstream, payload) = (self.jetstream.clone(), message.body.bytes.clone());
        let storing = async {
            self.runtime
                .call(async move {
                    let stored = jetstream.publish_with_headers(subject, headers, payload.into()).await?;
                    stored.await.map(drop).map_err(BoxError::from)
                })
                .await
                .map_err(|e| broker_error(channel, operation, e))
        };
        self.disconnects.across(channel, operation, storing).await
    }
}

#[async_trait]
impl Producer for NatsProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message).await
    }

    /// A message schedule (nats-server 2.12 and later, ADR-51): the message goes to
    /// `<topic>.schedule.<id>` with `Nats-Schedule: @at <instant>` and `Nats-Schedule-Target:
    /// <topic>`, and the server publishes it to the topic at that instant (rounded up to the
    /// whole second the header carries: never sooner than `delay`).
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        if delay.is_zero() {
            return self.send(message).await;
        }
        // Detected from the server, never assumed: an older one stores the message on its
        // schedule subject and never publishes it (measured on v2.11.11), a silent loss.
        let version = self.jetstream.client().server_info().version;
        if !schedules_messages(&version) {
            let why = format!("nats-server {version} does not schedule messages (2.12 and later do)");
            return Err(kit::broker_error(&message.header.topic, "send with delay", ErrorKind::Unsupported, why));
        }
        let topic = &message.header.topic;
        let at = schedule_instant(SystemTime::now() + delay).map_err(|e| broker_error(topic, "send with delay", e))?;
        let mut headers = to_headers(message);
        headers.insert(SCHEDULE, format!("@at {at}").as_str());
        headers.insert(SCHEDULE_TARGET, topic.as_str());
        let subject = schedule_subject(topic, &super::name_for(message.id()));
        self.store(subject, headers, message, topic, "send with delay").await
    }
}

#[cfg(test)]
mod tests {
    use super::schedules_messages;

    #[test]
    fn servers_from_2_12_on_schedule_messages() {
        for version in ["2.12.0", "v2.15.3", "2.13.1-RC.1", "3.0.0"] {
            assert!(schedules_messages(version), "{version}");
        }
        for version in ["2.11.11", "v2.10.24", "1.4.1", "", "unknown"] {
            assert!(!schedules_messages(version), "{version}");
        }
    }
}
