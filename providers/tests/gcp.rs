//! Bespoke GCP tests outside the templates (ADR 0077): the AC-39 measurement of the broker's
//! delivery attempt on pull and stream with a DeadLetterPolicy, the AC-42 lease lapse on pull,
//! and R-11: a subscription without a policy cannot count, is warned about once when its
//! channel is created, and never on the receive path.

use std::sync::Arc;
use std::time::Duration;

use gateway::error::ErrorKind;
use gateway::transport::gcp::{Consumption, GcpConnection, GcpSubscription};
use gateway::{Channel, Message, MessageType, Producer, Subscription};

mod support;
use support::proxy::{proxied, FaultProxy};
use support::{captured_logs, comes_back_counted, cut_off_at_its_deadline, receive, unique};

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

/// A stream channel dropped without `close`, in a process that goes on: its reader ends, and the
/// handlers dropped with the channel nack what it held, a message held unsettled and a release
/// kept for the next `receive` alike. Both come back to the next consumer at once (well inside
/// the 10 s ack deadline they would otherwise wait out), each counted once more. A channel whose
/// drop left its stream open would lease them for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_a_channel_dropped_without_close_gives_back_what_it_held_at_once() {
    let topic = unique("dropped");
    let counted = subscription(&topic, Consumption::Stream, true);
    let first = connection().channel(&counted).await.unwrap();
    let (held, released) = (
        Message::new(&topic, MessageType::Command, "held unsettled"),
        Message::new(&topic, MessageType::Command, "released, the release kept"),
    );
    for message in [&held, &released] {
        connection().producer(false).send(message).await.unwrap();
    }
    let mut received = Vec::new();
    while received.len() < 2 {
        let message = first.receive(Duration::from_millis(500)).await.unwrap();
        received.extend(message);
    }
    let to_release = received.iter().find(|m| m.id() == released.id()).expect("the second message");
    first.nack(to_release).await.unwrap();
    drop(first);

    let dropped = std::time::Instant::now();
    let next = connection().channel(&counted).await.unwrap();
    let mut back = Vec::new();
    while back.len() < 2 {
        assert!(dropped.elapsed() < Duration::from_secs(5), "given back by then: {back:?}");
        if let Some(message) = next.receive(Duration::from_millis(500)).await.unwrap() {
            back.push((message.id().to_string(), message.header.handled_count));
            next.acknowledge(&message).await.unwrap();
        }
    }
    back.sort();
    let mut expected = vec![(held.id().to_string(), 1), (released.id().to_string(), 1)];
    expected.sort();
    assert_eq!(back, expected, "each back once, counted once more, within {:?}", dropped.elapsed());
    next.close().await.unwrap();
}

/// A stream's delayed requeue holds the message's lease in the process for the delay; `close`
/// gives it back at once with everything else it holds (the subscriber's shutdown waits for every
/// handler, so a close that left the delayed one waiting would take its 5 s ceiling and the
/// message would come back only when the 60 s delay or the process ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_close_gives_back_a_delayed_requeue_at_once() {
    let topic = unique("delayed-close");
    let counted = subscription(&topic, Consumption::Stream, true);
    let first = connection().channel(&counted).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "requeued with a delay, then closed");
    connection().producer(false).send(&sent).await.unwrap();
    let received = receive(first.as_ref(), sent.id(), Duration::from_secs(5)).await.expect("the first delivery");
    first.requeue(&received, Duration::from_secs(60)).await.unwrap();
    first.close().await.unwrap();

    let next = connection().channel(&counted).await.unwrap();
    let back = receive(next.as_ref(), sent.id(), Duration::from_secs(5))
        .await
        .expect("given back by close within 5 s, not after the 60 s delay");
    assert_eq!(back.header.handled_count, 1, "back once, counted once more");
    next.acknowledge(&back).await.unwrap();
    next.close().await.unwrap();
}

