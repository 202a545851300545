//! One conformance cell's world: its subscription, channel, producer and rejection
//! destinations under unique names, with the bounded polls and assertions templates use.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gateway::blocking::runtime;
use gateway::{Blocking, BlockingChannel, Channel, ChannelError, Message, MessageType, Producer, Subscription};

use crate::assertion::MessageAssertion;
use crate::ceiling::step;

/// How often templates look for an arrival.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// How long a cell waits for one arrival, and for one routed copy, before it fails. Only a
/// failing cell waits them out, so they bound what a defect costs a mutation run, not a healthy run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    pub arrival: Duration,
    pub rejection: Duration,
}

impl Ceilings {
    /// Room for a broker under a whole matrix: a lapse, a redelivery, a slow dead-letter route.
    pub const BROKER: Ceilings = Ceilings { arrival: Duration::from_secs(30), rejection: Duration::from_secs(60) };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Reactor,
    Proactor,
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Variant::Reactor => "reactor",
            Variant::Proactor => "proactor",
        })
    }
}

/// What a behaviour needs of its cell; the provider decides how the transport provides it.
#[derive(Debug, Clone)]
pub struct CellSpec {
    pub behaviour: &'static str,
    pub variant: Variant,
    pub dead_letter: bool,
    pub invalid_channel: bool,
    /// The budget R; `-1` unlimited. A provider with a native redrive limit sets M above it.
    pub requeue_count: i32,
    /// The lease the manifest gives the configuration (`lease_ms`; `Some(None)`: no lease), as a
    /// generated cell declares it; the provider's own lease must be the same (`builder::build`
    /// checks). `None`: not declared (a bespoke test).
    pub lease: Option<Option<Duration>>,
}

impl CellSpec {
    pub fn new(behaviour: &'static str, variant: Variant) -> CellSpec {
        CellSpec { behaviour, variant, dead_letter: false, invalid_channel: false, requeue_count: -1, lease: None }
    }

    /// Declares the manifest's lease for the configuration (see [`CellSpec::lease`]).
    pub fn with_lease(mut self, lease: Option<Duration>) -> CellSpec {
        self.lease = Some(lease);
        self
    }

    pub fn with_dead_letter(mut self) -> CellSpec {
        self.dead_letter = true;
        self
    }

    pub fn with_invalid_channel(mut self) -> CellSpec {
        self.invalid_channel = true;
        self
    }

    pub fn with_budget(mut self, requeue_count: i32) -> CellSpec {
        self.requeue_count = requeue_count;
        self
    }

    /// A name no other cell (or run) uses, readable in a broker console.
    pub fn unique_name(&self, configuration: &str) -> String {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        format!("{configuration}-{}-{}-{suffix}", self.behaviour.to_ascii_lowercase(), self.variant)
    }
}

/// Makes a fresh channel on the cell's subscription, creating nothing (the broker has it all):
/// the consumer a restarted process would be.
/// Opens another channel on the cell's subscription, or says why the transport refuses one.
pub type Successor = Box<
    dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = Result<Arc<dyn Channel>, ChannelError>> + Send>> + Send + Sync,
>;

/// Releases what a provider created for a cell.
#[async_trait]
pub trait Teardown: Send + Sync {
    async fn teardown(&self);
}

/// What a provider hands back for a cell.
pub struct CellParts {
    /// The cell's unique name ([`CellSpec::unique_name`]), from which its broker derives its names.
    pub unique: String,
    pub subscription: Subscription,
    /// The routing key messages are published to (a queue, or a topic feeding the queue).
    pub publish_topic: String,
    pub channel: Arc<dyn Channel>,
    pub producer: Arc<dyn Producer>,
    pub dead_letter: Option<Arc<dyn Channel>>,
    pub invalid: Option<Arc<dyn Channel>>,
    pub assertion: Arc<dyn MessageAssertion>,
    pub ceilings: Ceilings,
    pub teardown: Option<Box<dyn Teardown>>,
    pub successor: Successor,
}

pub struct Cell {
    parts: CellParts,
    /// The consumer the cell's steps use: the channel it was built with, until a [`Cell::restart`].
    consumer: Mutex<Arc<dyn Channel>>,
    /// Second consumers made by [`Cell::competitor`], closed before settlement is watched.
    competitors: Mutex<Vec<Arc<dyn Channel>>>,
}

