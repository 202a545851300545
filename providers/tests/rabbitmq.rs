//! Bespoke RabbitMQ tests outside the templates (ADR 0077, R-14): the measurement of the broker's
//! delivery counter on both queue types (raw AMQP, then through the gateway's reader), the
//! quorum release as the return every RabbitMQ version counts (seen on the wire), a quorum
//! requeue with delay that keeps counting, the dead-letter copy keeping its stamp across
//! dead-letter deliveries, an unreadable message routed as Unacceptable, and a node
//! restarted between two deliveries of a message under a budget (the count continues; #31).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::rejection::{keys, Rejection};
use gateway::transport::rabbitmq::lapin::options::{BasicGetOptions, BasicNackOptions, BasicRejectOptions};
use gateway::transport::rabbitmq::lapin::{Connection, ConnectionProperties};
use gateway::transport::rabbitmq::{
    AMQPValue, BasicProperties, RabbitMqConnection, RabbitMqSubscription, DELIVERY_COUNT_HEADER,
};
use gateway::{Channel, GatewayRuntime, Message, MessageType, Producer, Subscription};

mod support;
use support::proxy::proxied;
use support::{
    a_connect_and_a_channel_past_their_deadlines, a_receive_past_its_deadline_times_out, a_slow_broker_loses_nothing,
    assert_refused, comes_back_counted, cut_off_at_its_deadline, receive, reset_before_acknowledge,
    send_and_defer_twice, third_delivery_spends_the_budget, under_a_budget_of_three, unique, KeptFolder,
    SETUP_DEADLINE,
};

fn connection() -> &'static RabbitMqConnection {
    providers::rabbitmq::connection()
}

async fn quorum(subscription: Subscription, limit: Option<u32>) -> Arc<dyn Channel> {
    connection().channel(&RabbitMqSubscription::quorum(subscription, limit)).await.unwrap()
}

async fn classic(subscription: Subscription) -> Arc<dyn Channel> {
    connection().channel(&RabbitMqSubscription::classic(subscription)).await.unwrap()
}

/// What one raw `basic.get` saw: `x-delivery-count` (None when absent) and `redelivered`.
type Seen = (Option<i64>, bool);

