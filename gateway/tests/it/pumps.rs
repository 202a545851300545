//! Both pumps on the in-memory transport: the budget, the outcomes, routing, unmappable
//! messages, failing channels and stopping without loss.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use gateway::blocking::runtime;
use gateway::budget::{BudgetWarning, CountingReport};
use gateway::pump::{InHand, Outcome, PumpKind, Stage};
use gateway::rejection::keys;
use gateway::transport::memory::MemoryBroker;
use gateway::{BagValue, Channel, Message, MessageType, Rejection, Subscription};
use rstest::rstest;

use crate::support::{eventually, start, FailingAcks, Pump, Scripted, UNMAPPABLE};

const SOURCE: &str = "orders";
const DEAD_LETTER: &str = "orders-dlq";
const INVALID: &str = "orders-invalid";
const CEILING: Duration = Duration::from_secs(10);

fn subscription(requeue_count: i32) -> Subscription {
    Subscription::new("orders", SOURCE)
        .with_requeue_count(requeue_count)
        .with_dead_letter(DEAD_LETTER)
        .with_invalid_message(INVALID)
        .with_receive_timeout(Duration::from_millis(20))
}

fn send(broker: &MemoryBroker, body: &[u8]) -> Message {
    let message = Message::new(SOURCE, MessageType::Command, body);
    broker.publish(SOURCE, message.clone(), Duration::ZERO);
    message
}

/// Everything waiting on `queue`, received and acknowledged.
fn drain(broker: &MemoryBroker, queue: &str) -> Vec<Message> {
    let channel = broker.channel(&Subscription::new("reader", queue)).unwrap();
    let mut drained = Vec::new();
    while let Some(message) = runtime().block_on(channel.receive(Duration::ZERO)).unwrap() {
        runtime().block_on(channel.acknowledge(&message)).unwrap();
        drained.push(message);
    }
    drained
}

fn channel(broker: &MemoryBroker, subscription: &Subscription) -> Arc<dyn Channel> {
    Arc::new(broker.channel(subscription).unwrap())
}

fn reason_of(message: &Message) -> &BagValue {
    &message.header.bag[keys::REJECTION_REASON]
}

#[rstest]
#[case::exact_budget_rejects_on_delivery_r(3, 3)]
#[case::one_attempt(1, 1)]
#[case::zero_rejects_on_first_deferral(0, 1)]
#[case::below_minus_one_rejects_on_first_deferral(-2, 1)]
fn a_handler_that_always_defers_is_dead_lettered_when_the_budget_is_spent(
    #[values(Pump::Reactor, Pump::Proactor)] pump: Pump,
    #[case] requeue_count: i32,
    #[case] dispatches: usize,
) {
    let broker = MemoryBroker::new();
    let sent = send(&broker, b"always fails");
    let handler = Scripted::new(vec![Outcome::Defer]);
    let subscription = subscription(requeue_count);
    let running = start(pump, channel(&broker, &subscription), subscription, handler.clone());
    assert!(eventually(CEILING, || broker.waiting(DEAD_LETTER) == 1), "no dead-letter copy arrived");
    let stats = running.stop();

    // An exact counter: presented 0, 1, 2 ... and rejected on delivery R exactly.
    let expected_counts: Vec<u32> = (0..dispatches as u32).collect();
    assert_eq!(handler.dispatches(sent.id()), expected_counts);
    let copies = drain(&broker, DEAD_LETTER);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].id(), sent.id());
    assert_eq!(copies[0].header.handled_count, dispatches as u32, "the copy keeps the stamped count");
    assert_eq!(reason_of(&copies[0]), &BagValue::from("DeliveryError"));
    assert_eq!((broker.waiting(SOURCE), broker.in_flight(SOURCE)), (0, 0), "the source is settled");
    assert_eq!((stats.rejected, stats.requeued), (1, dispatches as u64 - 1));
}

