//! The message pumps: the Reactor (a blocking loop on its own thread) and the Proactor (a tokio
//! task). Both call `decide`, the one place that turns a handler's outcome into a channel action,
//! so their semantics cannot drift; the pump is the only delivery-budget enforcer.
//!
//! Both stop through a `CancellationToken`, and their `stop` is bounded: it waits at most a limit
//! (`STOP_LIMIT` by default, or the one given to `stop_within`) and then reports `PumpStuck`,
//! naming the message still in the pump's hands, instead of blocking forever.

mod proactor;
mod reactor;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::message::Message;
use crate::rejection::Rejection;
use crate::subscription::Subscription;

pub use proactor::{Proactor, ProactorHandle};
pub use reactor::{Reactor, ReactorHandle};

/// How long `stop` gives a pump to finish and settle the message in its hands (the Reactor adds
/// its subscription's `receive_timeout`: it cannot interrupt a blocking receive).
pub const STOP_LIMIT: Duration = Duration::from_secs(10);

/// What a handler asks the pump to do with the message it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Handled: acknowledge.
    Handled,
    /// Failed for now: requeue with the subscription's delay, within the budget.
    Defer,
    /// Do not acknowledge: release for redelivery at once (no budget).
    DontAck,
    /// Reject to the dead-letter or invalid-message destination.
    Reject(Option<Rejection>),
}

/// A message that cannot be turned into a request; the pump rejects it as Unacceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("message {message_id} cannot be mapped: {detail}")]
pub struct MappingError {
    pub message_id: String,
    pub detail: String,
}

/// Turns a message into the request a handler takes.
pub trait MessageMapper: Send + Sync + 'static {
    type Request: Send;
    fn map(&self, message: &Message) -> Result<Self::Request, MappingError>;
}

/// A blocking handler, for the Reactor.
pub trait Handler<R>: Send + Sync + 'static {
    fn handle(&self, request: R) -> Outcome;
}

/// An async handler, for the Proactor.
#[async_trait]
pub trait AsyncHandler<R: Send + 'static>: Send + Sync + 'static {
    async fn handle(&self, request: R) -> Outcome;
}

/// The request of `TextMapper`: the message id and its body as UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRequest {
    pub id: String,
    pub text: String,
}

/// Maps a message whose body is UTF-8; anything else cannot be mapped.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextMapper;

impl MessageMapper for TextMapper {
    type Request = TextRequest;
    fn map(&self, message: &Message) -> Result<TextRequest, MappingError> {
        match std::str::from_utf8(&message.body.bytes) {
            Ok(text) => Ok(TextRequest { id: message.header.id.clone(), text: text.to_owned() }),
            Err(error) => Err(MappingError { message_id: message.header.id.clone(), detail: error.to_string() }),
        }
    }
}

/// What the pump does to the channel for one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Acknowledge,
    Requeue(Duration),
    Nack,
    Reject(Option<Rejection>),
}

/// The pumps' shared decision. On a deferral it increments the handled count and rejects with
/// DeliveryError once the budget is spent (`handled_count >= requeue_count`, unless unlimited);
/// the incremented count travels with the requeued or rejected message.
pub fn decide(message: &mut Message, dispatch: Result<Outcome, MappingError>, subscription: &Subscription) -> Action {
    match dispatch {
        Err(error) => Action::Reject(Some(Rejection::unacceptable(error.to_string()))),
        Ok(Outcome::Handled) => Action::Acknowledge,
        Ok(Outcome::DontAck) => Action::Nack,
        Ok(Outcome::Reject(rejection)) => Action::Reject(rejection),
        Ok(Outcome::Defer) => {
            let count = message.header.handled_count.saturating_add(1);
            message.header.handled_count = count;
            if subscription.budget_spent(count) {
                Action::Reject(Some(Rejection::delivery_error(format!(
                    "handled {count} times, requeue_count is {}",
                    subscription.requeue_count
                ))))
            } else {
                Action::Requeue(subscription.requeue_delay)
            }
        }
    }
}

/// Live counters of a running pump.
#[derive(Debug, Default)]
pub struct PumpCounters {
    received: AtomicU64,
    acknowledged: AtomicU64,
    requeued: AtomicU64,
    nacked: AtomicU64,
    rejected: AtomicU64,
    channel_failures: AtomicU64,
}

