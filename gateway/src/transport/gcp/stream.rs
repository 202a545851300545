//! The stream consumer: StreamingPull through the official subscriber, which keeps leases of
//! the messages it holds. Received messages wait in a small inbox until the pump asks.
//!
//! Two promises keep the broker's count exact around a consumer's lifetime (DC-2, DC-4 on
//! pstest): the stream opens on the first `receive`, so a channel that has not asked yet takes
//! no delivery from another consumer; and a release (nack, requeue at once, a reject that
//! releases) is sent when the channel is next asked for a message or closed, after the stream
//! has ended, so a release is never served back into a stream that is about to close, where the
//! broker would count a delivery no one saw.
//!
//! "After the stream has ended" is the broker's view, not ours: dropping the stream only starts
//! its end (the subscriber's tasks then send it over the network), and neither the official
//! subscriber nor gRPC tells the client when the broker has dropped it. Traced on pstest, a nack
//! sent as the stream was dropped reached the broker up to a millisecond before the stream's end
//! did, in either order; a delivery round (every 10 ms there) falling in between served the
//! release back into the dying stream. So the subscriber waits for our processing
//! (`ShutdownBehavior::WaitForProcessing`: its own shutdown nacks nothing this channel holds),
//! and `close` sends what it gives back `STREAM_END_GRACE` after dropping the stream.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_pubsub::client::Subscriber;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::{ShutdownBehavior, ShutdownToken};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
/// How long `close` waits for the subscriber to send its pending acks and nacks.
const SHUTDOWN_CEILING: Duration = Duration::from_secs(5);
/// How long `close` waits, after dropping the stream, before it gives anything back: the time
/// the stream's end takes to reach the broker (see the module's comment; BENCHMARKS.md has the
/// figures it was derived from).
const STREAM_END_GRACE: Duration = Duration::from_millis(200);
/// The subscriber's own `max_lease` when the subscription sets none (its documented default).
const CLIENT_MAX_LEASE: Duration = Duration::from_secs(60 * 60);

/// A streamed message as the reader left it: readable, or raw with the reason it is not.
enum Inbound {
    Readable(Message),
    Unreadable(Message, MalformedMessage),
}

/// A streamed message, its handler, and when the stream gave it to the reader.
type Delivery = (Inbound, Handler, tokio::time::Instant);

/// What the reader needs to open the stream, kept until the first `receive`.
struct StreamStart {
    endpoint: String,
    path: String,
    ack_deadline: Duration,
    max_lease: Option<Duration>,
    sender: mpsc::Sender<Delivery>,
}

/// The stream's life: opened by the first `receive`, ended once by `close`.
enum Reader {
    NotStarted(StreamStart),
    Reading(tokio::task::JoinHandle<()>),
    Closed,
}

pub struct StreamChannel {
    runtime: GatewayRuntime,
    counting: CountingReport,
    subscription: Subscription,
    router: GcpProducer,
    inbox: tokio::sync::Mutex<mpsc::Receiver<Delivery>>,
    /// How long the subscriber extends a lease (`GcpSubscription::max_lease`); a message still in
    /// the inbox after it may already be with another consumer.
    max_lease: Duration,
    /// Handlers of messages handed to the pump, by receipt.
    in_flight: Mutex<HashMap<String, Handler>>,
    /// Releases not yet sent: the next `receive` or `close` sends them.
    releases: Mutex<Vec<Handler>>,
    /// The task that owns the stream; `close` ends it before anything else.
    reader: Mutex<Reader>,
    /// Shuts the stream down, once the reader has started it.
    shutdown: std::sync::Arc<Mutex<Option<ShutdownToken>>>,
    /// Cancelled by `close` (or a drop): a delayed requeue still waiting gives its message back
    /// then, as everything else held is.
    closing: CancellationToken,
}

