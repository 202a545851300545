//! Bespoke RocketMQ tests outside the templates (ADR 0077, R-14): the AC-23 measurement that
//! the delivery attempt is broker-supplied (it grows across lease lapses and survives a consumer
//! recreated in the same group), requeue and nack through the invisible time, the dead-letter
//! copy keeping its stamp across DLQ deliveries, an unreadable message routed, and a
//! broker restarted between two deliveries of a message under a budget (the count continues;
//! #31), a connection reset between a receive and its acknowledge (#31), and a channel made past
//! its deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::rejection::{keys, Rejection};
use gateway::transport::rocketmq::{NativeMessageBuilder, RocketMqConnection, RocketMqSubscription};
use gateway::{Channel, Message, MessageType, Producer, Subscription};

mod support;
use support::proxy::FaultProxy;
use support::{
    a_slow_broker_loses_nothing, acknowledge_after_the_reset, cut_off_at_its_deadline, receive, send_after_the_reset,
    send_and_defer_twice, settled_once_or_back, setup_cut_off, third_delivery_spends_the_budget,
    under_a_budget_of_three, unique, KeptFolder, SETUP_DEADLINE,
};

fn connection() -> &'static RocketMqConnection {
    providers::rocketmq::connection()
}

async fn channel(subscription: &Subscription, lease: Duration) -> Arc<dyn Channel> {
    let mut subscription = RocketMqSubscription::new(subscription.clone());
    subscription.invisible_time = lease;
    connection().channel(&subscription).await.unwrap()
}

/// AC-23: requeue count 3, a handler that defers by not settling, three deliveries across lease
/// lapses, the consumer dropped and recreated in the same group before delivery 3. The broker's
/// attempts read 1, 2, 3 (presented 0, 1, 2): the counter is broker-supplied, so AC-24 holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac23_the_attempt_is_broker_supplied_across_lease_lapses_and_a_recreated_consumer() {
    let topic = unique("ac23");
    let subscription = Subscription::new(format!("{topic}-group"), &topic).with_requeue_count(3);
    let lease = Duration::from_secs(2);
    let consumer = channel(&subscription, lease).await;
    let sent = Message::new(&topic, MessageType::Command, "measured");
    connection().producer().send(&sent).await.unwrap();
    let started = Instant::now();
    let mut presented = Vec::new();
    let mut arrivals = Vec::new();
    for _ in 0..2 {
        let delivery = receive(&*consumer, sent.id(), Duration::from_secs(30)).await.expect("a delivery");
        presented.push(delivery.header.handled_count);
        arrivals.push(started.elapsed().as_millis());
    }
    drop(consumer);
    let recreated = channel(&subscription, lease).await;
    let third = receive(&*recreated, sent.id(), Duration::from_secs(30)).await.expect("delivery 3");
    presented.push(third.header.handled_count);
    arrivals.push(started.elapsed().as_millis());
    recreated.acknowledge(&third).await.unwrap();
    eprintln!(
        "AC-23: presented {presented:?} (attempts {:?}), arrivals after send {arrivals:?} ms",
        presented.iter().map(|c| c + 1).collect::<Vec<_>>()
    );
    assert_eq!(presented, [0, 1, 2]);
    assert!(receive(&*recreated, sent.id(), Duration::from_secs(5)).await.is_none(), "acknowledged, yet redelivered");
}

/// Requeue sets the invisible time to the delay: redelivered not before it, one attempt later;
/// nack sets it to 0: redelivered well within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_waits_the_delay_and_nack_releases_at_once_each_counted_by_the_broker() {
    let topic = unique("requeue");
    let lease = Duration::from_secs(30);
    let consumer = channel(&Subscription::new(format!("{topic}-group"), &topic), lease).await;
    let sent = Message::new(&topic, MessageType::Command, "requeued");
    connection().producer().send(&sent).await.unwrap();
    let first = receive(&*consumer, sent.id(), Duration::from_secs(30)).await.expect("delivery 1");
    let requeued_at = Instant::now();
    consumer.requeue(&first, Duration::from_secs(3)).await.unwrap();
    let second = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("delivery 2");
    let waited = requeued_at.elapsed();
    assert!(waited >= Duration::from_secs(3), "redelivered {waited:?} after a 3 s requeue");
    let nacked_at = Instant::now();
    consumer.nack(&second).await.unwrap();
    let third = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("delivery 3");
    let released = nacked_at.elapsed();
    assert!(released < lease, "a nack waited {released:?}, as long as the lease");
    eprintln!("requeue 3 s -> redelivered after {waited:?}; nack -> after {released:?}");
    assert_eq!([first.header.handled_count, second.header.handled_count, third.header.handled_count], [0, 1, 2]);
    consumer.acknowledge(&third).await.unwrap();
}