/// A snapshot of `PumpCounters`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpStats {
    pub received: u64,
    pub acknowledged: u64,
    pub requeued: u64,
    pub nacked: u64,
    pub rejected: u64,
    pub channel_failures: u64,
}

impl PumpCounters {
    pub fn snapshot(&self) -> PumpStats {
        PumpStats {
            received: self.received.load(Ordering::Relaxed),
            acknowledged: self.acknowledged.load(Ordering::Relaxed),
            requeued: self.requeued.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            channel_failures: self.channel_failures.load(Ordering::Relaxed),
        }
    }

    fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self) {
        self.channel_failures.fetch_add(1, Ordering::Relaxed);
    }

    fn settled(&self, action: &Action) {
        let counter = match action {
            Action::Acknowledge => &self.acknowledged,
            Action::Requeue(_) => &self.requeued,
            Action::Nack => &self.nacked,
            Action::Reject(_) => &self.rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Which pump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PumpKind {
    Reactor,
    Proactor,
}

impl fmt::Display for PumpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PumpKind::Reactor => "reactor",
            PumpKind::Proactor => "proactor",
        })
    }
}

/// What a pump was doing with the message in its hands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Mapping it and running the handler.
    Handling,
    /// Applying the handler's outcome to the channel.
    Settling,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Handling => "still being handled",
            Stage::Settling => "still being settled",
        })
    }
}

/// The message a pump was holding when its stop limit passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InHand {
    pub message_id: String,
    pub stage: Stage,
}

/// A pump that did not end within its stop limit. It has been told to stop; what becomes of it
/// is up to its kind: a Reactor's thread is left detached to finish on its own, a Proactor's task
/// is aborted (see `ReactorHandle::stop_within` and `ProactorHandle::stop_within`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {pump} on channel {channel} did not stop within {waited:?}: {}", describe(.in_hand.as_ref()))]
pub struct PumpStuck {
    pub pump: PumpKind,
    pub channel: String,
    /// How long `stop` waited.
    pub waited: Duration,
    /// The message in the pump's hands when the limit passed; `None` when it held none (a
    /// Reactor still inside a blocking receive).
    pub in_hand: Option<InHand>,
}

fn describe(in_hand: Option<&InHand>) -> String {
    match in_hand {
        Some(InHand { message_id, stage }) => format!("message {message_id} is {stage}"),
        None => "it holds no message (still receiving)".to_owned(),
    }
}

/// What the pump thread or task shares with its handle: the counters and the message in hand.
#[derive(Debug, Default)]
struct Shared {
    counters: PumpCounters,
    in_hand: InHandSlot,
}

/// The id of the message a pump holds, kept cheaply enough to track every message: the stage is
/// an atomic, and the id is copied into a buffer that is reused (one uncontended lock per
/// message, no allocation once the buffer fits the longest id). Only a stop that times out reads it.
#[derive(Debug, Default)]
struct InHandSlot {
    stage: AtomicU8,
    id: Mutex<String>,
}

impl InHandSlot {
    const NONE: u8 = 0;
    const HANDLING: u8 = 1;
    const SETTLING: u8 = 2;

    fn handling(&self, message_id: &str) {
        {
            let mut id = self.id.lock().unwrap_or_else(PoisonError::into_inner);
            id.clear();
            id.push_str(message_id);
        }
        self.stage.store(InHandSlot::HANDLING, Ordering::Release);
    }

    fn settling(&self) {
        self.stage.store(InHandSlot::SETTLING, Ordering::Release);
    }

    fn settled(&self) {
        self.stage.store(InHandSlot::NONE, Ordering::Release);
    }

    fn get(&self) -> Option<InHand> {
        let stage = match self.stage.load(Ordering::Acquire) {
            InHandSlot::HANDLING => Stage::Handling,
            InHandSlot::SETTLING => Stage::Settling,
            _ => return None,
        };
        let message_id = self.id.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Some(InHand { message_id, stage })
    }
}

impl Shared {
    fn stuck(&self, pump: PumpKind, channel: &str, waited: Duration) -> PumpStuck {
        PumpStuck { pump, channel: channel.to_owned(), waited, in_hand: self.in_hand.get() }
    }
}

