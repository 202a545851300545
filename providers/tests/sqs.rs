//! Bespoke SQS tests outside the templates (ADR 0077): a lapsed lease redelivers with a
//! strictly greater count (AC-42), a header-carried count is ignored on first delivery (edge
//! case 5), a dead-letter copy read back keeps its stamp however often the DLQ redelivers it
//! an unreadable message is routed, never dropped, R-10 warns when R >= M, and competing
//! receivers never share a message inside its visibility timeout.

use std::time::Duration;

use aws_sdk_sqs::types::MessageAttributeValue;
use gateway::budget::{self, BudgetWarning, DeliveryCounting};
use gateway::rejection::keys;
use gateway::transport::sqs::{SqsConnection, SqsSubscription};
use gateway::{BagValue, Channel, Message, MessageType, Producer, Rejection, Subscription};

mod support;
use support::proxy::proxied;
use support::{
    a_receive_past_its_deadline_times_out, a_slow_broker_loses_nothing, comes_back_counted, receive, setup_cut_off,
    unique, SETUP_DEADLINE,
};

fn connection() -> &'static SqsConnection {
    providers::sqs::connection()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_visibility_timeout_redelivers_with_a_strictly_greater_count() {
    let queue = unique("lease");
    let mut subscription = SqsSubscription::new(Subscription::new(&queue, &queue));
    subscription.visibility_timeout = Duration::from_secs(1);
    let channel = connection().channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "lease");
    connection().sqs_producer().send(&sent).await.unwrap();

    let first = receive(&channel, sent.id(), Duration::from_secs(10)).await.expect("first delivery");
    assert_eq!(first.header.handled_count, 0);
    // No requeue, no nack: the lease lapses and the broker redelivers on its own.
    let again = receive(&channel, sent.id(), Duration::from_secs(10)).await.expect("redelivery after the lease");
    assert!(
        again.header.handled_count > first.header.handled_count,
        "{} then {}",
        first.header.handled_count,
        again.header.handled_count
    );
    channel.acknowledge(&again).await.unwrap();
    connection().delete(&[queue], None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_delivery_presents_zero_whatever_count_the_header_carries() {
    let queue = unique("header-count");
    let channel = connection().channel(&SqsSubscription::new(Subscription::new(&queue, &queue))).await.unwrap();
    let mut sent = Message::new(&queue, MessageType::Event, "counted elsewhere");
    sent.header.handled_count = 7;
    connection().sqs_producer().send(&sent).await.unwrap();
    let received = receive(&channel, sent.id(), Duration::from_secs(10)).await.unwrap();
    assert_eq!(received.header.handled_count, 0, "the broker counter wins on a source channel");
    channel.acknowledge(&received).await.unwrap();
    connection().delete(&[queue], None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_copy_keeps_its_stamped_count_on_every_dead_letter_delivery() {
    let queue = unique("r28");
    let dead_letter = format!("{queue}-dlq");
    let subscription = SqsSubscription::new(Subscription::new(&queue, &queue).with_dead_letter(&dead_letter));
    let channel = connection().channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "poison");
    connection().sqs_producer().send(&sent).await.unwrap();
    let mut received = receive(&channel, sent.id(), Duration::from_secs(10)).await.unwrap();
    received.header.handled_count = 3;
    assert!(channel.reject(&received, Some(&Rejection::delivery_error("spent"))).await.unwrap());

    let reader = connection().reader(&dead_letter, false).await.unwrap();
    for delivery in 1..=3 {
        let copy = receive(&reader, sent.id(), Duration::from_secs(10)).await.expect("the dead-letter copy");
        assert_eq!(
            copy.header.handled_count, 3,
            "dead-letter delivery {delivery} keeps the stamp, not the DLQ's own count"
        );
        reader.nack(&copy).await.unwrap();
    }
    connection().delete(&[queue, dead_letter], None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_message_is_routed_as_unacceptable_with_its_body() {
    let queue = unique("unreadable");
    let invalid = format!("{queue}-invalid");
    let subscription = SqsSubscription::new(Subscription::new(&queue, &queue).with_invalid_message(&invalid));
    let channel = connection().channel(&subscription).await.unwrap();
    let url = connection().sqs_client().get_queue_url().queue_name(&queue).send().await.unwrap().queue_url.unwrap();
    let odd = MessageAttributeValue::builder().data_type("String").string_value("Query").build().unwrap();
    connection()
        .sqs_client()
        .send_message()
        .queue_url(url)
        .message_body("not one of ours")
        .message_attributes("messageType", odd)
        .send()
        .await
        .unwrap();

    assert!(
        channel.receive(Duration::from_secs(2)).await.unwrap().is_none(),
        "an unreadable message is not handed to the pump"
    );
    let reader = connection().reader(&invalid, false).await.unwrap();
    let copy = reader.receive(Duration::from_secs(5)).await.unwrap().expect("routed to the invalid-message queue");
    assert_eq!(copy.body.bytes, b"not one of ours");
    assert_eq!(copy.header.bag[keys::REJECTION_REASON], BagValue::from("Unacceptable"));
    let why = copy.header.bag[keys::REJECTION_MESSAGE].to_string();
    assert!(why.contains("attribute id is missing") || why.contains("messageType"), "{why}");
    connection().delete(&[queue, invalid], None).await;
}

#[test]
fn r10_warns_when_the_budget_reaches_a_native_limit_the_project_created() {
    let common = Subscription::new("orders", "orders").with_dead_letter("orders-dlq").with_requeue_count(5);
    let mut subscription = SqsSubscription::new(common);
    subscription.redrive_limit = Some(5);
    let warnings = budget::validate(&subscription.subscription, Some(&subscription));
    assert_eq!(
        warnings,
        [BudgetWarning::NativeLimitFirst { subscription: "orders".into(), requeue_count: 5, native_limit: 5 }]
    );
    // R = 3 < M = 5 (the FR-23 cells): nothing to warn about; SQS always counts.
    subscription.subscription.requeue_count = 3;
    assert!(budget::validate(&subscription.subscription, Some(&subscription)).is_empty());
    assert_eq!(subscription.unenforceable_reason(), None);
    // A policy the project did not create is invisible to it.
    subscription.subscription.make_channels = gateway::MakeChannels::Assume;
    assert_eq!(subscription.native_redrive_limit(), None);
}

/// Every connection between the gateway and the endpoint is reset (a TCP RST, through a proxy)
/// after a receive and before its acknowledge. The SDK makes each call on a pooled HTTP
/// connection and opens a new one when the pooled one is gone, so the acknowledge succeeds: a
/// real delete, as the message does not come back once its visibility timeout has lapsed. The
/// gateway's promise on SQS: a broken connection costs nothing the next call cannot redo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_is_survived_by_the_next_call() {
    let (proxy, url) = proxied(providers::sqs::endpoint()).await;
    let through_proxy = SqsConnection::local(&url);
    let queue = unique("reset");
    let mut subscription = SqsSubscription::new(Subscription::new(&queue, &queue));
    subscription.visibility_timeout = Duration::from_secs(2);
    let consumer = through_proxy.channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "unsettled when the connection breaks");
    connection().sqs_producer().send(&sent).await.unwrap();
    let received = receive(&consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    assert_eq!(received.header.handled_count, 0);
    assert!(proxy.reset_all().await > 0, "the consumer's connection goes through the proxy");
    consumer.acknowledge(&received).await.expect("the SDK makes the delete on a new connection");
    let lapsed = Duration::from_secs(2) * 3;
    assert!(receive(&consumer, sent.id(), lapsed).await.is_none(), "acknowledged after the reset, yet redelivered");
    connection().delete(&[queue], None).await;
}

/// Under latency: every byte between the gateway and the emulator held 1.5 s (through a proxy),
/// longer than each receive waits. See `a_slow_broker_loses_nothing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_that_stops_waiting_on_a_slow_endpoint_loses_nothing() {
    let (proxy, url) = proxied(providers::sqs::endpoint()).await;
    let through_proxy = SqsConnection::local(&url);
    let queue = unique("slow");
    let visibility = Duration::from_secs(5);
    let mut subscription = SqsSubscription::new(Subscription::new(&queue, &queue));
    subscription.visibility_timeout = visibility;
    let consumer = through_proxy.channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "answered late");
    connection().sqs_producer().send(&sent).await.unwrap();
    let delay = Duration::from_millis(1500);
    a_slow_broker_loses_nothing(&proxy, &consumer, &sent, delay, visibility * 2, visibility + Duration::from_secs(2))
        .await;
    connection().delete(&[queue], None).await;
}

/// Past the call deadline: every byte held 1.5 s each way, the connection's deadline 2 s. The
/// receive reaches the emulator (1.5 s), which hands the message out (invisible for the
/// visibility timeout, its receive count 1) and answers; the answer would arrive at 3 s, so the
/// receive fails `Timeout` at 2 s. Nothing is lost: the message comes back when its visibility
/// timeout lapses, presenting 1 (counted: the service delivered it), and acknowledged it does not
/// come again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_deadline_fails_as_a_timeout_and_the_message_comes_back_counted() {
    let (proxy, url) = proxied(providers::sqs::endpoint()).await;
    let through_proxy = SqsConnection::local_with_deadline(&url, Duration::from_secs(2));
    let queue = unique("past-deadline");
    let visibility = Duration::from_secs(3);
    let mut subscription = SqsSubscription::new(Subscription::new(&queue, &queue));
    subscription.visibility_timeout = visibility;
    let consumer = through_proxy.channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "answered past the deadline");
    connection().sqs_producer().send(&sent).await.unwrap();
    a_receive_past_its_deadline_times_out(&proxy, &consumer, Duration::from_millis(1500)).await;
    proxy.delay(Duration::ZERO);
    comes_back_counted(&consumer, sent.id(), visibility * 3, visibility + Duration::from_secs(1)).await;
    connection().delete(&[queue], None).await;
}

