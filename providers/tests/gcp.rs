//! Bespoke GCP tests outside the templates (ADR 0077): the AC-39 measurement of the broker's
//! delivery attempt on pull and stream with a DeadLetterPolicy, the AC-42 lease lapse on pull,
//! and R-11: a subscription without a policy cannot count, is warned about once when its
//! channel is created, and never on the receive path.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::transport::gcp::{Consumption, GcpConnection, GcpSubscription};
use gateway::{Channel, Message, MessageType, Producer, Subscription};

fn connection() -> &'static GcpConnection {
    providers::gcp::connection()
}

fn unique(name: &str) -> String {
    format!("bespoke-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

async fn receive(channel: &dyn Channel, id: &str, ceiling: Duration) -> Option<Message> {
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

/// A subscription on a fresh topic, with a DeadLetterPolicy (M = 5) when `counted`.
fn subscription(name: &str, consumption: Consumption, counted: bool) -> GcpSubscription {
    let mut common = Subscription::new(format!("{name}-sub"), name);
    if counted {
        common = common.with_dead_letter(format!("{name}-dlq"));
    }
    let mut subscription = GcpSubscription::new(common, consumption);
    subscription.dead_letter_policy = counted.then_some(5);
    subscription
}

/// Sends one message and nacks it on every delivery; returns the handled counts presented.
async fn presented_counts(consumption: Consumption, counted: bool, deliveries: usize) -> Vec<u32> {
    let topic = unique(if counted { "ac39" } else { "uncounted" });
    let channel = connection().channel(&subscription(&topic, consumption, counted)).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "measured");
    connection().producer(false).send(&sent).await.unwrap();
    let mut counts = Vec::new();
    for _ in 0..deliveries {
        let message = receive(&*channel, sent.id(), Duration::from_secs(10)).await.expect("a delivery");
        counts.push(message.header.handled_count);
        channel.nack(&message).await.unwrap();
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac39_pull_with_a_dead_letter_policy_presents_attempts_1_2_3_as_0_1_2() {
    assert_eq!(presented_counts(Consumption::Pull, true, 3).await, [0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac39_stream_with_a_dead_letter_policy_presents_attempts_1_2_3_as_0_1_2() {
    assert_eq!(presented_counts(Consumption::Stream, true, 3).await, [0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dead_letter_policy_the_attempt_is_0_and_the_header_count_stands() {
    assert_eq!(presented_counts(Consumption::Pull, false, 3).await, [0, 0, 0]);
    assert_eq!(presented_counts(Consumption::Stream, false, 3).await, [0, 0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac42_a_lapsed_ack_deadline_redelivers_with_a_strictly_greater_count() {
    let topic = unique("lease");
    let mut counted = subscription(&topic, Consumption::Pull, true);
    counted.ack_deadline = Duration::from_secs(1); // pstest accepts what the service would raise to 10 s
    let channel = connection().channel(&counted).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "lease");
    connection().producer(false).send(&sent).await.unwrap();
    let first = receive(&*channel, sent.id(), Duration::from_secs(10)).await.unwrap();
    // Neither settled nor released: the lease lapses and the broker redelivers on its own.
    let again = receive(&*channel, sent.id(), Duration::from_secs(15)).await.expect("redelivery after the lease");
    assert!(
        again.header.handled_count > first.header.handled_count,
        "{} then {}",
        first.header.handled_count,
        again.header.handled_count
    );
    channel.acknowledge(&again).await.unwrap();
}

/// AC-42 on stream: the subscriber stops extending the lease after `max_lease`, the stream's
/// ack deadline lapses, and the broker redelivers. On stream-ordering the message is keyless:
/// the ADR's alternative, since a keyed message's redelivery may be withheld behind its key.
async fn stream_lease_lapse(ordering: bool) {
    let topic = unique(if ordering { "lease-stream-ordering" } else { "lease-stream" });
    let mut counted = subscription(&topic, Consumption::Stream, true);
    counted.ordering = ordering;
    counted.max_lease = Some(Duration::from_secs(1));
    let channel = connection().channel(&counted).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "lease");
    connection().producer(ordering).send(&sent).await.unwrap();
    let first = receive(&*channel, sent.id(), Duration::from_secs(10)).await.unwrap();
    let again = receive(&*channel, sent.id(), Duration::from_secs(40)).await.expect("redelivery after the lease");
    assert!(
        again.header.handled_count > first.header.handled_count,
        "{} then {}",
        first.header.handled_count,
        again.header.handled_count
    );
    channel.acknowledge(&again).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac42_stream_a_lapsed_lease_redelivers_with_a_strictly_greater_count() {
    stream_lease_lapse(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac42_stream_ordering_a_keyless_message_whose_lease_lapsed_is_redelivered_with_a_greater_count() {
    stream_lease_lapse(true).await;
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

#[test]
fn r11_is_warned_once_at_channel_creation_and_never_on_receive() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let topic = unique("r11");
    let mut uncounted = subscription(&topic, Consumption::Pull, false);
    uncounted.subscription.requeue_count = 3;
    tracing::subscriber::with_default(subscriber, || {
        gateway::blocking::runtime().block_on(async {
            let channel = connection().channel(&uncounted).await.unwrap();
            let sent = Message::new(&topic, MessageType::Command, "r11");
            connection().producer(false).send(&sent).await.unwrap();
            for _ in 0..3 {
                let message = receive(&*channel, sent.id(), Duration::from_secs(10)).await.unwrap();
                channel.nack(&message).await.unwrap();
            }
        })
    });
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = logs.lines().filter(|line| line.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "one warning for one channel, none for three receives:\n{logs}");
    assert!(warnings[0].contains("no DeadLetterPolicy") && warnings[0].contains("requeue_count 3"), "{}", warnings[0]);
    let counted = subscription(&unique("r11-counted"), Consumption::Pull, true);
    assert!(gateway::budget::validate(&counted.subscription, Some(&counted)).is_empty());
}