#[rstest]
fn an_unlimited_budget_never_rejects(#[values(Pump::Reactor, Pump::Proactor)] pump: Pump) {
    let broker = MemoryBroker::new();
    let sent = send(&broker, b"always fails");
    let handler = Scripted::new(vec![Outcome::Defer]);
    let subscription = subscription(-1);
    let running = start(pump, channel(&broker, &subscription), subscription, handler.clone());
    assert!(eventually(CEILING, || handler.dispatches(sent.id()).len() >= 12));
    let stats = running.stop();
    assert_eq!(stats.rejected, 0);
    assert_eq!(broker.waiting(DEAD_LETTER), 0);
    assert_eq!(broker.waiting(SOURCE) + broker.in_flight(SOURCE), 1, "the message is still there");
    let counts = handler.dispatches(sent.id());
    assert!(counts.windows(2).all(|pair| pair[1] == pair[0] + 1), "the count grows on every redelivery: {counts:?}");
}

#[rstest]
fn a_nack_redelivers_without_spending_the_budget(#[values(Pump::Reactor, Pump::Proactor)] pump: Pump) {
    let broker = MemoryBroker::new();
    let sent = send(&broker, b"busy");
    let handler = Scripted::new(vec![Outcome::DontAck, Outcome::DontAck, Outcome::Handled]);
    let subscription = subscription(1);
    let running = start(pump, channel(&broker, &subscription), subscription, handler.clone());
    assert!(eventually(CEILING, || handler.dispatches(sent.id()).len() == 3));
    let stats = running.stop();
    assert_eq!(handler.dispatches(sent.id()), [0, 0, 0]);
    assert_eq!((stats.nacked, stats.acknowledged, stats.rejected), (2, 1, 0));
    assert_eq!(broker.waiting(DEAD_LETTER), 0);
}

#[rstest]
#[case::unacceptable_to_invalid(Some(Rejection::unacceptable("bad order")), INVALID, "Unacceptable")]
#[case::delivery_error_to_dead_letter(Some(Rejection::delivery_error("downstream gone")), DEAD_LETTER, "DeliveryError")]
#[case::no_reason_to_dead_letter_stamped_none(None, DEAD_LETTER, "None")]
fn a_handler_rejection_is_routed_by_reason(
    #[values(Pump::Reactor, Pump::Proactor)] pump: Pump,
    #[case] rejection: Option<Rejection>,
    #[case] destination: &str,
    #[case] stamped: &str,
) {
    let broker = MemoryBroker::new();
    let sent = send(&broker, b"reject me");
    let handler = Scripted::new(vec![Outcome::Reject(rejection)]);
    let subscription = subscription(3);
    let running = start(pump, channel(&broker, &subscription), subscription, handler);
    assert!(eventually(CEILING, || broker.waiting(destination) == 1));
    running.stop();
    let copy = &drain(&broker, destination)[0];
    assert_eq!(copy.id(), sent.id());
    assert_eq!(reason_of(copy), &BagValue::from(stamped));
    assert_eq!(copy.header.bag[keys::ORIGINAL_TOPIC], BagValue::from(SOURCE));
    assert_eq!((broker.waiting(SOURCE), broker.in_flight(SOURCE)), (0, 0));
}

#[rstest]
fn an_unmappable_message_is_rejected_as_unacceptable_without_dispatch(
    #[values(Pump::Reactor, Pump::Proactor)] pump: Pump,
) {
    let broker = MemoryBroker::new();
    let sent = send(&broker, UNMAPPABLE);
    let handler = Scripted::new(vec![Outcome::Handled]);
    let subscription = subscription(3);
    let running = start(pump, channel(&broker, &subscription), subscription, handler.clone());
    assert!(eventually(CEILING, || broker.waiting(INVALID) == 1));
    running.stop();
    assert_eq!(handler.total_dispatches(), 0);
    let copy = &drain(&broker, INVALID)[0];
    assert_eq!(copy.id(), sent.id());
    assert_eq!(reason_of(copy), &BagValue::from("Unacceptable"));
}

#[rstest]
fn stopping_mid_stream_loses_no_message(#[values(Pump::Reactor, Pump::Proactor)] pump: Pump) {
    let broker = MemoryBroker::new();
    for _ in 0..40 {
        send(&broker, b"work");
    }
    let handler = Scripted::new(vec![Outcome::Handled]).pausing(Duration::from_millis(5));
    let subscription = subscription(3);
    let running = start(pump, channel(&broker, &subscription), subscription, handler.clone());
    assert!(eventually(CEILING, || handler.total_dispatches() >= 5));
    let stats = running.stop();
    assert!(stats.acknowledged < 40, "stopped before the end");
    assert_eq!(broker.in_flight(SOURCE), 0, "nothing left unsettled");
    assert_eq!(stats.acknowledged as usize + broker.waiting(SOURCE), 40, "every message acknowledged or waiting");
}

