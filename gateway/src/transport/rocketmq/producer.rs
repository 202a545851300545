//! Publishing: a `Message` as a RocketMQ message whose user properties carry the header.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rocketmq_client_rust::{ClientError, DefaultMQProducer};
use rocketmq_error::ViewValueRef;
use rocketmq_model::common::message::message_builder::MessageBuilder;
use rocketmq_model::common::message::message_single::Message as RocketMessage;

use super::{broker_error, BoxedFuture};
use crate::channel::Producer;
use crate::error::ChannelError;
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::attributes;

/// How long a send may take before it counts as failed.
const SEND_TIMEOUT_MILLIS: u64 = 5_000;

/// The message to produce to `topic`: the body as is, the header as user properties, and the
/// broker's timer delay when `delay` is non-zero.
pub fn to_rocketmq_message(topic: &str, message: &Message, delay: Duration) -> Result<RocketMessage, ChannelError> {
    let mut builder = MessageBuilder::new().topic(topic).body_slice(&message.body.bytes);
    for (name, value) in attributes::header_attributes(message) {
        // Fails only for RocketMQ's reserved property names, which no header attribute uses.
        builder = builder.raw_property(name, value).map_err(|e| broker_error(topic, "send", e))?;
    }
    if !delay.is_zero() {
        builder = builder.delay_millis(delay.as_millis().try_into().unwrap_or(u64::MAX));
    }
    builder.build().map_err(|e| broker_error(topic, "send", e))
}

/// The client's producer behind a trait object, for the reason `BoxedFuture` gives.
pub(super) trait NativeSender: Send + Sync {
    fn send_native(&self, message: RocketMessage) -> BoxedFuture<'static, Result<(), SendFailure>>;
}

/// A send that failed: the client's error as text, and whether the client refused it before
/// writing a byte of it (so that sending it again cannot deliver it twice).
#[derive(Debug)]
pub(super) struct SendFailure {
    pub refused_before_writing: bool,
    pub text: String,
}

/// The client's producer, shared by the sends in flight.
pub(super) struct ClientProducer(pub Arc<DefaultMQProducer>);

impl NativeSender for ClientProducer {
    fn send_native(&self, message: RocketMessage) -> BoxedFuture<'static, Result<(), SendFailure>> {
        send_with_timeout(self.0.clone(), message)
    }
}

fn send_with_timeout(
    producer: Arc<DefaultMQProducer>,
    message: RocketMessage,
) -> BoxedFuture<'static, Result<(), SendFailure>> {
    Box::pin(async move {
        producer
            .send_with_timeout(message, SEND_TIMEOUT_MILLIS)
            .await
            .map(drop)
            .map_err(|e| SendFailure { refused_before_writing: refused_before_writing(&e), text: super::describe(&e) })
    })
}

/// Whether the client refused the send before writing it: a connection failure in the phase
/// `closed` (the session was closed) or `before_write` (cancelled before the write began).
fn refused_before_writing(error: &ClientError) -> bool {
    if !error.is(&rocketmq_error::TRANSPORT_CONNECTION_FAILED) {
        return false;
    }
    let Ok(view) = error.shared_error().diagnostic_view() else { return false };
    let phase = view.fields().find_map(|field| match (field.name(), field.value()) {
        ("phase", ViewValueRef::Text(phase)) => Some(phase),
        _ => None,
    });
    matches!(phase, Some("closed" | "before_write"))
}

/// How long a send keeps retrying while the client refuses it before writing it.
///
/// rocketmq-client-rust 1.0.0 evicts a broken connection asynchronously: after a reset, the
/// session is retired only once its reader and writer tasks stop (up to 5 s each,
/// rocketmq-transport's `SESSION_RETIREMENT_TIMEOUT`), and until then the client hands the closed
/// session to every send, which refuses it ("session closed", phase `closed`) and does not retry
/// (its retry policy leaves connection failures to the caller). Two retirement timeouts bound the
/// wait for a fresh connection.
const REFUSED_BEFORE_WRITING_FOR: Duration = Duration::from_secs(10);

/// The pause between sends the client refused before writing.
const REFUSED_BEFORE_WRITING_PAUSE: Duration = Duration::from_millis(200);

/// Sends `message`, again while the client refuses it before writing it, for at most `bound`.
/// Only those refusals are retried, so a retry can never deliver the message twice; a send that
/// failed while writing or awaiting the broker's answer (a broken pipe, a timeout) fails as is.
async fn send_retrying_refusals(
    sender: &dyn NativeSender,
    message: RocketMessage,
    bound: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match sender.send_native(message.clone()).await {
            Ok(()) => return Ok(()),
            Err(refused) if refused.refused_before_writing && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(REFUSED_BEFORE_WRITING_PAUSE).await;
            }
            Err(failed) => return Err(failed.text),
        }
    }
}