/// Receives until the message with `id` arrives or `ceiling` passes, polling every
/// `POLL_INTERVAL`. Other messages are released (a stray on a unique channel is not ours to settle).
async fn poll_for(channel: &dyn Channel, id: &str, ceiling: Duration, mut guard: impl FnMut()) -> Option<Message> {
    let _step = step(|| format!("{id} to arrive on {} (polling for up to {ceiling:?})", channel.name()));
    let deadline = Instant::now() + ceiling;
    while Instant::now() < deadline {
        guard();
        match channel.receive(POLL_INTERVAL).await {
            Ok(Some(message)) if message.id() == id => return Some(message),
            Ok(Some(stray)) => {
                let _ = channel.nack(&stray).await;
            }
            Ok(None) => {}
            Err(error) => panic!("receive on {} failed: {error}", channel.name()),
        }
    }
    None
}

/// Receives on `channel` until `window` has passed; any arrival fails the test.
async fn assert_empty(channel: &dyn Channel, window: Duration, what: &str) {
    let _step = step(|| format!("{} to stay empty for {window:?}", channel.name()));
    let deadline = Instant::now() + window;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match channel.receive(left.min(POLL_INTERVAL)).await {
            Ok(None) => {}
            Ok(Some(message)) => panic!("{} {what} {} (watched for {window:?})", message.id(), channel.name()),
            Err(error) => panic!("receive on {} failed: {error}", channel.name()),
        }
    }
}

impl From<CellParts> for Cell {
    fn from(parts: CellParts) -> Cell {
        Cell::new(parts)
    }
}

impl Cell {
    pub fn new(parts: CellParts) -> Cell {
        let consumer = Mutex::new(parts.channel.clone());
        Cell { parts, consumer, competitors: Mutex::default() }
    }

    pub fn subscription(&self) -> &Subscription {
        &self.parts.subscription
    }