#[rstest]
fn a_failing_channel_call_is_retried_and_the_pump_keeps_running(#[values(Pump::Reactor, Pump::Proactor)] pump: Pump) {
    let broker = MemoryBroker::new();
    let subscription = subscription(3);
    let flaky = FailingAcks { inner: broker.channel(&subscription).unwrap(), failures: AtomicU32::new(3) };
    send(&broker, b"one");
    send(&broker, b"two");
    let running = start(pump, Arc::new(flaky), subscription, Scripted::new(vec![Outcome::Handled]));
    assert!(eventually(CEILING, || broker.waiting(SOURCE) + broker.in_flight(SOURCE) == 0));
    let stats = running.stop();
    assert_eq!((stats.acknowledged, stats.channel_failures), (2, 3));
}

#[rstest]
fn a_message_that_cannot_be_settled_is_released_on_stop(#[values(Pump::Reactor, Pump::Proactor)] pump: Pump) {
    let broker = MemoryBroker::new();
    let subscription = subscription(3);
    let broken = FailingAcks { inner: broker.channel(&subscription).unwrap(), failures: AtomicU32::new(u32::MAX) };
    let sent = send(&broker, b"stuck");
    let running = start(pump, Arc::new(broken), subscription, Scripted::new(vec![Outcome::Handled]));
    assert!(eventually(CEILING, || broker.in_flight(SOURCE) == 1));
    std::thread::sleep(Duration::from_millis(120)); // let a few acknowledgements fail
    let stats = running.stop();
    assert!(stats.channel_failures >= 1);
    assert_eq!(stats.acknowledged, 0);
    let released = drain(&broker, SOURCE);
    assert_eq!(released.len(), 1, "released back to the source, not dropped");
    assert_eq!(released[0].id(), sent.id());
}

#[rstest]
fn a_handler_that_outlasts_the_stop_limit_is_reported_with_its_message(
    #[values(Pump::Reactor, Pump::Proactor)] pump: Pump,
) {
    let broker = MemoryBroker::new();
    let sent = send(&broker, b"slow");
    let handler = Scripted::new(vec![Outcome::Handled]).pausing(Duration::from_millis(1500));
    let subscription = subscription(3);
    let running = start(pump, channel(&broker, &subscription), subscription, handler.clone());
    assert!(eventually(CEILING, || broker.in_flight(SOURCE) == 1), "the message was never received");

    let stuck = running.stop_within(Duration::from_millis(200)).expect_err("the handler is still sleeping");
    let kind = match pump {
        Pump::Reactor => PumpKind::Reactor,
        Pump::Proactor => PumpKind::Proactor,
    };
    assert_eq!((stuck.pump, stuck.channel.as_str()), (kind, SOURCE));
    assert_eq!(stuck.in_hand, Some(InHand { message_id: sent.id().to_owned(), stage: Stage::Handling }));
    assert!(stuck.waited >= Duration::from_millis(200), "waited {:?}", stuck.waited);
    assert!(stuck.to_string().contains(sent.id()), "{stuck}");
    match pump {
        // The detached thread finishes the message on its own and settles it.
        Pump::Reactor => {
            assert!(eventually(CEILING, || broker.in_flight(SOURCE) == 0), "the detached reactor never settled");
            assert_eq!(handler.dispatches(sent.id()), [0]);
            assert_eq!(broker.waiting(SOURCE), 0, "acknowledged, not released");
        }
        // The task was aborted mid-handler: the message is left to the broker's lease.
        Pump::Proactor => {
            assert_eq!(handler.total_dispatches(), 0, "the aborted handler never finished");
            assert_eq!(broker.in_flight(SOURCE), 1);
        }
    }
}

#[test]
fn a_proactor_stops_at_once_while_waiting_on_an_empty_channel() {
    // A 30 s receive timeout: the stop must end the pending receive, not wait it out.
    let broker = MemoryBroker::new();
    let subscription = subscription(3).with_receive_timeout(Duration::from_secs(30));
    let running =
        start(Pump::Proactor, channel(&broker, &subscription), subscription, Scripted::new(vec![Outcome::Handled]));
    std::thread::sleep(Duration::from_millis(50)); // inside its receive
    let stats = running.stop_within(Duration::from_secs(10)).expect("the pending receive is cancelled");
    assert_eq!(stats.received, 0);
}