/// the dead-letter copy keeps its stamped count on every DLQ delivery, whatever the DLQ
/// group's own counter says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_copy_keeps_its_stamp_across_dead_letter_deliveries() {
    let topic = unique("dlq");
    let subscription = Subscription::new(format!("{topic}-group"), &topic).with_dead_letter(format!("{topic}-dlq"));
    let lease = Duration::from_secs(10);
    let consumer = channel(&subscription, lease).await;
    let dead_letters = channel(&Subscription::new(format!("{topic}-dlq-reader"), format!("{topic}-dlq")), lease).await;
    let mut sent = Message::new(&topic, MessageType::Command, "rejected");
    sent.header.handled_count = 0;
    connection().producer().send(&sent).await.unwrap();
    let mut delivered = receive(&*consumer, sent.id(), Duration::from_secs(30)).await.expect("delivery");
    delivered.header.handled_count = 3; // as the pump leaves it when the budget R = 3 is spent
    assert!(consumer.reject(&delivered, Some(&Rejection::delivery_error("budget spent"))).await.unwrap());
    let mut counts = Vec::new();
    for _ in 0..3 {
        let copy = receive(&*dead_letters, sent.id(), Duration::from_secs(30)).await.expect("a dead-letter delivery");
        assert_eq!(copy.header.bag.get(keys::REJECTION_REASON), Some(&"DeliveryError".into()));
        counts.push(copy.header.handled_count);
        dead_letters.nack(&copy).await.unwrap();
    }
    assert_eq!(counts, [3, 3, 3]);
}

/// A message the gateway cannot read goes to the invalid-message topic as Unacceptable, with
/// its body, and leaves the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_message_is_routed_as_unacceptable() {
    let topic = unique("unreadable");
    let subscription =
        Subscription::new(format!("{topic}-group"), &topic).with_invalid_message(format!("{topic}-invalid"));
    let lease = Duration::from_secs(10);
    let consumer = channel(&subscription, lease).await;
    let invalid =
        channel(&Subscription::new(format!("{topic}-invalid-reader"), format!("{topic}-invalid")), lease).await;
    let raw = NativeMessageBuilder::new().topic(topic.as_str()).body_slice(b"not a gateway message").build().unwrap();
    connection().producer().send_native(raw).await.unwrap();
    assert!(consumer.receive(Duration::from_secs(5)).await.unwrap().is_none(), "the unreadable message was presented");
    let routed = invalid.receive(Duration::from_secs(30)).await.unwrap().expect("the routed copy");
    assert_eq!(routed.body.bytes, b"not a gateway message");
    assert_eq!(routed.header.bag.get(keys::REJECTION_REASON), Some(&"Unacceptable".into()));
    invalid.acknowledge(&routed).await.unwrap();
}