/// Produces to the topic in each message's header (or to a given topic, for rejection copies).
#[derive(Clone)]
pub struct RocketMqProducer {
    producer: Arc<dyn NativeSender>,
    runtime: GatewayRuntime,
}

impl RocketMqProducer {
    pub(super) fn new(producer: Arc<dyn NativeSender>, runtime: GatewayRuntime) -> RocketMqProducer {
        RocketMqProducer { producer, runtime }
    }

    pub async fn publish_to(&self, topic: &str, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.send_native(to_rocketmq_message(topic, message, delay)?).await
    }

    /// Produces a RocketMQ message as given: for messages the gateway did not write.
    pub async fn send_native(&self, outgoing: RocketMessage) -> Result<(), ChannelError> {
        let topic = outgoing.topic().to_string();
        let producer = self.producer.clone();
        self.runtime
            .call(async move { send_retrying_refusals(&*producer, outgoing, REFUSED_BEFORE_WRITING_FOR).await })
            .await
            .map_err(|e| broker_error(&topic, "send", e))?;
        Ok(())
    }
}

#[async_trait]
impl Producer for RocketMqProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, Duration::ZERO).await
    }

    /// RocketMQ 5's timer messages: delivered not before the delay.
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.publish_to(&message.header.topic, message, delay).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::message::MessageType;

    /// A sender that fails with `failures` in turn, then succeeds, counting the sends.
    struct Scripted {
        failures: Mutex<Vec<SendFailure>>,
        sends: Mutex<usize>,
    }

    impl Scripted {
        fn new(failures: impl IntoIterator<Item = bool>) -> Scripted {
            let mut failures: Vec<SendFailure> = failures
                .into_iter()
                .map(|before| SendFailure { refused_before_writing: before, text: format!("before writing: {before}") })
                .collect();
            failures.reverse();
            Scripted { failures: Mutex::new(failures), sends: Mutex::new(0) }
        }

        fn sends(&self) -> usize {
            *self.sends.lock().unwrap()
        }
    }

    impl NativeSender for Scripted {
        fn send_native(&self, _message: RocketMessage) -> BoxedFuture<'static, Result<(), SendFailure>> {
            *self.sends.lock().unwrap() += 1;
            let outcome = self.failures.lock().unwrap().pop().map_or(Ok(()), Err);
            Box::pin(async move { outcome })
        }
    }

    fn native() -> RocketMessage {
        to_rocketmq_message("orders", &Message::new("orders", MessageType::Command, "x"), Duration::ZERO).unwrap()
    }

    /// The client's connection failure as its producer builds it
    /// (`default_mq_producer_impl.rs`, `producer_connection_error`).
    fn connection_failed(phase: &str) -> ClientError {
        let context = rocketmq_error::ErrorContext::new().with_text(rocketmq_error::fields::PHASE, phase);
        ClientError::from_error(
            rocketmq_error::Error::new(&rocketmq_error::TRANSPORT_CONNECTION_FAILED).with_context(context),
        )
    }

    #[test]
    fn only_a_connection_failure_before_the_write_counts_as_refused_before_writing() {
        let refused: Vec<bool> = ["closed", "before_write", "writing", "awaiting_response", "connect"]
            .into_iter()
            .map(|phase| refused_before_writing(&connection_failed(phase)))
            .collect();
        assert_eq!(refused, [true, true, false, false, false]);
        let timeout = ClientError::from_error(rocketmq_error::Error::new(&rocketmq_error::TRANSPORT_RESPONSE_TIMEOUT));
        assert!(!refused_before_writing(&timeout));
    }

    #[tokio::test]
    async fn a_send_refused_before_writing_is_sent_again_until_it_goes_through() {
        let sender = Scripted::new([true, true]);
        send_retrying_refusals(&sender, native(), Duration::from_secs(10)).await.unwrap();
        assert_eq!(sender.sends(), 3);
    }

    #[tokio::test]
    async fn a_send_that_failed_while_writing_is_never_sent_again() {
        let sender = Scripted::new([false]);
        let failed = send_retrying_refusals(&sender, native(), Duration::from_secs(10)).await.unwrap_err();
        assert_eq!((failed.as_str(), sender.sends()), ("before writing: false", 1));
    }

    #[tokio::test]
    async fn refusals_past_the_bound_fail_with_the_last_refusal() {
        let sender = Scripted::new([true; 50]);
        let failed = send_retrying_refusals(&sender, native(), Duration::from_millis(300)).await.unwrap_err();
        assert_eq!(failed, "before writing: true");
        assert!((2..=3).contains(&sender.sends()), "{} sends in 300 ms, 200 ms apart", sender.sends());
    }
}
