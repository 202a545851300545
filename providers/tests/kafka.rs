//! Bespoke Kafka tests outside the templates (ADR 0077, R-14): the counter measurement (Kafka
//! keeps no delivery counter: a record redelivered by a nack's seek or to a recreated consumer
//! of the same group presents the count it was sent with; only a requeue's republished copy
//! grows it), the dead-letter copy keeping its stamp across dead-letter reads, an
//! unreadable record routed as Unacceptable, and a node restarted between two deliveries of a
//! message under a budget (the count continues; #31), and a connection reset between a receive and
//! its acknowledge (#31).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::error::ErrorKind;
use gateway::rejection::{keys, Rejection};
use gateway::runtime::GatewayRuntime;
use gateway::transport::kafka::{KafkaConnection, KafkaSubscription};
use gateway::{Channel, Message, MessageType, Producer, Subscription};

mod support;
use support::proxy::FaultProxy;
use support::{
    a_connect_and_a_channel_past_their_deadlines, a_slow_broker_loses_nothing, acknowledge_after_the_reset,
    cut_off_at_its_deadline, receive, send_and_defer_twice, settled_once_or_back, third_delivery_spends_the_budget,
    under_a_budget_of_three, unique, KeptFolder, SETUP_DEADLINE,
};

fn connection() -> &'static KafkaConnection {
    providers::kafka::connection()
}

async fn channel(subscription: &Subscription) -> Arc<dyn Channel> {
    providers::kafka::channel(subscription.clone()).await
}

/// The measurement behind the manifest's `republished`: a record delivered, nacked (seek back),
/// delivered again, left unsettled while its consumer is dropped, delivered to a recreated
/// consumer of the same group, then requeued twice, the pump's count grown each time. Without a
/// broker counter the first three deliveries present 0, 0, 0; the requeued copies present the
/// count the channel was given: 1, then 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_broker_counter_redeliveries_keep_the_sent_count_and_a_requeue_republishes_it_grown() {
    let topic = unique("counter");
    let subscription = Subscription::new(format!("{topic}-group"), &topic).with_requeue_count(5);
    let consumer = channel(&subscription).await;
    let sent = Message::new(&topic, MessageType::Command, "measured");
    connection().producer().send(&sent).await.unwrap();
    let started = Instant::now();
    let mut presented = Vec::new();
    let mut arrivals = Vec::new();
    let mut note = |message: &Message, presented: &mut Vec<u32>| {
        presented.push(message.header.handled_count);
        arrivals.push(started.elapsed().as_millis());
    };
    let first = receive(&*consumer, sent.id(), Duration::from_secs(30)).await.expect("delivery 1");
    note(&first, &mut presented);
    consumer.nack(&first).await.unwrap();
    let second = receive(&*consumer, sent.id(), Duration::from_secs(30)).await.expect("delivery 2 (after a nack)");
    note(&second, &mut presented);
    drop(consumer); // unsettled: its offset is not committed
    let recreated = channel(&subscription).await;
    let mut delivery =
        receive(&*recreated, sent.id(), Duration::from_secs(60)).await.expect("delivery 3 (a recreated consumer)");
    note(&delivery, &mut presented);
    for _ in 0..2 {
        delivery.header.handled_count += 1; // as the pump leaves it before a requeue
        recreated.requeue(&delivery, Duration::ZERO).await.unwrap();
        delivery = receive(&*recreated, sent.id(), Duration::from_secs(30)).await.expect("a requeued copy");
        note(&delivery, &mut presented);
    }
    recreated.acknowledge(&delivery).await.unwrap();
    eprintln!("kafka counter: presented {presented:?}, arrivals after send {arrivals:?} ms");
    assert_eq!(presented, [0, 0, 0, 1, 2]);
    assert!(receive(&*recreated, sent.id(), Duration::from_secs(3)).await.is_none(), "acknowledged, yet redelivered");
}

/// A requeue with a delay holds the record for the delay, then republishes it: redelivered not
/// before the delay, with the count grown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_republishes_not_before_its_delay_with_the_count_grown() {
    let topic = unique("requeue");
    let consumer = channel(&Subscription::new(format!("{topic}-group"), &topic)).await;
    let sent = Message::new(&topic, MessageType::Command, "requeued");
    connection().producer().send(&sent).await.unwrap();
    let mut first = receive(&*consumer, sent.id(), Duration::from_secs(30)).await.expect("delivery 1");
    first.header.handled_count = 1;
    let requeued_at = Instant::now();
    consumer.requeue(&first, Duration::from_secs(2)).await.unwrap();
    let second = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("delivery 2");
    let waited = requeued_at.elapsed();
    assert!(waited >= Duration::from_secs(2), "redelivered {waited:?} after a 2 s requeue");
    assert_eq!(second.header.handled_count, 1);
    consumer.acknowledge(&second).await.unwrap();
}