    /// The cell's consumer: the channel it was built with, or the one that replaced it at the
    /// last [`Cell::restart`].
    pub fn channel(&self) -> Arc<dyn Channel> {
        self.consumer.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The consumer restarts, as a process that stops and starts again: the cell's channel is
    /// closed (what it holds unsettled goes back to the broker, at once or when its lease lapses)
    /// and a fresh channel on the same subscription, made as a new process would make it,
    /// becomes the cell's channel.
    pub async fn restart(&self) {
        let old = self.channel();
        let closing = step(|| format!("closing {} to restart its consumer", old.name()));
        old.close().await.unwrap_or_else(|e| panic!("closing {} failed: {e}", old.name()));
        drop(closing);
        let _opening = step(|| format!("a fresh channel on {} (the restarted consumer)", old.name()));
        let fresh = self.successor().await;
        *self.consumer.lock().unwrap_or_else(|p| p.into_inner()) = fresh;
    }

    /// A second consumer of the cell's subscription on a channel of its own (as another pod
    /// would run), closed by [`Cell::assert_source_settled`].
    pub async fn competitor(&self) -> Arc<dyn Channel> {
        let _step = step(|| format!("a second consumer on {}", self.parts.channel.name()));
        let competitor = self.successor().await;
        self.competitors.lock().unwrap_or_else(|p| p.into_inner()).push(competitor.clone());
        competitor
    }

    /// A second consumer of the cell's subscription, opened while the cell's channel is open, must
    /// be refused (a transport that gives a subscription one consumer at a time); returns the
    /// refusal.
    pub async fn refused_competitor(&self) -> ChannelError {
        let _step = step(|| format!("a second consumer on {}, to be refused", self.parts.channel.name()));
        match (self.parts.successor)().await {
            Err(refusal) => refusal,
            Ok(competitor) => {
                let _ = competitor.close().await;
                panic!("a second consumer of {} was opened while the cell's consumer holds it", competitor.name())
            }
        }
    }

    /// Another channel on the cell's subscription; a refusal fails the test.
    async fn successor(&self) -> Arc<dyn Channel> {
        (self.parts.successor)()
            .await
            .unwrap_or_else(|e| panic!("opening a channel on {}: {e}", self.parts.channel.name()))
    }

    /// Another process (this test binary run again as a peer, see [`crate::peer`]) receives `id`
    /// on the cell's subscription and releases it `releases` times, then exits; returns the
    /// handled counts it was presented. `test` is the cell's test path
    /// (`concat!(module_path!(), "::<fn>")`), which the peer runs.
    pub async fn release_elsewhere(&self, test: &'static str, id: &str, releases: u32, arrival: Duration) -> Vec<u32> {
        let _step =
            step(|| format!("another process releasing {id} {releases} times (each arriving within {arrival:?})"));
        let (unique, id) = (self.parts.unique.clone(), id.to_owned());
        tokio::task::spawn_blocking(move || crate::peer::release_elsewhere(test, &unique, &id, releases, arrival))
            .await
            .unwrap_or_else(|panicked| std::panic::resume_unwind(panicked.into_panic()))
    }

    /// Receives until each of `ids` has arrived once, holding them all unsettled, within
    /// `ceiling`; returns them in the order of `ids`. Anything else arriving, or one of them
    /// arriving twice, fails the test: the cell's subscription carries only the cell's messages.
    pub async fn receive_each(&self, ids: &[&str], ceiling: Duration) -> Vec<Message> {
        let channel = self.channel();
        let _step =
            step(|| format!("{} to arrive on {} (polling for up to {ceiling:?})", ids.join(", "), channel.name()));
        let deadline = Instant::now() + ceiling;
        let mut held: BTreeMap<String, Message> = BTreeMap::new();
        while held.len() < ids.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let missing: Vec<&str> = ids.iter().copied().filter(|id| !held.contains_key(*id)).collect();
                panic!("{} did not arrive on {} within {ceiling:?}", missing.join(", "), channel.name());
            }
            match channel.receive(left.min(POLL_INTERVAL)).await {
                Ok(Some(message)) if held.contains_key(message.id()) => {
                    panic!("{} arrived on {} a second time while held unsettled", message.id(), channel.name())
                }
                Ok(Some(message)) if ids.contains(&message.id()) => {
                    held.insert(message.id().to_owned(), message);
                }
                Ok(Some(other)) => {
                    panic!("{} arrived on {}; expected only {}", other.id(), channel.name(), ids.join(", "))
                }
                Ok(None) => {}
                Err(error) => panic!("receive on {} failed: {error}", channel.name()),
            }
        }
        ids.iter().map(|id| held.remove(*id).expect("every id was held")).collect()
    }

    /// A message of the shape every behaviour sends: a JSON body, a correlation id, a partition
    /// key, a reply-to and one bag entry.
    pub fn message(&self) -> Message {
        let mut message = Message::new(&self.parts.publish_topic, MessageType::Command, Vec::new());
        message.body.bytes = format!("{{\"order\":\"{}\"}}", message.header.id).into_bytes();
        message.body.content_type = "application/json".into();
        message.header.content_type = "application/json".into();
        message.header.correlation_id = Some(uuid::Uuid::new_v4().to_string());
        message.header.partition_key = Some("conformance".into());
        message.header.reply_to = Some(format!("{}-replies", self.parts.publish_topic));
        message.header.bag.insert("orderType".into(), "express".into());
        message
    }

    pub async fn send(&self, message: &Message) {
        let _step = step(|| format!("sending {} to {}", message.id(), self.parts.publish_topic));
        if let Err(error) = self.parts.producer.send(message).await {
            panic!("sending {} failed: {error}", message.id());
        }
    }

    pub async fn send_with_delay(&self, message: &Message, delay: Duration) {
        let _step =
            step(|| format!("sending {} with a delay of {delay:?} to {}", message.id(), self.parts.publish_topic));
        if let Err(error) = self.parts.producer.send_with_delay(message, delay).await {
            panic!("sending {} with a delay of {delay:?} failed: {error}", message.id());
        }
    }

    /// How long one arrival may take on this cell's broker ([`Ceilings`]).
    pub fn arrival_ceiling(&self) -> Duration {
        self.parts.ceilings.arrival
    }

    /// The next delivery of `id` on the cell's channel; panics after the arrival ceiling.
    pub async fn receive(&self, id: &str) -> Message {
        let ceiling = self.arrival_ceiling();
        self.receive_within(id, ceiling)
            .await
            .unwrap_or_else(|| panic!("{id} did not arrive on {} within {ceiling:?}", self.parts.channel.name()))
    }

    pub async fn receive_within(&self, id: &str, ceiling: Duration) -> Option<Message> {
        poll_for(&*self.channel(), id, ceiling, || {}).await
    }

    fn destination(&self, invalid: bool) -> &dyn Channel {
        let (destination, what) =
            if invalid { (&self.parts.invalid, "invalid-message") } else { (&self.parts.dead_letter, "dead-letter") };
        destination.as_deref().unwrap_or_else(|| panic!("the cell was built without a {what} channel"))
    }

    async fn rejected_copy(&self, invalid: bool, id: &str, guard: impl FnMut()) -> Message {
        let destination = self.destination(invalid);
        let ceiling = self.parts.ceilings.rejection;
        let copy = poll_for(destination, id, ceiling, guard)
            .await
            .unwrap_or_else(|| panic!("no copy of {id} reached {} within {ceiling:?}", destination.name()));
        let _step = step(|| format!("acknowledging the copy of {id} on {}", destination.name()));
        destination.acknowledge(&copy).await.expect("acknowledging the rejected copy");
        copy
    }

    /// The copy of `id` on the dead-letter channel; panics after the rejection ceiling.
    pub async fn dead_letter_copy(&self, id: &str) -> Message {
        self.rejected_copy(false, id, || {}).await
    }

    /// As `dead_letter_copy`, running `guard` before every poll so a test can fail early.
    pub async fn dead_letter_copy_while(&self, id: &str, guard: impl FnMut()) -> Message {
        self.rejected_copy(false, id, guard).await
    }

    /// The copy of `id` on the invalid-message channel; panics after the rejection ceiling.
    pub async fn invalid_copy(&self, id: &str) -> Message {
        self.rejected_copy(true, id, || {}).await
    }

    /// The copy of `id` on the dead-letter channel, read twice: released (nack) after the first
    /// read, so a broker-counted dead-letter channel counts a second delivery, then acknowledged.
    /// The release must bring it back within `at_once`, before the reader's lease could lapse.
    pub async fn dead_letter_copy_twice(&self, id: &str, at_once: Duration) -> [Message; 2] {
        let destination = self.destination(false);
        let ceiling = self.parts.ceilings.rejection;
        let first = poll_for(destination, id, ceiling, || {})
            .await
            .unwrap_or_else(|| panic!("no copy of {id} reached {} within {ceiling:?}", destination.name()));
        let releasing = step(|| format!("releasing the copy of {id} on {}", destination.name()));
        destination.nack(&first).await.expect("releasing the rejected copy");
        drop(releasing);
        let again = poll_for(destination, id, at_once, || {}).await.unwrap_or_else(|| {
            panic!("the released copy of {id} did not come back to {} within {at_once:?}", destination.name())
        });
        let _step = step(|| format!("acknowledging the copy of {id} on {}", destination.name()));
        destination.acknowledge(&again).await.expect("acknowledging the rejected copy");
        [first, again]
    }

    /// The cell's messages are settled: the cell's channel and every competitor are closed
    /// (what they hold unsettled goes back to the broker, as when a consumer stops), then a fresh
    /// channel on the same subscription receives nothing for `window`. Closing is what shows an
    /// unsettled message on a broker without a lease, which leaves a delivery with the open
    /// channel holding it. The cell's channels are not used afterwards.
    pub async fn assert_source_settled(&self, window: Duration) {
        let competitors = std::mem::take(&mut *self.competitors.lock().unwrap_or_else(|p| p.into_inner()));
        for channel in competitors.iter().chain([&self.channel()]) {
            let _closing = step(|| format!("closing {}", channel.name()));
            channel.close().await.unwrap_or_else(|e| panic!("closing {} failed: {e}", channel.name()));
        }
        let channel = self.channel();
        let opening = step(|| format!("a fresh channel on {}", channel.name()));
        let fresh = self.successor().await;
        drop(opening);
        assert_empty(&*fresh, window, "was left unsettled on").await;
        fresh.close().await.unwrap_or_else(|e| panic!("closing the fresh {} failed: {e}", fresh.name()));
    }

    /// Nothing more arrives on the dead-letter channel for `window`: one copy was routed.
    pub async fn assert_dead_letter_empty(&self, window: Duration) {
        assert_empty(self.destination(false), window, "was routed a second time to").await
    }

    /// Nothing more arrives on the invalid-message channel for `window`: one copy was routed.
    pub async fn assert_invalid_empty(&self, window: Duration) {
        assert_empty(self.destination(true), window, "was routed a second time to").await
    }

    /// The transport's message assertion.
    pub fn assert_same(&self, sent: &Message, received: &Message) {
        self.parts.assertion.assert_same(sent, received);
    }

    /// a first delivery presents handled count 0, and is otherwise the message sent.
    pub fn assert_first_delivery(&self, sent: &Message, received: &Message) {
        assert_eq!(received.header.handled_count, 0, "a first delivery of {} presents handled count 0", sent.id());
        self.assert_same(sent, received);
    }

    pub async fn finish(self) {
        let _step = step(|| format!("the teardown of the cell on {}", self.parts.channel.name()));
        if let Some(teardown) = &self.parts.teardown {
            teardown.teardown().await;
        }
    }
}