/// `basic.get`s one message from `queue` on `channel` and reads its counter, unsettled.
async fn get(channel: &gateway::transport::rabbitmq::lapin::Channel, queue: &str) -> (u64, Seen) {
    for _ in 0..100 {
        if let Some(got) = channel.basic_get(queue.into(), BasicGetOptions { no_ack: false }).await.unwrap() {
            let headers = got.delivery.properties.headers().clone().unwrap_or_default();
            let count = headers.inner().get(DELIVERY_COUNT_HEADER).map(|value| match value {
                AMQPValue::LongLongInt(n) => *n,
                AMQPValue::LongInt(n) => i64::from(*n),
                other => panic!("x-delivery-count of an unexpected type: {other:?}"),
            });
            return (got.delivery.delivery_tag, (count, got.delivery.redelivered));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no message on {queue}");
}

/// Sends one message to `queue`, then reads it five times with raw AMQP, returning it each way a
/// message comes back: nack(requeue), reject(requeue), its channel closed unacked, its connection
/// closed unacked.
async fn measure(queue: &str) -> Vec<Seen> {
    connection().producer().send(&Message::new(queue, MessageType::Command, "measured")).await.unwrap();
    let mut seen = Vec::new();
    let first = Connection::connect(providers::rabbitmq::url(), ConnectionProperties::default()).await.unwrap();
    let channel = first.create_channel().await.unwrap();
    let (tag, delivery) = get(&channel, queue).await;
    seen.push(delivery);
    channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await.unwrap();
    let (tag, delivery) = get(&channel, queue).await;
    seen.push(delivery);
    channel.basic_reject(tag, BasicRejectOptions { requeue: true }).await.unwrap();
    seen.push(get(&channel, queue).await.1);
    channel.close(200, "returning the message unacked".into()).await.unwrap();
    let channel = first.create_channel().await.unwrap();
    seen.push(get(&channel, queue).await.1);
    first.close(200, "returning the message unacked".into()).await.unwrap();
    let second = Connection::connect(providers::rabbitmq::url(), ConnectionProperties::default()).await.unwrap();
    let channel = second.create_channel().await.unwrap();
    let (tag, delivery) = get(&channel, queue).await;
    seen.push(delivery);
    channel.basic_ack(tag, Default::default()).await.unwrap();
    second.close(200, "done".into()).await.unwrap();
    seen
}

/// The counter measurement (as RocketMQ's AC-23): a quorum queue's `x-delivery-count` reads 0, 1,
/// 2, 3, 4 on `basic.get` across a nack, a reject, a closed channel and a closed connection (the
/// number of earlier deliveries, broker-supplied; RabbitMQ 3.10.8, Debian 12's; 4.0.5, Debian
/// 13's, the same but for no header at all on the first delivery), so
/// `rabbitmq-quorum`'s counter is exact. From RabbitMQ 4.3 the nack would not count (rabbitmq-server
/// PR 15387: a return "without failure"), which is why the gateway returns with a reject. A classic
/// queue's is absent on every delivery, so `rabbitmq` republishes. Then through the gateway: the
/// quorum reader presents 0, 1, 2 across two nacks and a recreated channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quorum_counter_is_broker_supplied_and_the_classic_queue_has_none() {
    let queue = unique("quorum-counter");
    drop(quorum(Subscription::new(format!("{queue}-sub"), &queue), None).await);
    let quorum_seen = measure(&queue).await;
    let queue = unique("classic-counter");
    drop(classic(Subscription::new(format!("{queue}-sub"), &queue)).await);
    let classic_seen = measure(&queue).await;
    eprintln!("quorum (x-delivery-count, redelivered): {quorum_seen:?}; classic: {classic_seen:?}");
    // No earlier delivery: 3.10.8 sends `x-delivery-count` 0, 4.0.5 none (both measured).
    assert!(matches!(quorum_seen[0], (Some(0) | None, false)), "a first delivery: {:?}", quorum_seen[0]);
    assert_eq!(quorum_seen[1..], [(Some(1), true), (Some(2), true), (Some(3), true), (Some(4), true)]);
    assert_eq!(classic_seen, [(None, false), (None, true), (None, true), (None, true), (None, true)]);

    let queue = unique("quorum-presented");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue).with_requeue_count(3);
    let consumer = quorum(subscription.clone(), None).await;
    let sent = Message::new(&queue, MessageType::Command, "presented");
    connection().producer().send(&sent).await.unwrap();
    let mut presented = Vec::new();
    for _ in 0..2 {
        let delivery = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("a delivery");
        presented.push(delivery.header.handled_count);
        consumer.nack(&delivery).await.unwrap();
    }
    drop(consumer);
    let recreated = quorum(subscription, None).await;
    let third = receive(&*recreated, sent.id(), Duration::from_secs(10)).await.expect("delivery 3");
    presented.push(third.header.handled_count);
    recreated.acknowledge(&third).await.unwrap();
    assert_eq!(presented, [0, 1, 2]);
}

/// The AMQP 0-9-1 methods a client sent, as (class id, method id) in order.
type Methods = Arc<std::sync::Mutex<Vec<(u16, u16)>>>;
/// `basic.reject` and `basic.nack` (class 60, methods 90 and 120).
const BASIC_REJECT: (u16, u16) = (60, 90);
const BASIC_NACK: (u16, u16) = (60, 120);