/// the dead-letter copy keeps its stamped count on every dead-letter read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_copy_keeps_its_stamp_across_dead_letter_reads() {
    let topic = unique("dlq");
    let subscription = Subscription::new(format!("{topic}-group"), &topic).with_dead_letter(format!("{topic}-dlq"));
    let consumer = channel(&subscription).await;
    let dead_letters = channel(&Subscription::new(format!("{topic}-dlq-reader"), format!("{topic}-dlq"))).await;
    let sent = Message::new(&topic, MessageType::Command, "rejected");
    connection().producer().send(&sent).await.unwrap();
    let mut delivered = receive(&*consumer, sent.id(), Duration::from_secs(30)).await.expect("delivery");
    delivered.header.handled_count = 3; // as the pump leaves it when the budget R = 3 is spent
    assert!(consumer.reject(&delivered, Some(&Rejection::delivery_error("budget spent"))).await.unwrap());
    let mut counts = Vec::new();
    for _ in 0..3 {
        let copy = receive(&*dead_letters, sent.id(), Duration::from_secs(30)).await.expect("a dead-letter read");
        assert_eq!(copy.header.bag.get(keys::REJECTION_REASON), Some(&"DeliveryError".into()));
        counts.push(copy.header.handled_count);
        dead_letters.nack(&copy).await.unwrap();
    }
    assert_eq!(counts, [3, 3, 3]);
}

/// A record the gateway cannot read goes to the invalid-message topic as Unacceptable, with its
/// body, and leaves the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_is_routed_as_unacceptable() {
    let topic = unique("unreadable");
    let subscription =
        Subscription::new(format!("{topic}-group"), &topic).with_invalid_message(format!("{topic}-invalid"));
    let consumer = channel(&subscription).await;
    let invalid = channel(&Subscription::new(format!("{topic}-invalid-reader"), format!("{topic}-invalid"))).await;
    let headers = rdkafka_headers_none();
    connection().producer().send_native(&topic, None, b"not a gateway message".to_vec(), headers).await.unwrap();
    assert!(consumer.receive(Duration::from_secs(5)).await.unwrap().is_none(), "the unreadable record was presented");
    let routed = invalid.receive(Duration::from_secs(30)).await.unwrap().expect("the routed copy");
    assert_eq!(routed.body.bytes, b"not a gateway message");
    assert_eq!(routed.header.bag.get(keys::REJECTION_REASON), Some(&"Unacceptable".into()));
    invalid.acknowledge(&routed).await.unwrap();
    let again = channel(&subscription).await;
    assert!(again.receive(Duration::from_secs(5)).await.unwrap().is_none(), "the unreadable record was not committed");
}

fn rdkafka_headers_none() -> gateway::transport::kafka::RecordHeaders {
    gateway::transport::kafka::RecordHeaders::new()
}

/// The node is stopped (a graceful shutdown) and started again on its log dir between the second
/// and third deliveries of a message under a budget of 3. Kafka keeps no delivery counter: the
/// count is the gateway's, republished in the record with each requeue, and the republished copy
/// and the group's committed offsets are in the node's log, so the count continues: the third
/// delivery, on a new connection, presents 2 and the pumps' rule rejects it to the dead-letter
/// topic, one copy, stamped 3. (A count kept by the consumer would start again at 0 on the new
/// connection.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restart_between_deliveries_keeps_the_count_and_the_budget_fires_on_the_third() {
    let folder = KeptFolder::new("restarted-kafka");
    let ports = providers::kafka::free_kept_ports();
    let bootstrap = format!("127.0.0.1:{}", ports.0);
    let start = || providers::kafka::start_kept(&folder.0, ports).unwrap_or_else(|e| panic!("{e}"));
    let (subscription, reader) = under_a_budget_of_three(&unique("restart"));
    let channel_on = async |connection: &KafkaConnection, subscription: &Subscription| {
        let mut on_kafka = KafkaSubscription::new(subscription.clone());
        on_kafka.session_timeout = providers::kafka::SESSION_TIMEOUT;
        connection.channel(&on_kafka).await.expect("channel")
    };

    let node = start();
    let before = KafkaConnection::connect(&bootstrap).await.expect("connect");
    let consumer = channel_on(&before, &subscription).await;
    let dead_letters = channel_on(&before, &reader).await;
    let (id, presented) = send_and_defer_twice(&before.producer(), &*consumer, &subscription).await;

    // librdkafka connects again on its own and fetches ahead: a consumer left open would hold
    // the third delivery across the restart, so this one leaves first, as a stopped consumer
    // process does.
    consumer.close().await.unwrap();
    dead_letters.close().await.unwrap();
    drop((consumer, dead_letters, before));
    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let node = start();

    let after = KafkaConnection::connect(&bootstrap).await.expect("connect again");
    let consumer = channel_on(&after, &subscription).await;
    let dead_letters = channel_on(&after, &reader).await;
    third_delivery_spends_the_budget(&*consumer, &*dead_letters, &subscription, &id, presented).await;
    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
}