/// The Reactor's view of a cell: the same operations, blocking.
pub struct BlockingCell {
    cell: Cell,
}

fn block<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

impl BlockingCell {
    pub fn new(cell: Cell) -> BlockingCell {
        BlockingCell { cell }
    }

    pub fn subscription(&self) -> &Subscription {
        self.cell.subscription()
    }

    pub fn arrival_ceiling(&self) -> Duration {
        self.cell.arrival_ceiling()
    }

    /// The cell's consumer, blocking (made anew after a [`BlockingCell::restart`]).
    pub fn channel(&self) -> Arc<dyn BlockingChannel> {
        Arc::new(Blocking::new(self.cell.channel()))
    }

    pub fn restart(&self) {
        block(self.cell.restart())
    }

    pub fn competitor(&self) -> Arc<dyn BlockingChannel> {
        Arc::new(Blocking::new(block(self.cell.competitor())))
    }

    pub fn refused_competitor(&self) -> ChannelError {
        block(self.cell.refused_competitor())
    }

    pub fn release_elsewhere(&self, test: &'static str, id: &str, releases: u32, arrival: Duration) -> Vec<u32> {
        block(self.cell.release_elsewhere(test, id, releases, arrival))
    }

    pub fn receive_each(&self, ids: &[&str], ceiling: Duration) -> Vec<Message> {
        block(self.cell.receive_each(ids, ceiling))
    }

