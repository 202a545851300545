//! Bespoke GCP tests outside the templates (ADR 0077): the AC-39 measurement of the broker's
//! delivery attempt on pull and stream with a DeadLetterPolicy, the AC-42 lease lapse on pull,
//! and R-11: a subscription without a policy cannot count, is warned about once when its
//! channel is created, and never on the receive path.

use std::time::Duration;

use gateway::transport::gcp::{Consumption, GcpConnection, GcpSubscription};
use gateway::{Message, MessageType, Producer, Subscription};

mod support;
use support::{captured_logs, receive, unique};

fn connection() -> &'static GcpConnection {
    providers::gcp::connection()
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

/// Sends one message carrying handled count 2 and nacks it on every delivery; returns the
/// handled counts presented (the broker's attempt wins where it counts, else the header's 2).
async fn presented_counts(consumption: Consumption, counted: bool, deliveries: usize) -> Vec<u32> {
    let topic = unique(if counted { "ac39" } else { "uncounted" });
    let channel = connection().channel(&subscription(&topic, consumption, counted)).await.unwrap();
    let mut sent = Message::new(&topic, MessageType::Command, "measured");
    sent.header.handled_count = 2;
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
    assert_eq!(presented_counts(Consumption::Pull, false, 3).await, [2, 2, 2]);
    assert_eq!(presented_counts(Consumption::Stream, false, 3).await, [2, 2, 2]);
}

/// AC-42: a message neither settled nor released is redelivered by the broker once its lease
/// lapses, with a strictly greater count. Pull: a 1 s ack deadline (pstest accepts what the
/// service would raise to 10 s). Stream: the subscriber stops extending after a 1 s max lease
/// and the 10 s stream deadline lapses. On stream-ordering the message is keyless: the ADR's
/// alternative, since a keyed message's redelivery may be withheld behind its key.
async fn lease_lapse(consumption: Consumption, ordering: bool) {
    let topic = unique("lease");
    let mut counted = subscription(&topic, consumption, true);
    counted.ordering = ordering;
    counted.ack_deadline = match consumption {
        Consumption::Pull => Duration::from_secs(1),
        Consumption::Stream => Duration::from_secs(10),
    };
    counted.max_lease = Some(Duration::from_secs(1));
    let channel = connection().channel(&counted).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "lease");
    connection().producer(ordering).send(&sent).await.unwrap();
    let first = receive(&*channel, sent.id(), Duration::from_secs(10)).await.unwrap();
    let again = receive(&*channel, sent.id(), Duration::from_secs(40)).await.expect("redelivery after the lease");
    let (before, after) = (first.header.handled_count, again.header.handled_count);
    assert!(after > before, "{before} then {after}");
    channel.acknowledge(&again).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac42_pull_a_lapsed_ack_deadline_redelivers_with_a_strictly_greater_count() {
    lease_lapse(Consumption::Pull, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac42_stream_a_lapsed_lease_redelivers_with_a_strictly_greater_count() {
    lease_lapse(Consumption::Stream, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac42_stream_ordering_a_keyless_message_whose_lease_lapsed_is_redelivered_with_a_greater_count() {
    lease_lapse(Consumption::Stream, true).await;
}

#[test]
fn r11_is_warned_once_at_channel_creation_and_never_on_receive() {
    let topic = unique("r11");
    let mut uncounted = subscription(&topic, Consumption::Pull, false);
    uncounted.subscription.requeue_count = 3;
    let logs = captured_logs(|| {
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
    let warnings: Vec<&str> = logs.lines().filter(|line| line.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "one warning for one channel, none for three receives:\n{logs}");
    assert!(warnings[0].contains("no DeadLetterPolicy") && warnings[0].contains("requeue_count 3"), "{}", warnings[0]);
    let counted = subscription(&unique("r11-counted"), Consumption::Pull, true);
    assert!(gateway::budget::validate(&counted.subscription, Some(&counted)).is_empty());
}