/// Making channels past the call deadline: every byte held 1.5 s each way, the connection's
/// deadline 2 s. There is no connect to bound (the SDK's clients connect on their first call,
/// each call held to the deadline, its connect included), so the setup is the channel: creating
/// an SNS-fed subscription's queue fails as a `Timeout` at 2 s, and so does a dead-letter
/// reader's lookup of its queue (`Validate`): a lookup that had no answer is a `Timeout`, never
/// `Missing`. Once the endpoint answers both succeed, and the channel carries a message
/// published to its topic, presenting 0. Red without the deadline: the channel waits its round
/// trips out and succeeds; red when a failed lookup is taken for a missing queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_past_its_deadline_fails_as_a_timeout_and_succeeds_once_the_endpoint_answers() {
    let (proxy, url) = proxied(providers::sqs::endpoint()).await;
    let through_proxy = SqsConnection::local_with_deadline(&url, SETUP_DEADLINE);
    let (queue, topic) = (unique("setup-deadline"), unique("setup-deadline-topic"));
    let mut on_sns = SqsSubscription::new(Subscription::new(&queue, &queue));
    on_sns.topic = Some(topic.clone());
    setup_cut_off(&proxy, async { through_proxy.channel(&on_sns).await.map(drop) }).await;
    proxy.delay(Duration::ZERO);
    let consumer = through_proxy.channel(&on_sns).await.expect("a channel once the endpoint answers");
    let sent = Message::new(&topic, MessageType::Command, "after the slow setup");
    connection().sns_producer().send(&sent).await.unwrap();
    let received = receive(&consumer, sent.id(), Duration::from_secs(20)).await.expect("the channel carries it");
    assert_eq!(received.header.handled_count, 0);
    consumer.acknowledge(&received).await.unwrap();
    setup_cut_off(&proxy, async { through_proxy.reader(&queue, false).await.map(drop) }).await;
    proxy.delay(Duration::ZERO);
    through_proxy.reader(&queue, false).await.expect("a reader once the endpoint answers");
    connection().delete(&[queue], Some(&topic)).await;
}