/// A loopback TCP proxy in front of the broker that records each method frame its clients send,
/// and the broker URL that goes through it. RabbitMQ 3.10.8 counts a nack as it counts a reject,
/// so only the wire shows which return the gateway made.
async fn recording_proxy() -> (String, Methods) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = providers::rabbitmq::url();
    let (credentials, rest) = url.rsplit_once('@').expect("the broker URL names user@host:port");
    let (broker, vhost) = rest.split_once('/').unwrap_or((rest, ""));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxied = format!("{credentials}@{}/{vhost}", listener.local_addr().unwrap());
    let methods = Methods::default();
    let (recorded, broker) = (methods.clone(), broker.to_owned());
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = tokio::net::TcpStream::connect(&broker).await.unwrap();
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_broker, mut to_broker) = upstream.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut from_broker, &mut to_client).await });
            let recorded = recorded.clone();
            tokio::spawn(async move {
                // The protocol header, then frames: type (1 = method), channel (2), size (4),
                // the payload (a method's starts with its class and method ids), 0xCE.
                let mut protocol = [0u8; 8];
                from_client.read_exact(&mut protocol).await?;
                to_broker.write_all(&protocol).await?;
                loop {
                    let mut head = [0u8; 7];
                    from_client.read_exact(&mut head).await?;
                    let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
                    let mut rest = vec![0u8; size + 1];
                    from_client.read_exact(&mut rest).await?;
                    if head[0] == 1 && size >= 4 {
                        let ids = (u16::from_be_bytes([rest[0], rest[1]]), u16::from_be_bytes([rest[2], rest[3]]));
                        recorded.lock().unwrap().push(ids);
                    }
                    to_broker.write_all(&head).await?;
                    to_broker.write_all(&rest).await?;
                }
                #[allow(unreachable_code)]
                Ok::<(), std::io::Error>(())
            });
        }
    });
    (proxied, methods)
}

/// The gateway returns a quorum delivery (nack, zero-delay requeue) with `basic.reject(requeue)`,
/// the return RabbitMQ counts on every version: from 4.3 a `basic.nack(requeue)` no longer grows
/// `x-delivery-count` (rabbitmq-server PR 15387), so a budget on that count would never fire.
/// Seen on the wire, since the broker here (3.10.8) counts both; the count still grows 0, 1, 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quorum_release_is_the_return_every_version_counts() {
    let (url, methods) = recording_proxy().await;
    let gateway = RabbitMqConnection::connect(&url).await.unwrap();
    let queue = unique("quorum-release");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue).with_requeue_count(3);
    let consumer = gateway.channel(&RabbitMqSubscription::quorum(subscription, None)).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "released");
    connection().producer().send(&sent).await.unwrap();
    let first = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 1");
    consumer.nack(&first).await.unwrap();
    let second = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 2");
    consumer.requeue(&second, Duration::ZERO).await.unwrap();
    let third = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 3");
    consumer.acknowledge(&third).await.unwrap();
    let counts = [first.header.handled_count, second.header.handled_count, third.header.handled_count];
    assert_eq!(counts, [0, 1, 2], "the broker counted both returns");
    let sent_methods = methods.lock().unwrap().clone();
    let returns: Vec<&str> = sent_methods
        .iter()
        .filter_map(|ids| match *ids {
            BASIC_REJECT => Some("basic.reject"),
            BASIC_NACK => Some("basic.nack"),
            _ => None,
        })
        .collect();
    assert_eq!(returns, ["basic.reject", "basic.reject"], "the nack and the requeue each return with basic.reject");
}

/// A publisher-set `x-delivery-count` passes through on a first delivery (measured); the reader
/// ignores it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_set_delivery_count_does_not_count() {
    let queue = unique("spoofed");
    let consumer = quorum(Subscription::new(format!("{queue}-sub"), &queue), None).await;
    let sent = Message::new(&queue, MessageType::Command, "spoofed");
    let mut headers = gateway::transport::rabbitmq::to_headers(&sent);
    headers.insert(DELIVERY_COUNT_HEADER.into(), AMQPValue::LongLongInt(7));
    let properties = BasicProperties::default().with_headers(headers);
    connection().producer().send_native(&queue, b"spoofed", properties).await.unwrap();
    let delivery = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("a delivery");
    assert_eq!(delivery.header.handled_count, 0);
    consumer.acknowledge(&delivery).await.unwrap();
}