impl Drop for StreamChannel {
    fn drop(&mut self) {
        // Ends the stream; the handlers dropped with the channel (held unsettled, a release kept
        // for the next receive, read ahead) nack what they hold, and a delayed requeue gives its
        // message back now: all of it is delivered again at once while the process lives, at its
        // lease's lapse if it exits. Unlike `close`, a drop cannot wait for the broker to see the
        // stream's end first.
        if let Reader::Reading(reader) = self.reader.get_mut().unwrap_or_else(|p| p.into_inner()) {
            reader.abort();
        }
        self.closing.cancel();
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
    /// A channel on `path` (the subscription's full name) on the emulator or service at
    /// `endpoint`; its stream opens on the first `receive`.
    pub(super) fn start(
        runtime: &GatewayRuntime,
        endpoint: String,
        path: String,
        gcp: &GcpSubscription,
        router: GcpProducer,
    ) -> StreamChannel {
        let (sender, inbox) = mpsc::channel(INBOX);
        let start = StreamStart { endpoint, path, ack_deadline: gcp.ack_deadline, max_lease: gcp.max_lease, sender };
        StreamChannel {
            runtime: runtime.clone(),
            counting: CountingReport::of(gcp),
            subscription: gcp.subscription.clone(),
            router,
            inbox: tokio::sync::Mutex::new(inbox),
            max_lease: gcp.max_lease.unwrap_or(CLIENT_MAX_LEASE),
            in_flight: Mutex::default(),
            releases: Mutex::default(),
            reader: Mutex::new(Reader::NotStarted(start)),
            shutdown: std::sync::Arc::new(Mutex::new(None)),
            closing: CancellationToken::new(),
        }
    }

    /// Opens the stream if no `receive` has yet; a closed channel stays closed.
    fn open(&self) {
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*reader, Reader::NotStarted(_)) {
            return;
        }
        let Reader::NotStarted(start) = std::mem::replace(&mut *reader, Reader::Closed) else { unreachable!() };
        let source = self.subscription.routing_key.clone();
        let warnings = ReaderWarnings::new(&self.subscription.name);
        let token = self.shutdown.clone();
        let StreamStart { endpoint, path, ack_deadline, max_lease, sender } = start;
        *reader = Reader::Reading(self.runtime.spawn(async move {
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
            // The subscriber's shutdown (started when the stream is dropped) waits until every
            // handler is settled or dropped: `close` decides when what it holds goes back.
            let mut builder = subscriber
                .subscribe(path.clone())
                .set_max_lease_extension(ack_deadline)
                .set_shutdown_behavior(ShutdownBehavior::WaitForProcessing);
            if let Some(max_lease) = max_lease {
                builder = builder.set_max_lease(max_lease);
            }
            let mut stream = builder.build();
            *token.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream.shutdown_token());
            while let Some(item) = stream.next().await {
                match item {
                    Ok((message, handler)) => {
                        let receipt = uuid::Uuid::new_v4().to_string();
                        let delivery = read(&message, handler.delivery_attempt(), receipt, &source, &warnings);
                        let received = tokio::time::Instant::now();
                        if sender.send((delivery, handler, received)).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(subscription = %path, %error, "streaming pull failed; the subscriber retries")
                    }
                }
            }
        }));
    }

    /// Keeps a release until the next `receive` or `close` (the module's second promise).
    fn release(&self, handler: Handler) {
        self.releases.lock().unwrap_or_else(|p| p.into_inner()).push(handler);
    }

    /// Sends the releases kept so far.
    fn send_releases(&self) {
        let releases = std::mem::take(&mut *self.releases.lock().unwrap_or_else(|p| p.into_inner()));
        releases.into_iter().for_each(Handler::nack);
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
        self.send_releases();
        self.open();
        let mut inbox = self.inbox.lock().await;
        loop {
            let Ok(next) = tokio::time::timeout_at(deadline, inbox.recv()).await else { return Ok(None) };
            let Some((delivery, handler, received)) = next else {
                return Err(ChannelError::broker(self.name(), "receive", ErrorKind::Refused, "the stream ended"));
            };
            if received.elapsed() >= self.max_lease {
                // The subscriber stopped extending this read-ahead message's lease at max_lease,
                // so the broker may have delivered it again, to another consumer too, with a
                // grown count: this copy's count is stale (measured on pstest: it presented 0
                // after another process's delivery and release, DC-4). Dropping the handler
                // nacks it; the broker's next delivery carries the count.
                tracing::debug!(subscription = %self.name(), "a read-ahead message outlived its lease; dropped");
                drop(handler);
                continue;
            }
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
                AfterRouting::Release => self.release(handler),
            }
            Ok(())
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// The stream has no per-message deadline: the handler (and so the lease, which the
    /// subscriber keeps extending) is held for the delay, then the message is nacked; closing
    /// the channel nacks it at once.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let handler = self.take(message, "requeue")?;
        if delay.is_zero() {
            self.release(handler);
        } else {
            let closing = self.closing.clone();
            self.runtime.spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = closing.cancelled() => {}
                }
                handler.nack();
            });
        }
        Ok(())
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        let handler = self.take(message, "nack")?;
        self.release(handler);
        Ok(())
    }

    /// Ends the stream, waits `STREAM_END_GRACE` for the broker to see it end, then gives back
    /// everything held (the releases kept, what the pump holds unsettled, a delayed requeue
    /// still waiting, what was read ahead) and shuts the subscriber down: it sends every pending
    /// ack and nack, so all of it is delivered again at once (within `SHUTDOWN_CEILING`; past
    /// it, at the lapse of its lease). Awaited, so a process that exits after closing loses no
    /// settlement it made.
    async fn close(&self) -> Result<(), ChannelError> {
        // The stream ends first. A nack the broker receives while the stream is open can be
        // served straight back into it; arriving as the subscriber shuts down, that delivery is
        // taken by no one and waits out the ack deadline, counted (DC-4 on pstest: "not
        // redelivered within 5.72 s of the other process's release", 2 in 6,100 runs under the
        // all-transport load). Dropping the stream (the reader task owns it) starts its end.
        let reader = std::mem::replace(&mut *self.reader.lock().unwrap_or_else(|p| p.into_inner()), Reader::Closed);
        let Reader::Reading(reader) = reader else { return Ok(()) };
        reader.abort();
        let _ = reader.await;
        self.runtime.call(tokio::time::sleep(STREAM_END_GRACE)).await;
        self.send_releases();
        let held: Vec<Handler> =
            self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, h)| h).collect();
        held.into_iter().for_each(Handler::nack);
        self.closing.cancel();
        let mut inbox = self.inbox.lock().await;
        inbox.close();
        while let Ok((_, read_ahead, _)) = inbox.try_recv() {
            read_ahead.nack();
        }
        drop(inbox);
        let token = self.shutdown.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(token) = token {
            let shut = self.runtime.call(async move { tokio::time::timeout(SHUTDOWN_CEILING, token.shutdown()).await });
            if shut.await.is_err() {
                tracing::warn!(subscription = %self.name(), "the stream did not shut down within {SHUTDOWN_CEILING:?}");
            }
        }
        Ok(())
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}
