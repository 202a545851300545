//! The stream consumer: StreamingPull through the official subscriber, which keeps leases of
//! the messages it holds. Received messages wait in a small inbox until the pump asks.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_pubsub::client::Subscriber;
use google_cloud_pubsub::subscriber::handler::Handler;
use tokio::sync::mpsc;

use super::producer::GcpProducer;
use super::subscription::GcpSubscription;
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::{ChannelError, ErrorKind};
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};

/// Messages read ahead of the pump; the subscriber keeps their leases.
const INBOX: usize = 16;

/// A streamed message as the reader left it: readable, or raw with the reason it is not.
enum Inbound {
    Readable(Message),
    Unreadable(Message, MalformedMessage),
}

type Delivery = (Inbound, Handler);

pub struct StreamChannel {
    runtime: GatewayRuntime,
    counting: CountingReport,
    subscription: Subscription,
    router: GcpProducer,
    inbox: tokio::sync::Mutex<mpsc::Receiver<Delivery>>,
    /// Handlers of messages handed to the pump, by receipt.
    in_flight: Mutex<HashMap<String, Handler>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for StreamChannel {
    fn drop(&mut self) {
        // Ends the stream; unsettled messages go back to the broker when their leases lapse.
        self.reader.abort();
    }
}

/// The reader: a streamed Pub/Sub message as a `Message`, its handled count resolved with the
/// handler's delivery attempt (`None` without a DeadLetterPolicy: the header count stands).
pub fn read_streamed_message(
    message: &google_cloud_pubsub::model::Message,
    attempt: Option<i32>,
    receipt: String,
    warnings: &ReaderWarnings,
) -> Result<Message, MalformedMessage> {
    let body = std::str::from_utf8(&message.data)
        .map_err(|e| MalformedMessage { detail: format!("the data is not UTF-8: {e}") })?;
    let attribute = |name: &str| message.attributes.get(name).map(String::as_str);
    attributes::read_message(attribute, body, attempt.map(i64::from), Some(receipt), warnings)
}

fn read(
    message: &google_cloud_pubsub::model::Message,
    attempt: Option<i32>,
    receipt: String,
    source: &str,
    warnings: &ReaderWarnings,
) -> Inbound {
    match read_streamed_message(message, attempt, receipt.clone(), warnings) {
        Ok(read) => Inbound::Readable(read),
        Err(problem) => {
            let data = String::from_utf8_lossy(&message.data);
            Inbound::Unreadable(attributes::unreadable(&message.message_id, source, &data, Some(receipt)), problem)
        }
    }
}

impl StreamChannel {
    /// Subscribes to `path` (the subscription's full name) on the emulator or service at `endpoint`.
    pub(super) fn start(
        runtime: &GatewayRuntime,
        endpoint: String,
        path: String,
        gcp: &GcpSubscription,
        router: GcpProducer,
    ) -> StreamChannel {
        let (subscription, ack_deadline, max_lease) = (gcp.subscription.clone(), gcp.ack_deadline, gcp.max_lease);
        let counting = CountingReport::of(gcp);
        let (sender, inbox) = mpsc::channel(INBOX);
        let source = subscription.routing_key.clone();
        let warnings = ReaderWarnings::new(&subscription.name);
        let reader = runtime.spawn(async move {
            let subscriber = match Subscriber::builder()
                .with_endpoint(endpoint)
                .with_credentials(Anonymous::new().build())
                .build()
                .await
            {
                Ok(subscriber) => subscriber,
                Err(error) => {
                    return tracing::error!(subscription = %path, %error, "cannot start the streaming subscriber")
                }
            };
            // The stream's ack deadline follows the subscription's (the client's default is 60 s).
            let mut builder = subscriber.subscribe(path.clone()).set_max_lease_extension(ack_deadline);
            if let Some(max_lease) = max_lease {
                builder = builder.set_max_lease(max_lease);
            }
            let mut stream = builder.build();
            while let Some(item) = stream.next().await {
                match item {
                    Ok((message, handler)) => {
                        let receipt = uuid::Uuid::new_v4().to_string();
                        let delivery = read(&message, handler.delivery_attempt(), receipt, &source, &warnings);
                        if sender.send((delivery, handler)).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(subscription = %path, %error, "streaming pull failed; the subscriber retries")
                    }
                }
            }
        });
        StreamChannel {
            runtime: runtime.clone(),
            counting,
            subscription,
            router,
            inbox: tokio::sync::Mutex::new(inbox),
            in_flight: Mutex::default(),
            reader,
        }
    }

    fn take(&self, message: &Message, operation: &'static str) -> Result<Handler, ChannelError> {
        let handler = message
            .receipt
            .as_ref()
            .and_then(|receipt| self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(receipt));
        handler.ok_or_else(|| kit::not_in_flight(self.name(), operation, message))
    }

    fn hold(&self, message: &Message, handler: Handler) {
        let receipt = message.receipt.clone().expect("the reader sets a receipt");
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).insert(receipt, handler);
    }
}

#[async_trait]
impl Channel for StreamChannel {
    // A channel is named after the Pub/Sub subscription it reads.
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut inbox = self.inbox.lock().await;
        loop {
            let Ok(next) = tokio::time::timeout_at(deadline, inbox.recv()).await else { return Ok(None) };
            let Some((delivery, handler)) = next else {
                return Err(ChannelError::broker(self.name(), "receive", ErrorKind::Refused, "the stream ended"));
            };
            match delivery {
                Inbound::Readable(message) => {
                    self.hold(&message, handler);
                    return Ok(Some(message));
                }
                Inbound::Unreadable(raw, problem) => {
                    self.hold(&raw, handler);
                    kit::route_unreadable(self, &raw, problem).await?;
                }
            }
        }
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.take(message, "acknowledge")?.ack();
        Ok(())
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let handler = self.take(message, "reject")?;
        let publish = async |topic: &str, copy: Message| self.router.publish_to(topic, &copy).await;
        let settle = async move |after| {
            match after {
                AfterRouting::Acknowledge => handler.ack(),
                AfterRouting::Release => handler.nack(),
            }
            Ok(())
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// The stream has no per-message deadline: the handler (and so the lease, which the
    /// subscriber keeps extending) is held for the delay, then the message is nacked.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let handler = self.take(message, "requeue")?;
        if delay.is_zero() {
            handler.nack();
        } else {
            self.runtime.spawn(async move {
                tokio::time::sleep(delay).await;
                handler.nack();
            });
        }
        Ok(())
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.take(message, "nack")?.nack();
        Ok(())
    }

    /// Ends the stream and nacks what the pump holds unsettled, so it is delivered again at
    /// once; what the stream had buffered and nobody took comes back when its lease lapses.
    async fn close(&self) -> Result<(), ChannelError> {
        self.reader.abort();
        let held: Vec<Handler> =
            self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, h)| h).collect();
        held.into_iter().for_each(Handler::nack);
        Ok(())
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}