/// On a quorum queue a delayed requeue goes through a delay queue and comes back as a new
/// message to the broker: its count travels with it and grows on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_requeue_with_delay_waits_and_keeps_counting() {
    let queue = unique("quorum-delay");
    let consumer = quorum(Subscription::new(format!("{queue}-sub"), &queue), None).await;
    let sent = Message::new(&queue, MessageType::Command, "delayed");
    connection().producer().send(&sent).await.unwrap();
    let mut first = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 1");
    first.header.handled_count += 1; // as the pump leaves it
    let requeued_at = Instant::now();
    consumer.requeue(&first, Duration::from_secs(1)).await.unwrap();
    let second = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 2");
    assert!(requeued_at.elapsed() >= Duration::from_secs(1), "back after {:?}", requeued_at.elapsed());
    consumer.nack(&second).await.unwrap();
    let third = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 3");
    consumer.acknowledge(&third).await.unwrap();
    assert_eq!([second.header.handled_count, third.header.handled_count], [1, 2]);
}

/// the dead-letter copy keeps its stamped count on every dead-letter delivery, whatever the
/// dead-letter queue's own counter says (a quorum queue, which counts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_copy_keeps_its_stamp_across_dead_letter_deliveries() {
    let queue = unique("dlq");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue).with_dead_letter(format!("{queue}-dlq"));
    let consumer = quorum(subscription, Some(providers::rabbitmq::DELIVERY_LIMIT)).await;
    let dead_letters = quorum(Subscription::new(format!("{queue}-dlq-reader"), format!("{queue}-dlq")), None).await;
    let sent = Message::new(&queue, MessageType::Command, "rejected");
    connection().producer().send(&sent).await.unwrap();
    let mut delivered = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery");
    delivered.header.handled_count = 3; // as the pump leaves it when the budget R = 3 is spent
    assert!(consumer.reject(&delivered, Some(&Rejection::delivery_error("budget spent"))).await.unwrap());
    let mut counts = Vec::new();
    for _ in 0..3 {
        let copy = receive(&*dead_letters, sent.id(), Duration::from_secs(10)).await.expect("a dead-letter delivery");
        assert_eq!(copy.header.bag.get(keys::REJECTION_REASON), Some(&"DeliveryError".into()));
        counts.push(copy.header.handled_count);
        dead_letters.nack(&copy).await.unwrap();
    }
    assert_eq!(counts, [3, 3, 3]);
}

/// A message the gateway cannot read goes to the invalid-message queue as Unacceptable, with its
/// body, and leaves the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_message_is_routed_as_unacceptable() {
    for quorum_queue in [false, true] {
        let queue = unique("unreadable");
        let subscription =
            Subscription::new(format!("{queue}-sub"), &queue).with_invalid_message(format!("{queue}-invalid"));
        let reader = Subscription::new(format!("{queue}-invalid-reader"), format!("{queue}-invalid"));
        let (consumer, invalid) = if quorum_queue {
            (quorum(subscription, None).await, quorum(reader, None).await)
        } else {
            (classic(subscription).await, classic(reader).await)
        };
        connection()
            .producer()
            .send_native(&queue, b"not a gateway message", BasicProperties::default())
            .await
            .unwrap();
        assert!(
            consumer.receive(Duration::from_secs(2)).await.unwrap().is_none(),
            "the unreadable message was presented"
        );
        let routed = invalid.receive(Duration::from_secs(10)).await.unwrap().expect("the routed copy");
        assert_eq!(routed.body.bytes, b"not a gateway message");
        assert_eq!(routed.header.bag.get(keys::REJECTION_REASON), Some(&"Unacceptable".into()));
        invalid.acknowledge(&routed).await.unwrap();
    }
}