/// A node of the test's own behind a fault proxy it advertises as its address (so every
/// connection librdkafka makes goes through the proxy), and a connection through it.
struct BehindAProxy {
    proxy: FaultProxy,
    node: providers::local::LocalProcess,
    connection: KafkaConnection,
    _folder: KeptFolder,
}

async fn node_behind_a_proxy(name: &str) -> BehindAProxy {
    let folder = KeptFolder::new(name);
    let ports = providers::kafka::free_kept_ports();
    let proxy = FaultProxy::start(&format!("127.0.0.1:{}", ports.0)).await;
    let node = providers::kafka::start_kept_behind(&folder.0, ports, proxy.port()).unwrap_or_else(|e| panic!("{e}"));
    let connection = KafkaConnection::connect(&format!("127.0.0.1:{}", proxy.port())).await.expect("connect");
    BehindAProxy { proxy, node, connection, _folder: folder }
}

/// The group `<topic>-group` on `topic`, with a session of `session`.
fn group(topic: &str, session: Duration) -> KafkaSubscription {
    let mut on_kafka = KafkaSubscription::new(Subscription::new(format!("{topic}-group"), topic));
    on_kafka.session_timeout = session;
    on_kafka
}

/// Every connection between the gateway and the node is reset (a TCP RST, through a proxy the
/// node advertises as its address, so the connections librdkafka opens after the bootstrap go
/// through it too) after a receive and before its acknowledge. librdkafka connects again on its
/// own: the acknowledge's commit is made on the new connection (measured: `Ok` 98-163 ms after
/// the reset), so the record is settled and a recreated consumer of the group does not get it.
/// The channel's next receive reports the outage once (`Refused`, librdkafka's "all broker
/// connections are down"), which the pumps retry, and the channel goes on receiving: a record
/// sent after the reset arrives on it. Should the commit lose the race and fail, it must say
/// so (`Refused`) and the record must come back, presenting 0: Kafka keeps no counter, so a
/// delivery lost with its connection is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_reconnects_and_settles_once() {
    let BehindAProxy { proxy, node, connection, _folder } = node_behind_a_proxy("proxied-kafka").await;
    let topic = unique("reset");
    let on_kafka = group(&topic, providers::kafka::SESSION_TIMEOUT);
    let consumer = connection.channel(&on_kafka).await.expect("channel");
    let sent = Message::new(&topic, MessageType::Command, "unsettled when the connection breaks");
    connection.producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("delivered");
    assert_eq!(received.header.handled_count, 0, "a first delivery presents 0");
    assert!(proxy.reset_all().await > 0, "the consumer's connections go through the proxy");
    let acknowledged = acknowledge_after_the_reset(&*consumer, &received).await;

    let after = Message::new(&topic, MessageType::Command, "sent after the reset");
    connection.producer().send(&after).await.unwrap();
    let mut outages = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let arrived = loop {
        assert!(Instant::now() < deadline, "the channel never received again after the reset ({outages} errors)");
        match consumer.receive(Duration::from_millis(500)).await {
            Ok(messages) => match messages.into_iter().find(|m| m.id() == after.id()) {
                Some(arrived) => break arrived,
                None => continue,
            },
            Err(error) => {
                assert_eq!(error.kind(), Some(ErrorKind::Refused), "the outage is reported as Refused: {error}");
                outages += 1;
            }
        }
    };
    eprintln!("the channel received again after {outages} Refused receive(s)");
    consumer.acknowledge(&arrived).await.unwrap();
    consumer.close().await.unwrap();
    drop(consumer);

    let recreated = connection.channel(&on_kafka).await.expect("channel");
    let back = receive(&*recreated, sent.id(), Duration::from_secs(10)).await;
    // Kafka keeps no counter: a delivery lost with its connection is not counted.
    settled_once_or_back(acknowledged, back, 0);
    recreated.close().await.unwrap();
    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
}