/// Competing receivers on one queue (DC-3's two pumps): SQS hands a message to one receive and
/// hides it from the rest for its visibility timeout. moto 5.2.5 checks and marks without a lock,
/// so two of its request threads could take one message (sqs DC-3 routed a message twice in CI);
/// the launcher makes each pass one step. Here moto switches threads every microsecond, which
/// made 25 of 100 such sends go to two or three receivers before that lock: 4 receivers
/// long-poll each of 8 queues, 3 sends per queue, and every send is taken exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_receivers_never_share_a_message_inside_its_visibility_timeout() {
    const QUEUES: usize = 8;
    const RECEIVERS: usize = 4;
    const SENDS: usize = 3;
    let moto = providers::sqs::start_moto_switching_threads_every(Duration::from_micros(1)).expect("a moto of its own");
    let racing = SqsConnection::local(&format!("http://127.0.0.1:{}", moto.port));
    let mut queues = tokio::task::JoinSet::new();
    for _ in 0..QUEUES {
        let (racing, queue) = (racing.clone(), unique("competing"));
        queues.spawn(async move {
            let mut subscription = SqsSubscription::new(Subscription::new(&queue, &queue));
            subscription.visibility_timeout = Duration::from_secs(30);
            let mut receivers = Vec::new();
            for _ in 0..RECEIVERS {
                receivers.push(racing.channel(&subscription).await.unwrap());
            }
            let mut takers = Vec::new();
            for send in 0..SENDS {
                let mut polls = tokio::task::JoinSet::new();
                for receiver in receivers.clone() {
                    polls.spawn(async move { receiver.receive(Duration::from_secs(2)).await.unwrap() });
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                let sent = Message::new(&queue, MessageType::Command, format!("send {send}"));
                racing.sqs_producer().send(&sent).await.unwrap();
                let taken: Vec<Message> = polls.join_all().await.into_iter().flatten().collect();
                takers.push(taken.iter().filter(|message| message.id() == sent.id()).count());
                // Cleared so the next send is the queue's only message. The outcome is ignored on
                // purpose: when a copy was shared, the receipt of the earlier taker is stale and
                // its delete may fail; the assertion is the count of takers above.
                for message in &taken {
                    let _ = receivers[0].acknowledge(message).await;
                }
            }
            takers
        });
    }
    let takers = queues.join_all().await;
    assert!(takers.iter().flatten().all(|&n| n == 1), "receivers that took each send, per queue: {takers:?}");
    moto.stop(Duration::from_secs(10)).expect("moto stops");
}