/// The node stops (gracefully, as an operator restarts it) and starts again on its own database
/// between the second and third deliveries of a message on a quorum queue under a budget of 3.
/// The queue's `x-delivery-count` lives in its Raft log, so the count continues: the third
/// delivery presents 2 and the pumps' rule rejects it to the dead-letter queue, one copy. A count
/// kept by the consumer (the catalogue's consumer-count-per-channel) starts again at 0 on the new
/// connection. The gateway does not reconnect an AMQP connection: the old channel reports the
/// lost node, also once it is back, and a consumer connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restart_between_deliveries_keeps_the_quorum_count_and_the_budget_fires_on_the_third() {
    node_restart_between_deliveries(|subscription| RabbitMqSubscription::quorum(subscription.clone(), None)).await;
}

/// The same restart on a classic queue, which keeps no counter: the count is the gateway's,
/// republished with each requeue as a persistent message of the durable queue, so the copy and
/// its count are in the node's message store and survive the restart. The third delivery presents
/// 2 too: because the copy survived, not because the broker counted (a lapse or a closed channel
/// is not counted on a classic queue: rabbitmq/DC-1 and DC-4 stay Deferred for that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restart_between_deliveries_keeps_the_republished_classic_count() {
    node_restart_between_deliveries(|subscription| RabbitMqSubscription::classic(subscription.clone())).await;
}

/// Defers a message twice under a budget of 3 on the queue `on_queue` declares, stops the node
/// gracefully and starts it on its database, then shows the third delivery spending the budget.
async fn node_restart_between_deliveries(on_queue: impl Fn(&Subscription) -> RabbitMqSubscription) {
    let folder = KeptFolder::new("restarted-node");
    let amqp = providers::rabbitmq::free_kept_port();
    let url = providers::rabbitmq::url_at(amqp);
    let start = || providers::rabbitmq::start_kept(&folder.0, amqp).unwrap_or_else(|e| panic!("{e}"));
    let (subscription, reader) = under_a_budget_of_three(&unique("restart"));

    let node = start();
    let before = RabbitMqConnection::connect(&url).await.expect("connect");
    let consumer = before.channel(&on_queue(&subscription)).await.expect("channel");
    drop(before.channel(&on_queue(&reader)).await.expect("the dead-letter queue, declared"));
    let (id, presented) = send_and_defer_twice(&before.producer(), &*consumer, &subscription).await;

    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_refused(&*consumer, "the node stopped").await;
    let node = start();
    assert_refused(&*consumer, "the node back").await;

    let after = RabbitMqConnection::connect(&url).await.expect("connect again");
    let consumer = after.channel(&on_queue(&subscription)).await.expect("channel");
    let dead_letters = after.channel(&on_queue(&reader)).await.expect("channel");
    third_delivery_spends_the_budget(&*consumer, &*dead_letters, &subscription, &id, presented).await;
    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
}

/// Every connection between the gateway and the node is reset (a TCP RST, through a proxy) after
/// a receive and before its acknowledge. The acknowledge fails `Refused`; the node returns the
/// unacknowledged message to its queue when it sees the connection gone, at once, and a channel
/// on a new connection receives it again. A quorum queue counts that return: the message
/// presents 1. The gateway does not reconnect: the old channel's next receive is `Refused` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_brings_a_quorum_message_back_counted() {
    let (proxy, url) = proxied(providers::rabbitmq::url()).await;
    let queue = unique("reset-quorum");
    let subscription = RabbitMqSubscription::quorum(Subscription::new(format!("{queue}-sub"), &queue), None);
    let through_proxy = RabbitMqConnection::connect(&url).await.expect("connect through the proxy");
    let consumer = through_proxy.channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "unsettled when the connection breaks");
    connection().producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    reset_before_acknowledge(&proxy, &*consumer, &received).await;
    assert_refused(&*consumer, "after the reset").await;
    let recovered = connection().channel(&subscription).await.unwrap();
    let waited = comes_back_counted(&*recovered, sent.id(), Duration::from_secs(10), Duration::from_secs(2)).await;
    eprintln!("came back {waited:?} after the reset");
}