#[test]
fn a_reactor_inside_a_blocking_receive_is_reported_holding_no_message() {
    // The Reactor cannot interrupt a receive: a limit below the receive timeout can expire in it.
    let broker = MemoryBroker::new();
    let subscription = subscription(3).with_receive_timeout(Duration::from_secs(2));
    let running =
        start(Pump::Reactor, channel(&broker, &subscription), subscription, Scripted::new(vec![Outcome::Handled]));
    std::thread::sleep(Duration::from_millis(50)); // inside its receive
    let stuck = running.stop_within(Duration::from_millis(100)).expect_err("the receive outlasts the limit");
    assert_eq!((stuck.pump, stuck.in_hand), (PumpKind::Reactor, None));
}

#[test]
fn a_busy_proactor_yields_to_other_tasks_on_its_runtime() {
    // A message always ready (unlimited budget, requeued at once) must not starve the runtime:
    // on one thread, a timer beside the pump still fires and the pump still stops.
    let broker = MemoryBroker::new();
    send(&broker, b"always fails");
    let subscription = subscription(-1);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let pump = gateway::pump::Proactor::new(
            channel(&broker, &subscription),
            subscription,
            crate::support::WholeMessage,
            Scripted::new(vec![Outcome::Defer]),
        )
        .start();
        let timer = tokio::time::timeout(Duration::from_secs(5), tokio::time::sleep(Duration::from_millis(50))).await;
        assert!(timer.is_ok(), "the timer beside the pump never fired");
        let stats = pump.stop().await.expect("the pump stops");
        assert!(stats.requeued > 0);
    });
}

/// A memory channel that reports a broker's counting, as a broker transport's channel does.
struct Counted {
    inner: Arc<dyn Channel>,
    counting: CountingReport,
}

#[async_trait::async_trait]
impl Channel for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, gateway::ChannelError> {
        self.inner.receive(timeout).await
    }
    async fn acknowledge(&self, message: &Message) -> Result<(), gateway::ChannelError> {
        self.inner.acknowledge(message).await
    }
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, gateway::ChannelError> {
        self.inner.reject(message, rejection).await
    }
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), gateway::ChannelError> {
        self.inner.requeue(message, delay).await
    }
    async fn nack(&self, message: &Message) -> Result<(), gateway::ChannelError> {
        self.inner.nack(message).await
    }
    async fn close(&self) -> Result<(), gateway::ChannelError> {
        self.inner.close().await
    }
    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}

/// each budget rule's finding is surfaced (logged, and on the handle) when a pump starts.
#[rstest]
#[case::r7_a_zero_budget_rejects_on_the_first_deferral(0, None, None, "R-7")]
#[case::r10_the_native_limit_comes_first(5, Some(3), None, "R-10")]
#[case::r11_the_broker_cannot_count(3, None, Some("no DeadLetterPolicy"), "R-11")]
#[case::a_sound_budget_has_no_finding(3, Some(5), None, "")]
fn the_budget_rules_are_surfaced_when_a_pump_starts(
    #[values(Pump::Reactor, Pump::Proactor)] pump: Pump,
    #[case] requeue_count: i32,
    #[case] native_limit: Option<u32>,
    #[case] unenforceable: Option<&str>,
    #[case] rule: &str,
) {
    let broker = MemoryBroker::new();
    let subscription = subscription(requeue_count);
    let counting =
        CountingReport { native_redrive_limit: native_limit, unenforceable_reason: unenforceable.map(str::to_owned) };
    let counted: Arc<dyn Channel> = Arc::new(Counted { inner: channel(&broker, &subscription), counting });
    let running = start(pump, counted, subscription, Scripted::new(vec![Outcome::Handled]));
    let found: Vec<&str> = running
        .budget_warnings()
        .iter()
        .map(|warning| match warning {
            BudgetWarning::RejectsOnFirstDeferral { .. } => "R-7",
            BudgetWarning::NativeLimitFirst { .. } => "R-10",
            BudgetWarning::Unenforceable { .. } => "R-11",
        })
        .collect();
    let expected: Vec<&str> = [rule].into_iter().filter(|r| !r.is_empty()).collect();
    assert_eq!(found, expected);
    running.stop();
}