/// A stream channel reads ahead; the subscriber extends a read-ahead message's lease only until
/// the subscription's `max_lease` (1 s here), so pstest delivers it again when its 10 s ack
/// deadline lapses, to another consumer, counted. The copy still waiting in the first channel
/// is stale: handed out, it would present 0 after the broker's second delivery (and after the
/// other consumer acknowledged it). The channel drops it, and hands out nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_a_read_ahead_copy_whose_lease_lapsed_is_not_handed_out() {
    let topic = unique("stale");
    let mut leased_briefly = subscription(&topic, Consumption::Stream, true);
    leased_briefly.max_lease = Some(Duration::from_secs(1));
    let first = connection().channel(&leased_briefly).await.unwrap();
    let (taken, read_ahead) = (
        Message::new(&topic, MessageType::Command, "taken at once"),
        Message::new(&topic, MessageType::Command, "read ahead, then left"),
    );
    for message in [&taken, &read_ahead] {
        connection().producer(false).send(message).await.unwrap();
    }
    // One receive: the stream reads both, the other waits in the inbox.
    let handed = loop {
        if let Some(message) = first.receive(Duration::from_millis(500)).await.unwrap() {
            break message;
        }
    };
    let left_id = if handed.id() == taken.id() { read_ahead.id() } else { taken.id() }.to_owned();
    first.acknowledge(&handed).await.unwrap();

    let other = connection().channel(&leased_briefly).await.unwrap();
    let elsewhere = receive(other.as_ref(), &left_id, Duration::from_secs(20))
        .await
        .expect("delivered again to the other consumer when the unextended lease lapsed");
    assert_eq!(elsewhere.header.handled_count, 1, "the broker's second delivery presents 1");
    other.acknowledge(&elsewhere).await.unwrap();

    if let Some(stale) = receive(first.as_ref(), &left_id, Duration::from_secs(2)).await {
        panic!("the first channel handed out its stale copy presenting {}", stale.header.handled_count);
    }
    first.close().await.unwrap();
    other.close().await.unwrap();
}

/// Making a channel is a few calls (its topics, its subscription), each under the subscription's
/// `call_deadline`: through a proxy holding every byte 1.5 s each way, a 2 s deadline cuts the
/// setup off as a `Timeout` (the connection itself is lazy: its handshake rides the first call).
/// Once the emulator answers again, the same connection makes the channel and it carries a
/// message presenting 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_past_its_deadline_fails_as_a_timeout_and_succeeds_once_the_emulator_answers() {
    let (endpoint, project) = providers::gcp::endpoint();
    let (proxy, url) = proxied(endpoint).await;
    let through_proxy = GcpConnection::emulator(&url, project).unwrap();
    let topic = unique("setup-deadline");
    let mut slow = subscription(&topic, Consumption::Pull, true);
    slow.call_deadline = Duration::from_secs(2);
    let making = async { through_proxy.channel(&slow).await.map(drop) };
    cut_off_at_its_deadline(&proxy, Duration::from_millis(1500), Duration::from_millis(2900), making).await;
    proxy.delay(Duration::ZERO);
    let consumer = through_proxy.channel(&slow).await.expect("a channel once the emulator answers");
    let sent = Message::new(&topic, MessageType::Command, "after the slow setup");
    connection().producer(false).send(&sent).await.unwrap();
    let received =
        receive(consumer.as_ref(), sent.id(), Duration::from_secs(10)).await.expect("the channel carries it");
    assert_eq!(received.header.handled_count, 0);
    consumer.acknowledge(&received).await.unwrap();
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

/// A subscription through a proxy to the emulator, a message sent to it and received once.
async fn received_through_a_proxy(consumption: Consumption) -> (FaultProxy, Arc<dyn Channel>, Message) {
    received_through_a_proxy_within(
        consumption,
        GcpSubscription::new(Subscription::new("", ""), consumption).call_deadline,
    )
    .await
}

/// The same, the channel's settlements bounded by `call_deadline`.
async fn received_through_a_proxy_within(
    consumption: Consumption,
    call_deadline: Duration,
) -> (FaultProxy, Arc<dyn Channel>, Message) {
    let (endpoint, project) = providers::gcp::endpoint();
    let (proxy, url) = proxied(endpoint).await;
    let through_proxy = GcpConnection::emulator(&url, project).unwrap();
    let topic = unique("reset");
    let mut on_gcp = subscription(&topic, consumption, true);
    on_gcp.call_deadline = call_deadline;
    let consumer = through_proxy.channel(&on_gcp).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "unsettled when the connection breaks");
    connection().producer(false).send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    (proxy, consumer, received)
}