    pub fn message(&self) -> Message {
        self.cell.message()
    }

    pub fn send(&self, message: &Message) {
        block(self.cell.send(message))
    }

    pub fn send_with_delay(&self, message: &Message, delay: Duration) {
        block(self.cell.send_with_delay(message, delay))
    }

    pub fn receive(&self, id: &str) -> Message {
        block(self.cell.receive(id))
    }

    pub fn receive_within(&self, id: &str, ceiling: Duration) -> Option<Message> {
        block(self.cell.receive_within(id, ceiling))
    }

    pub fn dead_letter_copy(&self, id: &str) -> Message {
        block(self.cell.dead_letter_copy(id))
    }

    pub fn dead_letter_copy_while(&self, id: &str, guard: impl FnMut()) -> Message {
        block(self.cell.dead_letter_copy_while(id, guard))
    }

    pub fn invalid_copy(&self, id: &str) -> Message {
        block(self.cell.invalid_copy(id))
    }

    pub fn dead_letter_copy_twice(&self, id: &str, at_once: Duration) -> [Message; 2] {
        block(self.cell.dead_letter_copy_twice(id, at_once))
    }

    pub fn assert_source_settled(&self, window: Duration) {
        block(self.cell.assert_source_settled(window))
    }

    pub fn assert_dead_letter_empty(&self, window: Duration) {
        block(self.cell.assert_dead_letter_empty(window))
    }

    pub fn assert_invalid_empty(&self, window: Duration) {
        block(self.cell.assert_invalid_empty(window))
    }

    pub fn assert_same(&self, sent: &Message, received: &Message) {
        self.cell.assert_same(sent, received)
    }

    pub fn assert_first_delivery(&self, sent: &Message, received: &Message) {
        self.cell.assert_first_delivery(sent, received)
    }

    pub fn finish(self) {
        block(self.cell.finish())
    }
}