/// The name server and broker are shut down in order and started again on their store between
/// the second and third deliveries of a message under a budget of 3. The pop attempt is the
/// broker's, kept with the message in its store, so the count continues: the third delivery, on
/// a new connection, presents 2 and the pumps' rule rejects it to the dead-letter topic, one copy,
/// stamped 3. A count kept by the consumer (consumer-count-per-channel) starts again at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_between_deliveries_keeps_the_count_and_the_budget_fires_on_the_third() {
    let folder = KeptFolder::new("restarted-rocketmq");
    let ports = providers::rocketmq::free_ports();
    let name_server = format!("127.0.0.1:{}", ports.0);
    let start = || providers::rocketmq::start_kept(&folder.0, ports).unwrap_or_else(|e| panic!("{e}"));
    let (subscription, reader) = under_a_budget_of_three(&unique("restart"));
    let channel_on = async |connection: &RocketMqConnection, subscription: &Subscription| {
        let mut on_rocketmq = RocketMqSubscription::new(subscription.clone());
        on_rocketmq.invisible_time = Duration::from_secs(20);
        connection.channel(&on_rocketmq).await.expect("channel")
    };

    let broker = start();
    let before = RocketMqConnection::connect(&name_server).await.expect("connect");
    let consumer = channel_on(&before, &subscription).await;
    let dead_letters = channel_on(&before, &reader).await;
    let (id, presented) = send_and_defer_twice(&before.producer(), &*consumer, &subscription).await;
    consumer.close().await.unwrap();
    dead_letters.close().await.unwrap();
    drop((consumer, dead_letters, before));
    let stopping = std::time::Instant::now();
    broker.stop(Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("stopped in {:?}", stopping.elapsed());
    let broker = start();

    let after = RocketMqConnection::connect(&name_server).await.expect("connect again");
    let consumer = channel_on(&after, &subscription).await;
    let dead_letters = channel_on(&after, &reader).await;
    third_delivery_spends_the_budget(&*consumer, &*dead_letters, &subscription, &id, presented).await;
    broker.stop(Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
}

/// A name server and broker of the test's own, the broker registering 127.0.0.2, where a fault
/// proxy listens on its port (so every connection the client makes to the broker goes through
/// the proxy), and a connection through it.
struct BehindAProxy {
    proxy: FaultProxy,
    broker: providers::local::LocalProcess,
    connection: RocketMqConnection,
    _folder: KeptFolder,
}

async fn broker_behind_a_proxy(name: &str) -> BehindAProxy {
    let folder = KeptFolder::new(name);
    let ports = providers::rocketmq::free_ports();
    let proxy = FaultProxy::start_on(&format!("127.0.0.2:{}", ports.1), &format!("127.0.0.1:{}", ports.1)).await;
    let broker =
        providers::rocketmq::start_kept_behind(&folder.0, ports, "127.0.0.2").unwrap_or_else(|e| panic!("{e}"));
    let connection = RocketMqConnection::connect(&format!("127.0.0.1:{}", ports.0)).await.expect("connect");
    BehindAProxy { proxy, broker, connection, _folder: folder }
}

/// The group `<topic>-group` on `topic`, popping with an invisible time of `lease`.
fn group(topic: &str, lease: Duration) -> RocketMqSubscription {
    let mut on_rocketmq = RocketMqSubscription::new(Subscription::new(format!("{topic}-group"), topic));
    on_rocketmq.invisible_time = lease;
    on_rocketmq
}

/// Every connection between the gateway and the broker is reset (a TCP RST, through a proxy on
/// 127.0.0.2, the address the broker registers with the name server, so every connection the
/// client makes to the broker goes through it) after a receive and before its acknowledge. The
/// client connects again on its own: the acknowledge is made on the new connection (measured:
/// `Ok` 51 ms after the reset, 3 connections reset), the channel goes on receiving (a message sent
/// after the reset arrives on it, no error on the way), and the acknowledged message does not come
/// back when its invisible time lapses. Should the acknowledge fail, it must say so (`Refused`)
/// and the message must come back presenting 1: the pop attempt is the broker's (seen once under
/// CI's load, with the producer's next send failing once as `Refused`, a broken pipe, and the one
/// after it refused by the client as "session closed" while it retired the broken session: the
/// producer now sends again a send refused before writing, for up to 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_reconnects_and_settles_once() {
    let BehindAProxy { proxy, broker, connection, _folder } = broker_behind_a_proxy("proxied-rocketmq").await;
    let topic = unique("reset");
    let lease = Duration::from_secs(5);
    let consumer = connection.channel(&group(&topic, lease)).await.expect("channel");
    let sent = Message::new(&topic, MessageType::Command, "unsettled when the connection breaks");
    connection.producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("delivered");
    assert_eq!(received.header.handled_count, 0, "a first delivery presents 0");
    assert!(proxy.reset_all().await > 0, "the consumer's connections go through the proxy");
    let acknowledged = acknowledge_after_the_reset(&*consumer, &received).await;

    let after = Message::new(&topic, MessageType::Command, "sent after the reset");
    send_after_the_reset(&connection.producer(), &after).await;
    let arrived = receive(&*consumer, after.id(), Duration::from_secs(20)).await.expect("received after the reset");
    consumer.acknowledge(&arrived).await.unwrap();
    // Past the first delivery's invisible time: an unsettled message is back by then.
    let back = receive(&*consumer, sent.id(), lease + Duration::from_secs(5)).await;
    // The pop attempt is the broker's: the delivery lost with its connection counts.
    settled_once_or_back(acknowledged, back, 1);
    consumer.close().await.unwrap();
    broker.stop(Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
}

/// Past the ack's deadline: every byte held 3 s each way against the client's 5 s deadline for
/// an ack (`CALL_TIMEOUT_MILLIS`), so the ack reaches the broker at 3 s and its answer would come
/// at 6 s. It fails `Timeout` at the deadline. A `Timeout` does not say the ack was lost: this
/// one had arrived within the message's invisible time, and the message is settled, not back
/// after it lapses; had it not, the message would come back, counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_past_its_deadline_fails_as_a_timeout_and_the_ack_that_arrived_holds() {
    let BehindAProxy { proxy, broker, connection, _folder } = broker_behind_a_proxy("deadline-rocketmq").await;
    let topic = unique("deadline");
    let lease = Duration::from_secs(10);
    let consumer = connection.channel(&group(&topic, lease)).await.expect("channel");
    let sent = Message::new(&topic, MessageType::Command, "acknowledged too slowly");
    connection.producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("delivered");
    cut_off_at_its_deadline(
        &proxy,
        Duration::from_secs(3),
        Duration::from_millis(5900),
        consumer.acknowledge(&received),
    )
    .await;
    proxy.delay(Duration::ZERO);
    let back = receive(&*consumer, sent.id(), lease + Duration::from_secs(5)).await;
    assert!(back.is_none(), "the ack reached the broker in time, yet the message came back");
    consumer.close().await.unwrap();
    broker.stop(Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
}

/// Under latency: every byte between the gateway and the broker held 400 ms (through the proxy at
/// the address the broker registers), a round trip longer than each receive waits. See
/// `a_slow_broker_loses_nothing`. Not more: see the next test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_that_stops_waiting_on_a_slow_broker_loses_nothing() {
    let BehindAProxy { proxy, broker, connection, _folder } = broker_behind_a_proxy("slow-rocketmq").await;
    let topic = unique("slow");
    let lease = Duration::from_secs(5);
    let consumer = connection.channel(&group(&topic, lease)).await.expect("channel");
    let sent = Message::new(&topic, MessageType::Command, "answered late");
    connection.producer().send(&sent).await.unwrap();
    let delay = Duration::from_millis(400);
    a_slow_broker_loses_nothing(&proxy, &*consumer, &sent, delay, lease * 3, lease + Duration::from_secs(3)).await;
    consumer.close().await.unwrap();
    broker.stop(Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
}

/// A pop that reaches the broker later than its born time + poll time + 500 ms is refused
/// (Apache RocketMQ's PopMessageProcessor, "pop message is timeout too much": POLLING_TIMEOUT,
/// which the client crate reads as not found). Every byte held 1.5 s: each receive finds nothing
/// for 10 s, and the message waits in the queue, neither lost nor counted: once the delay is
/// lifted it arrives presenting 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_arriving_too_late_is_refused_and_the_message_waits_uncounted() {
    let BehindAProxy { proxy, broker, connection, _folder } = broker_behind_a_proxy("late-rocketmq").await;
    let topic = unique("late");
    let consumer = connection.channel(&group(&topic, Duration::from_secs(5))).await.expect("channel");
    let sent = Message::new(&topic, MessageType::Command, "waits out the latency");
    connection.producer().send(&sent).await.unwrap();
    proxy.delay(Duration::from_millis(1500));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        let popped = consumer.receive(Duration::from_millis(500)).await.expect("a refused pop is no error here");
        assert!(popped.is_none(), "a pop arriving 1.5 s after it was made delivered a message");
    }
    proxy.delay(Duration::ZERO);
    let waited = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("the message waited");
    assert_eq!(waited.header.handled_count, 0, "no refused pop counted a delivery");
    consumer.acknowledge(&waited).await.unwrap();
    consumer.close().await.unwrap();
    broker.stop(Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
}