/// Pull: every connection between the gateway and the emulator is reset (a TCP RST, through a
/// proxy) after a receive and before its acknowledge. The gRPC channel connects again by itself
/// once it has seen the connection end, so the acknowledge has two honest outcomes, both
/// checked, and which one comes is a race between the reset reaching the client's connection
/// task and the acknowledge: it succeeds on a new connection (a real ack: nothing comes back
/// after the ack deadline), or it fails `Refused` and the message comes back on the same
/// channel once its ack deadline lapses, presenting 1 (Pub/Sub counted the delivery whose
/// connection broke). tonic reports the broken call as `Cancelled`; the gateway called it
/// `Rejected`, the broker's answer, until this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_a_connection_reset_before_the_acknowledge_is_reported_or_survived() {
    let (proxy, consumer, received) = received_through_a_proxy(Consumption::Pull).await;
    assert_eq!(received.header.handled_count, 0);
    assert!(proxy.reset_all().await > 0, "the consumer's connection goes through the proxy");
    match consumer.acknowledge(&received).await {
        Ok(()) => {
            let lapsed = Duration::from_secs(15);
            assert!(receive(&*consumer, received.id(), lapsed).await.is_none(), "acknowledged, yet redelivered");
            eprintln!("the acknowledge went on a new connection");
        }
        Err(lost) => {
            assert_eq!(lost.kind(), Some(ErrorKind::Refused), "the acknowledge reports the lost connection: {lost}");
            let waited =
                comes_back_counted(&*consumer, received.id(), Duration::from_secs(20), Duration::from_secs(2)).await;
            eprintln!("the acknowledge failed Refused; came back {waited:?} later (ack deadline 10 s)");
        }
    }
}

/// Pull past a settlement's deadline: every byte held 1.5 s each way against a 2 s call deadline,
/// so the Acknowledge reaches the emulator (at 1.5 s) but its answer would come at 3 s. It fails
/// `Timeout` at the deadline, as the generated client alone would have waited for ever. A
/// `Timeout` does not say the ack was lost: here it had reached the server, and the message is
/// settled (not back after its 10 s ack deadline); had it not, the message would come back,
/// counted. Red with a settlement that has no deadline: the acknowledge waits its 3 s answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_an_acknowledge_past_its_deadline_fails_as_a_timeout_and_the_ack_that_arrived_holds() {
    let deadline = Duration::from_secs(2);
    let (proxy, consumer, received) = received_through_a_proxy_within(Consumption::Pull, deadline).await;
    cut_off_at_its_deadline(
        &proxy,
        Duration::from_millis(1500),
        deadline + Duration::from_millis(900),
        consumer.acknowledge(&received),
    )
    .await;
    proxy.delay(Duration::ZERO);
    let lapsed = Duration::from_secs(15);
    assert!(receive(&*consumer, received.id(), lapsed).await.is_none(), "the ack reached the server, yet redelivered");
}

/// Stream: the same reset. The subscriber opens its stream again on its own and sends the
/// acknowledge it was given: it returns `Ok` and the message does not come back after the ack
/// deadline (10 s) has lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_a_connection_reset_before_the_acknowledge_is_survived_by_the_reopened_stream() {
    let (proxy, consumer, received) = received_through_a_proxy(Consumption::Stream).await;
    assert_eq!(received.header.handled_count, 0);
    assert!(proxy.reset_all().await > 0, "the subscriber's connection goes through the proxy");
    consumer.acknowledge(&received).await.expect("the reopened stream carries the acknowledge");
    let lapsed = Duration::from_secs(15);
    assert!(
        receive(&*consumer, received.id(), lapsed).await.is_none(),
        "acknowledged after the reset, yet redelivered"
    );
}

/// Pull under latency: every byte between the gateway and the emulator is held 1.5 s (through a
/// proxy), so a Pull's answer comes 3 s after it was asked for, later than each receive waits
/// (500 ms). A receive that stops waiting leaves its Pull running for the next receive: the
/// message arrives once, presenting 0, as soon as the answer does. Before #31 a receive's timeout
/// cancelled the Pull after the server had answered it with the message (counted, leased for the
/// ack deadline), so the message came back 10 s later presenting 1; under the all-transport
/// load that made 1 run in 10 of gcp-pull FR-15/FR-16 and gcp-stream-ordering DC-2 fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_a_receive_that_stops_waiting_does_not_lose_the_answer() {
    let (endpoint, project) = providers::gcp::endpoint();
    let (proxy, url) = proxied(endpoint).await;
    let through_proxy = GcpConnection::emulator(&url, project).unwrap();
    let topic = unique("slow");
    let consumer = through_proxy.channel(&subscription(&topic, Consumption::Pull, true)).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "answered late");
    connection().producer(false).send(&sent).await.unwrap();
    proxy.delay(Duration::from_millis(1500));
    let started = std::time::Instant::now();
    let mut received = None;
    while received.is_none() && started.elapsed() < Duration::from_secs(9) {
        received = consumer.receive(Duration::from_millis(500)).await.unwrap();
    }
    let received = received.expect("the late answer is taken by a later receive, within the ack deadline");
    eprintln!("received after {:?} through a 1.5 s delay each way", started.elapsed());
    assert_eq!(received.header.handled_count, 0, "the first delivery, counted once");
    proxy.delay(Duration::ZERO);
    consumer.acknowledge(&received).await.unwrap();
}