/// The same reset on a classic queue, which keeps no delivery counter: the node re-serves its
/// stored copy, whose header still carries the count the gateway sent (0). This is the fact ADR
/// 0077 names for brokers without a counter: a delivery lost with its connection is not counted,
/// so a budget on a classic queue counts only the returns the gateway made (requeue and nack
/// republish with the count grown). Recorded, not hidden: the message comes back presenting 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_brings_a_classic_message_back_uncounted() {
    let (proxy, url) = proxied(providers::rabbitmq::url()).await;
    let queue = unique("reset-classic");
    let subscription = RabbitMqSubscription::classic(Subscription::new(format!("{queue}-sub"), &queue));
    let through_proxy = RabbitMqConnection::connect(&url).await.expect("connect through the proxy");
    let consumer = through_proxy.channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "unsettled when the connection breaks");
    connection().producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    reset_before_acknowledge(&proxy, &*consumer, &received).await;
    assert_refused(&*consumer, "after the reset").await;
    let recovered = connection().channel(&subscription).await.unwrap();
    let again =
        receive(&*recovered, sent.id(), Duration::from_secs(10)).await.expect("the unsettled message comes back");
    assert_eq!(again.header.handled_count, 0, "a classic queue has no counter: the stored copy's count");
    recovered.acknowledge(&again).await.unwrap();
}

/// A quorum queue declared for a subscription that asks for no native limit delivers a message
/// past RabbitMQ 4.0's default limit of 20: 25 deliveries, presenting 0 to 24, none dropped. With
/// the default left to the broker, 4.0.5 dropped the message after its 21st delivery (measured
/// through `--impl rabbitmq-4.0.5`), so a budget above 20 never fired; 3.10.8 has no default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_without_a_limit_asked_for_delivers_past_the_brokers_default_limit() {
    let queue = unique("no-limit");
    let consumer = quorum(Subscription::new(format!("{queue}-sub"), &queue).with_requeue_count(30), None).await;
    let sent = Message::new(&queue, MessageType::Command, "nacked 24 times");
    connection().producer().send(&sent).await.unwrap();
    let mut presented = Vec::new();
    while presented.len() < 25 {
        let Some(delivery) = receive(&*consumer, sent.id(), Duration::from_secs(5)).await else { break };
        presented.push(delivery.header.handled_count);
        if presented.len() < 25 {
            consumer.nack(&delivery).await.unwrap();
        } else {
            consumer.acknowledge(&delivery).await.unwrap();
        }
    }
    assert_eq!(presented, (0..25).collect::<Vec<u32>>(), "every return counted, none dropped");
}

/// Under latency, on a quorum queue: every byte between the gateway and the node held 1.5 s
/// (through a proxy), longer than each receive waits. See `a_slow_broker_loses_nothing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_that_stops_waiting_on_a_slow_node_loses_nothing() {
    let (proxy, url) = proxied(providers::rabbitmq::url()).await;
    let queue = unique("slow-quorum");
    let subscription = RabbitMqSubscription::quorum(Subscription::new(format!("{queue}-sub"), &queue), None);
    let through_proxy = RabbitMqConnection::connect(&url).await.expect("connect through the proxy");
    let consumer = through_proxy.channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "answered late");
    connection().producer().send(&sent).await.unwrap();
    let delay = Duration::from_millis(1500);
    let ceiling = Duration::from_secs(12);
    a_slow_broker_loses_nothing(&proxy, &*consumer, &sent, delay, ceiling, Duration::from_secs(5)).await;
}

