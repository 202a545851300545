//! Helpers the bespoke broker tests share: unique names, a bounded receive by id, and a
//! captured tracing output.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::error::{ChannelError, ErrorKind};
use gateway::pump::{decide, Action, Outcome};
use gateway::rejection::keys;
use gateway::{Channel, Message, MessageType, Producer, Subscription};

pub fn unique(name: &str) -> String {
    format!("bespoke-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// A folder under the system's temporary directory, named uniquely, deleted when dropped (a
/// failing test's too): a restarted broker's kept storage.
pub struct KeptFolder(pub std::path::PathBuf);

impl KeptFolder {
    pub fn new(name: &str) -> KeptFolder {
        KeptFolder(std::env::temp_dir().join(unique(name)))
    }
}

impl Drop for KeptFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The next delivery of `id`, polling every 500 ms until `ceiling`.
pub async fn receive(channel: &dyn Channel, id: &str, ceiling: Duration) -> Option<Message> {
    let deadline = tokio::time::Instant::now() + ceiling;
    while tokio::time::Instant::now() < deadline {
        if let Some(message) = channel.receive(Duration::from_millis(500)).await.unwrap() {
            if message.id() == id {
                return Some(message);
            }
        }
    }
    None
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `work` logs through tracing, as text.
pub fn captured_logs(work: impl FnOnce()) -> String {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    tracing::subscriber::with_default(subscriber, work);
    let bytes = captured.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

/// The restart tests' subscription: a consumer group `<topic>-group` on `topic` under a budget of
/// 3, rejecting to `<topic>-dlq`; and the subscription of that dead-letter queue's reader.
pub fn under_a_budget_of_three(topic: &str) -> (Subscription, Subscription) {
    let dead_letter = format!("{topic}-dlq");
    let reader = Subscription::new(format!("{dead_letter}-reader"), &dead_letter);
    (Subscription::new(format!("{topic}-group"), topic).with_requeue_count(3).with_dead_letter(dead_letter), reader)
}

/// Sends a message to `subscription`'s topic through `producer`, then [`defer_twice`] on
/// `consumer`: the message's id and the two counts presented.
pub async fn send_and_defer_twice(
    producer: &dyn Producer,
    consumer: &dyn Channel,
    subscription: &Subscription,
) -> (String, Vec<u32>) {
    let sent = Message::new(&subscription.routing_key, MessageType::Command, "under a budget of 3");
    producer.send(&sent).await.unwrap();
    let presented = defer_twice(consumer, subscription, sent.id()).await;
    (sent.id().to_owned(), presented)
}

/// The restart tests' first half: `id` received twice on `consumer` and deferred each time by
/// the pumps' own rule, within `subscription`'s budget of 3. Returns the counts presented.
pub async fn defer_twice(consumer: &dyn Channel, subscription: &Subscription, id: &str) -> Vec<u32> {
    let mut presented = Vec::new();
    for delivery in 1..=2 {
        let mut received = receive(consumer, id, Duration::from_secs(10)).await.expect("delivered");
        presented.push(received.header.handled_count);
        let action = decide(&mut received, Ok(Outcome::Defer), subscription);
        assert_eq!(action, Action::Requeue(Duration::ZERO), "delivery {delivery} is within the budget");
        consumer.requeue(&received, Duration::ZERO).await.unwrap();
    }
    presented
}

/// A channel whose broker went away reports it as `Refused`: the gateway does not reconnect.
pub async fn assert_refused(channel: &dyn Channel, moment: &str) {
    let lost = channel.receive(Duration::from_millis(500)).await.unwrap_err();
    assert_eq!(lost.kind(), Some(ErrorKind::Refused), "{moment}, the old channel reports the lost broker: {lost}");
}

/// The restart tests' second half, on a new connection's `consumer`: the third delivery of `id`
/// presents 2 after the first two `presented` (the count continued across the restart), the
/// pumps' rule rejects it, and `dead_letters` receives exactly one copy, stamped 3; the original
/// does not come back.
pub async fn third_delivery_spends_the_budget(
    consumer: &dyn Channel,
    dead_letters: &dyn Channel,
    subscription: &Subscription,
    id: &str,
    mut presented: Vec<u32>,
) {
    let mut third = receive(consumer, id, Duration::from_secs(10)).await.expect("kept across the restart");
    presented.push(third.header.handled_count);
    assert_eq!(presented, [0, 1, 2], "the count continues across the restart");
    let Action::Reject(rejection) = decide(&mut third, Ok(Outcome::Defer), subscription) else {
        panic!("the third delivery spends the budget of 3, yet the pumps' rule did not reject it")
    };
    assert!(consumer.reject(&third, rejection.as_ref()).await.unwrap(), "a copy is routed");
    let copy = receive(dead_letters, id, Duration::from_secs(10)).await.expect("the copy");
    assert_eq!(copy.header.handled_count, 3, "the copy keeps the stamped count");
    assert_eq!(copy.header.bag.get(keys::REJECTION_REASON), Some(&"DeliveryError".into()));
    dead_letters.acknowledge(&copy).await.unwrap();
    assert!(receive(dead_letters, id, Duration::from_secs(1)).await.is_none(), "a second copy was routed");
    assert!(receive(consumer, id, Duration::from_secs(1)).await.is_none(), "the original came back");
}
pub mod proxy;

/// The connection-reset tests' first half: `received` (delivered on `consumer`, whose connection
/// goes through `proxy`) is not settled when every connection through the proxy is reset; the
/// acknowledge then reports the lost connection as `Refused`: it never claims a settlement the
/// broker did not make.
pub async fn reset_before_acknowledge(proxy: &proxy::FaultProxy, consumer: &dyn Channel, received: &Message) {
    assert_eq!(received.header.handled_count, 0, "a first delivery presents 0");
    assert!(proxy.reset_all().await > 0, "the consumer's connection goes through the proxy");
    let lost = consumer.acknowledge(received).await.expect_err("acknowledged over a reset connection");
    assert_eq!(lost.kind(), Some(ErrorKind::Refused), "the acknowledge reports the lost connection: {lost}");
}

/// The fault tests' second half, on `consumer`: the unsettled message `id` comes back within
/// `ceiling`, presenting 1, the broker having counted the delivery whose connection broke or
/// whose answer was cut off; acknowledged, it does not come again within `settled` (longer than
/// the lease, where the broker leases). Returns how long it took to come back.
pub async fn comes_back_counted(consumer: &dyn Channel, id: &str, ceiling: Duration, settled: Duration) -> Duration {
    let started = std::time::Instant::now();
    let again = receive(consumer, id, ceiling).await.expect("the unsettled message comes back");
    let waited = started.elapsed();
    assert_eq!(again.header.handled_count, 1, "the delivery on the reset connection is counted");
    consumer.acknowledge(&again).await.unwrap();
    assert!(receive(consumer, id, settled).await.is_none(), "acknowledged, yet delivered again");
    waited
}

/// The past-deadline tests' first half: with every byte through `proxy` held `delay` (a round
/// trip longer than the call deadline of `consumer`'s transport), a receive fails as a
/// `Timeout`, never another kind. The delay stays set: the caller lifts it.
pub async fn a_receive_past_its_deadline_times_out(proxy: &proxy::FaultProxy, consumer: &dyn Channel, delay: Duration) {
    cut_off_at_its_deadline(proxy, delay, Duration::MAX, consumer.receive(Duration::from_millis(500))).await;
}

/// The same for any call: with every byte through `proxy` held `delay`, `call` fails as a
/// `Timeout`, and within `before_the_answer` (it was cut off at its deadline, not failed when the
/// late answer came). Returns how long it took. The delay stays set: the caller lifts it.
pub async fn cut_off_at_its_deadline<T: std::fmt::Debug>(
    proxy: &proxy::FaultProxy,
    delay: Duration,
    before_the_answer: Duration,
    call: impl std::future::Future<Output = Result<T, ChannelError>>,
) -> Duration {
    proxy.delay(delay);
    let started = std::time::Instant::now();
    let cut_off = call.await.expect_err("a call past its deadline fails");
    let waited = started.elapsed();
    eprintln!("{cut_off} after {waited:?}");
    assert_eq!(cut_off.kind(), Some(ErrorKind::Timeout), "a call past its deadline is a timeout: {cut_off}");
    assert!(waited < before_the_answer, "cut off at its deadline, not when the answer came: {waited:?}");
    waited
}

/// The setup deadline the connect-and-channel tests give a connect and a channel: every byte
/// through the proxy is held `SETUP_DELAY` each way, so one round trip (3 s) outlasts it.
pub const SETUP_DEADLINE: Duration = Duration::from_secs(2);
const SETUP_DELAY: Duration = Duration::from_millis(1500);
/// A call cut off at `SETUP_DEADLINE` ends before the late answer (3 s) could have ended it.
const BEFORE_THE_ANSWER: Duration = Duration::from_millis(2900);

/// With every byte through `proxy` held 1.5 s each way, `call` (one or more round trips, under a
/// deadline of `SETUP_DEADLINE`) fails as a `Timeout` at its deadline. The delay stays set.
pub async fn setup_cut_off<T: std::fmt::Debug>(
    proxy: &proxy::FaultProxy,
    call: impl std::future::Future<Output = Result<T, ChannelError>>,
) {
    cut_off_at_its_deadline(proxy, SETUP_DELAY, BEFORE_THE_ANSWER, call).await;
}

/// The connect-and-channel tests' body: with every byte through `proxy` held 1.5 s each way,
/// `connect` under a deadline of `SETUP_DEADLINE` fails as a `Timeout` at it. Once the broker
/// answers again a connect succeeds, under a deadline of 60 s: `channel` on that connection
/// through the proxy (under a `call_deadline` of `SETUP_DEADLINE`) must then fail the same way by
/// its own deadline, not the connection's, and succeeds once the delay is lifted. The channel
/// carries a message `producer` sends to `topic`, presenting 0.
pub async fn a_connect_and_a_channel_past_their_deadlines<C>(
    proxy: &proxy::FaultProxy,
    connect: impl AsyncFn(Duration) -> Result<C, ChannelError>,
    channel: impl AsyncFn(&C) -> Result<Arc<dyn Channel>, ChannelError>,
    producer: &dyn Producer,
    topic: &str,
) {
    let cut_off = async { connect(SETUP_DEADLINE).await.map(drop) };
    cut_off_at_its_deadline(proxy, SETUP_DELAY, BEFORE_THE_ANSWER, cut_off).await;
    proxy.delay(Duration::ZERO);
    let through_proxy = connect(Duration::from_secs(60)).await.expect("a connect once the broker answers");
    cut_off_at_its_deadline(proxy, SETUP_DELAY, BEFORE_THE_ANSWER, async { channel(&through_proxy).await.map(drop) })
        .await;
    proxy.delay(Duration::ZERO);
    let consumer = channel(&through_proxy).await.expect("a channel once the broker answers");
    let sent = Message::new(topic, MessageType::Command, "after the slow setup");
    producer.send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("the channel carries it");
    assert_eq!(received.header.handled_count, 0);
    consumer.acknowledge(&received).await.unwrap();
}

/// The latency tests' body: `sent` (already sent) is waited for on `consumer`, whose connection
/// goes through `proxy`, every byte held `delay` each way, longer than each receive waits
/// (500 ms). A receive that stops waiting must not lose what the broker answered it with: the
/// message arrives once, presenting 0 (a delivery whose answer was dropped is counted, or leased
/// to no one, or both), within `ceiling`. A receive may fail meanwhile only as `Timeout`. Once
/// the delay is lifted and the message acknowledged, it does not come again within `settled`.
/// Returns what happened, for the test's report.
pub async fn a_slow_broker_loses_nothing(
    proxy: &proxy::FaultProxy,
    consumer: &dyn Channel,
    sent: &Message,
    delay: Duration,
    ceiling: Duration,
    settled: Duration,
) -> SlowBroker {
    proxy.delay(delay);
    let started = std::time::Instant::now();
    let (mut timeouts, mut longest_receive) = (0, Duration::ZERO);
    let received = loop {
        assert!(
            started.elapsed() < ceiling,
            "{} was not received within {ceiling:?} through a {delay:?} delay",
            sent.id()
        );
        let called = std::time::Instant::now();
        let received = consumer.receive(Duration::from_millis(500)).await;
        longest_receive = longest_receive.max(called.elapsed());
        match received {
            Ok(Some(message)) => break message,
            Ok(None) => {}
            Err(error) => {
                assert_eq!(error.kind(), Some(ErrorKind::Timeout), "a slow broker's call fails as a timeout: {error}");
                timeouts += 1;
            }
        }
    };
    let arrived = started.elapsed();
    assert_eq!(received.id(), sent.id(), "the one message sent");
    assert_eq!(received.header.handled_count, 0, "the first delivery presents 0: no answer was lost on the way");
    proxy.delay(Duration::ZERO);
    consumer.acknowledge(&received).await.unwrap();
    assert!(receive(consumer, sent.id(), settled).await.is_none(), "acknowledged, yet delivered again");
    let report = SlowBroker { arrived, timeouts, longest_receive };
    eprintln!("through a {delay:?} delay each way: {report:?}");
    report
}

/// What [`a_slow_broker_loses_nothing`] saw: when the message arrived, how many receives failed
/// as timeouts, and the longest a receive asked to wait 500 ms took.
#[derive(Debug)]
pub struct SlowBroker {
    pub arrived: Duration,
    pub timeouts: usize,
    pub longest_receive: Duration,
}

/// The connection-reset tests' acknowledge over a reset connection, on a client that connects
/// again by itself: it may succeed on the new connection, or fail; if it fails it must say the
/// connection was lost (`Refused`), never claim a settlement.
pub async fn acknowledge_after_the_reset(consumer: &dyn Channel, received: &Message) -> Result<(), ChannelError> {
    let acknowledged = consumer.acknowledge(received).await;
    if let Err(lost) = &acknowledged {
        assert_eq!(lost.kind(), Some(ErrorKind::Refused), "a failed acknowledge reports the lost connection: {lost}");
    }
    eprintln!("the acknowledge after the reset: {acknowledged:?}");
    acknowledged
}

/// A send over a connection the proxy reset, on a client that connects again by itself: it may
/// go through, or fail once saying the connection was lost (`Refused`: the write hit the reset
/// socket, measured on RocketMQ under CI's load as a broken pipe, which no client may retry for
/// it could deliver twice); the next send must go through (on RocketMQ, the gateway's producer
/// sends again a send the client refused before writing while it retires the broken session).
pub async fn send_after_the_reset(producer: &dyn Producer, message: &Message) {
    if let Err(lost) = producer.send(message).await {
        assert_eq!(lost.kind(), Some(ErrorKind::Refused), "a failed send reports the lost connection: {lost}");
        eprintln!("the send after the reset: {lost}");
        producer.send(message).await.expect("the send after a reported reset goes through");
    }
}

/// The end of those tests: what came `back` after an `acknowledged` message's settlement window.
/// Acknowledged, it must not come back; if the acknowledge failed, it must, presenting
/// `presents` (what the broker's counter makes of the delivery lost with its connection).
pub fn settled_once_or_back(acknowledged: Result<(), ChannelError>, back: Option<Message>, presents: u32) {
    match acknowledged {
        Ok(()) => assert!(back.is_none(), "acknowledged on the new connection, yet delivered again"),
        Err(_) => {
            let back = back.expect("an acknowledge that failed leaves the message to come back");
            assert_eq!(back.header.handled_count, presents, "the delivery lost with its connection");
        }
    }
}