/// Making a channel past its deadline: a proxy in front of the name server holds every byte
/// 1.5 s each way, the subscription's `setup_deadline` is 2 s. Connecting makes no round trip
/// (the client reaches the name server on its first call), so it returns before one could have
/// ended; making the channel (the topic created through the template topic's route, then the
/// topic's own route) fails as a `Timeout` at 2 s. Once the name server answers the channel is
/// made and carries a message presenting 0. Red without the deadline: the channel waits its
/// round trips out and succeeds (6.1 s measured).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_past_its_deadline_fails_as_a_timeout_and_succeeds_once_the_name_server_answers() {
    let proxy = FaultProxy::start(connection().name_server()).await;
    proxy.delay(Duration::from_millis(1500));
    let started = Instant::now();
    let through_proxy =
        RocketMqConnection::connect(&format!("127.0.0.1:{}", proxy.port())).await.expect("connect through the proxy");
    let connected = started.elapsed();
    assert!(connected < Duration::from_secs(3), "a connect makes no round trip to the name server: {connected:?}");
    let topic = unique("setup-deadline");
    let mut on_rocketmq = group(&topic, Duration::from_secs(5));
    on_rocketmq.setup_deadline = SETUP_DEADLINE;
    setup_cut_off(&proxy, async { through_proxy.channel(&on_rocketmq).await.map(drop) }).await;
    proxy.delay(Duration::ZERO);
    let consumer = through_proxy.channel(&on_rocketmq).await.expect("a channel once the name server answers");
    let sent = Message::new(&topic, MessageType::Command, "after the slow setup");
    connection().producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("the channel carries it");
    assert_eq!(received.header.handled_count, 0);
    consumer.acknowledge(&received).await.unwrap();
}