/// Past a commit's deadline: every byte held 1.5 s each way against a 2 s call deadline
/// (`KafkaSubscription::call_deadline`, 10 s by default; librdkafka's synchronous commit alone
/// waits out its 60 s socket timeout), so the commit reaches the node at 1.5 s and its answer
/// would come at 3 s. The acknowledge fails `Timeout` at the deadline. A `Timeout` does not say
/// the commit was lost: this one landed, and a recreated consumer of the group does not get the
/// record. The session is 30 s, as a slow link needs (see the next test). Red without the
/// deadline: the acknowledge waits its 3 s answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_past_its_deadline_fails_as_a_timeout_and_the_commit_that_arrived_holds() {
    let BehindAProxy { proxy, node, connection, _folder } = node_behind_a_proxy("deadline-kafka").await;
    let topic = unique("deadline");
    let mut on_kafka = group(&topic, Duration::from_secs(30));
    on_kafka.call_deadline = Duration::from_secs(2);
    let consumer = connection.channel(&on_kafka).await.expect("channel");
    let sent = Message::new(&topic, MessageType::Command, "committed too slowly");
    connection.producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(20)).await.expect("delivered");
    cut_off_at_its_deadline(
        &proxy,
        Duration::from_millis(1500),
        Duration::from_millis(2900),
        consumer.acknowledge(&received),
    )
    .await;
    // Long enough for the commit cut off at 2 s to land (its answer comes at 3 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.delay(Duration::ZERO);
    consumer.close().await.unwrap();
    drop(consumer);
    let recreated = connection.channel(&on_kafka).await.expect("channel");
    let back = receive(&*recreated, sent.id(), Duration::from_secs(15)).await;
    assert!(back.is_none(), "the commit reached the node in time, yet the record was read again");
    recreated.close().await.unwrap();
    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
}

/// Connecting and making a channel past their deadlines, through the proxy the node advertises:
/// every byte held 1.5 s each way. A connect's check that the cluster answers (librdkafka's
/// ApiVersion exchange and a metadata request through the bootstrap, then the same to the
/// advertised address) fails as a `Timeout` at a 2 s deadline (`KafkaConnection::connect_within`;
/// 10 s by default, and measured still unanswered at 10 s),
/// and so does a channel's topic creation on a connection through the proxy, under the
/// subscription's `call_deadline`. Once the node answers again both succeed, and the channel
/// carries a record presenting 0. Red without the deadlines: both wait out their round trips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_and_a_channel_past_their_deadlines_fail_as_timeouts_and_succeed_once_the_node_answers() {
    let BehindAProxy { proxy, node, connection, _folder } = node_behind_a_proxy("setup-deadline-kafka").await;
    let bootstrap = format!("127.0.0.1:{}", proxy.port());
    let topic = unique("setup-deadline");
    let mut on_kafka = group(&topic, providers::kafka::SESSION_TIMEOUT);
    on_kafka.call_deadline = SETUP_DEADLINE;
    a_connect_and_a_channel_past_their_deadlines(
        &proxy,
        async |deadline| KafkaConnection::connect_within(&bootstrap, GatewayRuntime::shared(), deadline).await,
        async |through_proxy: &KafkaConnection| through_proxy.channel(&on_kafka).await,
        &connection.producer(),
        &topic,
    )
    .await;
    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
}

/// Under latency: every byte between the gateway and the node held 1.5 s (through the proxy the
/// node advertises), longer than each receive waits. See `a_slow_broker_loses_nothing`. The
/// group's session is 30 s here: joining takes about ten round trips (31 s measured), and with
/// the matrix's 6 s session the member never joined in 30 s (its session lapsed mid-join, again
/// and again): nothing delivered, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_that_stops_waiting_on_a_slow_node_loses_nothing() {
    let BehindAProxy { proxy, node, connection, _folder } = node_behind_a_proxy("slow-kafka").await;
    let topic = unique("slow");
    let consumer = connection.channel(&group(&topic, Duration::from_secs(30))).await.expect("channel");
    let sent = Message::new(&topic, MessageType::Command, "answered late");
    connection.producer().send(&sent).await.unwrap();
    let delay = Duration::from_millis(1500);
    let ceiling = Duration::from_secs(60);
    a_slow_broker_loses_nothing(&proxy, &*consumer, &sent, delay, ceiling, Duration::from_secs(5)).await;
    consumer.close().await.unwrap();
    node.stop(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
}