/// Exponential backoff for failing channel calls: 50 ms doubling to 2 s.
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const CEILING: Duration = Duration::from_secs(2);

    fn new() -> Backoff {
        Backoff { next: Backoff::FIRST }
    }

    fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(Backoff::CEILING);
        delay
    }

    fn reset(&mut self) {
        self.next = Backoff::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageType;
    use crate::rejection::RejectionReason;
    use rstest::rstest;

    fn deferred_until_rejected(requeue_count: i32, deliveries: u32) -> Option<u32> {
        let subscription = Subscription::new("s", "q").with_requeue_count(requeue_count);
        let mut message = Message::new("q", MessageType::Command, "x");
        (1..=deliveries).find(|_| matches!(decide(&mut message, Ok(Outcome::Defer), &subscription), Action::Reject(_)))
    }

    #[rstest]
    #[case::exact_budget(3, Some(3))]
    #[case::one_attempt(1, Some(1))]
    #[case::zero_rejects_first(0, Some(1))]
    #[case::below_minus_one_rejects_first(-2, Some(1))]
    #[case::unlimited(-1, None)]
    fn the_budget_rejects_on_the_expected_delivery(#[case] requeue_count: i32, #[case] rejected_on: Option<u32>) {
        assert_eq!(deferred_until_rejected(requeue_count, 100), rejected_on);
    }

    #[test]
    fn the_budget_rejection_is_a_delivery_error_and_carries_the_incremented_count() {
        let subscription = Subscription::new("s", "q").with_requeue_count(1);
        let mut message = Message::new("q", MessageType::Command, "x");
        let action = decide(&mut message, Ok(Outcome::Defer), &subscription);
        assert!(matches!(action, Action::Reject(Some(Rejection { reason: RejectionReason::DeliveryError, .. }))));
        assert_eq!(message.header.handled_count, 1);
    }

    #[test]
    fn outcomes_map_to_actions() {
        let subscription = Subscription::new("s", "q").with_requeue_delay(Duration::from_millis(7));
        let mut message = Message::new("q", MessageType::Command, "x");
        assert_eq!(decide(&mut message, Ok(Outcome::Handled), &subscription), Action::Acknowledge);
        assert_eq!(decide(&mut message, Ok(Outcome::DontAck), &subscription), Action::Nack);
        assert_eq!(decide(&mut message, Ok(Outcome::Reject(None)), &subscription), Action::Reject(None));
        assert_eq!(message.header.handled_count, 0, "only a deferral spends the budget");
        assert_eq!(decide(&mut message, Ok(Outcome::Defer), &subscription), Action::Requeue(Duration::from_millis(7)));
        let unmappable = MappingError { message_id: "m".into(), detail: "bad".into() };
        assert!(matches!(
            decide(&mut message, Err(unmappable), &subscription),
            Action::Reject(Some(Rejection { reason: RejectionReason::Unacceptable, .. }))
        ));
    }

    #[test]
    fn the_slot_names_the_message_in_hand_and_its_stage() {
        let slot = InHandSlot::default();
        assert_eq!(slot.get(), None);
        slot.handling("a-long-message-id");
        slot.settling();
        slot.settled();
        slot.handling("m-2");
        assert_eq!(slot.get(), Some(InHand { message_id: "m-2".into(), stage: Stage::Handling }));
        slot.settling();
        assert_eq!(slot.get(), Some(InHand { message_id: "m-2".into(), stage: Stage::Settling }));
        slot.settled();
        assert_eq!(slot.get(), None);
    }

    #[test]
    fn a_stuck_pump_says_which_where_how_long_and_what_it_holds() {
        let shared = Shared::default();
        shared.in_hand.handling("m-1");
        let stuck = shared.stuck(PumpKind::Reactor, "orders", Duration::from_millis(250));
        assert_eq!(
            stuck.to_string(),
            "the reactor on channel orders did not stop within 250ms: message m-1 is still being handled"
        );
        shared.in_hand.settled();
        let stuck = shared.stuck(PumpKind::Proactor, "orders", Duration::from_secs(1));
        assert_eq!(
            stuck.to_string(),
            "the proactor on channel orders did not stop within 1s: it holds no message (still receiving)"
        );
    }

    #[test]
    fn backoff_doubles_to_a_ceiling_and_resets() {
        let mut backoff = Backoff::new();
        let delays: Vec<_> = (0..8).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(50));
    }
}