/// Past the call deadline, on a quorum queue: every byte held 1.5 s each way, the receive's
/// deadline 2 s. The `basic.get` reaches the node (1.5 s), which hands the message to the channel
/// and answers; the answer would arrive at 3 s, so the receive fails `Timeout` at 2 s, and the
/// gateway closes the channel rather than leave the message unacknowledged with it for ever: the
/// node returns it to the queue, counted. The spent channel's next call is `Refused`; a new
/// channel receives the message presenting 1, and acknowledged it does not come again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_past_its_deadline_fails_as_a_timeout_and_the_message_comes_back_counted() {
    let (proxy, url) = proxied(providers::rabbitmq::url()).await;
    let queue = unique("past-deadline");
    let mut subscription = RabbitMqSubscription::quorum(Subscription::new(format!("{queue}-sub"), &queue), None);
    subscription.call_deadline = Duration::from_secs(2);
    let through_proxy = RabbitMqConnection::connect(&url).await.expect("connect through the proxy");
    let consumer = through_proxy.channel(&subscription).await.unwrap();
    let sent = Message::new(&queue, MessageType::Command, "answered past the deadline");
    connection().producer().send(&sent).await.unwrap();
    a_receive_past_its_deadline_times_out(&proxy, &*consumer, Duration::from_millis(1500)).await;
    proxy.delay(Duration::ZERO);
    assert_refused(&*consumer, "after the timed-out get").await;
    let recovered = connection().channel(&subscription).await.unwrap();
    comes_back_counted(&*recovered, sent.id(), Duration::from_secs(10), Duration::from_secs(2)).await;
}

/// A publish past its confirm's deadline: every byte held 1.5 s each way against a 2 s deadline
/// (`RabbitMqProducer::with_call_deadline`, 20 s by default; lapin waits for a confirm for ever).
/// The message reaches the node at 1.5 s, and its confirm would come at 3 s: the send fails
/// `Timeout` at 2 s. A `Timeout` does not say the message was lost: this one was stored, and it
/// is delivered once (a caller that retried would have sent it twice: handlers are
/// at-least-once). Red without the deadline: the send waits its 3 s confirm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_past_its_confirm_deadline_fails_as_a_timeout_and_the_message_is_stored_once() {
    let (proxy, url) = proxied(providers::rabbitmq::url()).await;
    let queue = unique("publish-deadline");
    let subscription = RabbitMqSubscription::quorum(Subscription::new(format!("{queue}-sub"), &queue), None);
    let consumer = connection().channel(&subscription).await.unwrap();
    let through_proxy = RabbitMqConnection::connect(&url).await.expect("connect through the proxy");
    let producer = through_proxy.producer().with_call_deadline(Duration::from_secs(2));
    let sent = Message::new(&queue, MessageType::Command, "confirmed too late");
    cut_off_at_its_deadline(&proxy, Duration::from_millis(1500), Duration::from_millis(2900), producer.send(&sent))
        .await;
    proxy.delay(Duration::ZERO);
    let stored = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("the publish reached the node");
    assert_eq!(stored.header.handled_count, 0);
    consumer.acknowledge(&stored).await.unwrap();
    assert!(receive(&*consumer, sent.id(), Duration::from_secs(2)).await.is_none(), "stored twice");
}

/// Making a connection and a channel past their deadlines: every byte held 1.5 s each way. The
/// AMQP handshake is several round trips (the protocol header, start, tune, open, then the
/// publishing channel and its confirm mode), so a connect with a 2 s deadline
/// (`RabbitMqConnection::connect_within`, 30 s by default; lapin has none) fails as a `Timeout`
/// at 2 s, and so does making a channel on a connection through the proxy, past the
/// subscription's `call_deadline` (opening it, then its declares). Once the node answers again
/// both succeed, and the channel carries a message. Red without the deadlines: the connect waits
/// out its round trips and succeeds, as does the channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_and_a_channel_past_their_deadlines_fail_as_timeouts_and_succeed_once_the_node_answers() {
    let (proxy, url) = proxied(providers::rabbitmq::url()).await;
    let queue = unique("setup-deadline");
    let mut subscription = RabbitMqSubscription::quorum(Subscription::new(format!("{queue}-sub"), &queue), None);
    subscription.call_deadline = SETUP_DEADLINE;
    a_connect_and_a_channel_past_their_deadlines(
        &proxy,
        async |deadline| RabbitMqConnection::connect_within(&url, GatewayRuntime::shared(), deadline).await,
        async |through_proxy: &RabbitMqConnection| through_proxy.channel(&subscription).await,
        &connection().producer(),
        &queue,
    )
    .await;
}
