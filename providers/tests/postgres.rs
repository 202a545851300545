//! Bespoke PostgreSQL tests outside the templates: the measurement of the row's delivery
//! counter over nacks, requeues and lease lapses (the evidence for the manifest's `exact`),
//! reject's atomicity under a fault injected between its insert and its delete (a trigger, so
//! the gateway keeps no test hook), the dead-letter copy keeping its stamp across dead-letter
//! deliveries, an unreadable row routed as Unacceptable, and a server restarted between
//! two deliveries of a message under a budget (the count continues; issue #31).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::error::ErrorKind;
use gateway::rejection::{keys, Rejection};
use gateway::transport::postgres::{PostgresConnection, PostgresSubscription};
use gateway::{Channel, GatewayRuntime, Message, MessageType, Producer, Subscription};

mod support;
use support::proxy::proxied;
use support::{
    a_connect_and_a_channel_past_their_deadlines, a_receive_past_its_deadline_times_out, a_slow_broker_loses_nothing,
    assert_refused, comes_back_counted, cut_off_at_its_deadline, receive, reset_before_acknowledge,
    send_and_defer_twice, third_delivery_spends_the_budget, under_a_budget_of_three, unique, KeptFolder,
    SETUP_DEADLINE,
};

fn connection() -> &'static PostgresConnection {
    providers::postgres::connection()
}

async fn channel(subscription: &Subscription, lease: Duration) -> Arc<dyn Channel> {
    providers::postgres::channel_with_lease(subscription.clone(), lease).await
}

/// A plain client on the test's runtime, to look at the table and install faults.
async fn sql() -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(providers::postgres::url(), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// The rows of `queue` and their delivery counters.
async fn counters(client: &tokio_postgres::Client, queue: &str) -> Vec<i32> {
    let rows = client.query("SELECT deliveries FROM gateway_queue WHERE queue = $1 ORDER BY id", &[&queue]).await;
    rows.expect("select").iter().map(|row| row.get(0)).collect()
}

/// The measurement: one message, received four times: released by a nack, requeued with a
/// delay, left unsettled until its lease lapses, and received by a channel made anew. The row's
/// counter reads 1, 2, 3, 4 (presented 0, 1, 2, 3): one more on every receive, whatever ended
/// the delivery before it. The counter kind is `exact`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_counter_grows_by_one_over_nacks_requeues_and_lease_lapses() {
    let queue = unique("counter");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue).with_requeue_count(5);
    let lease = Duration::from_secs(2);
    let consumer = channel(&subscription, lease).await;
    let client = sql().await;
    let sent = Message::new(&queue, MessageType::Command, "measured");
    connection().producer().send(&sent).await.unwrap();
    let started = Instant::now();
    let (mut presented, mut counted, mut arrivals) = (Vec::new(), Vec::new(), Vec::new());
    let mut record = async |delivery: &Message| {
        presented.push(delivery.header.handled_count);
        counted.extend(counters(&client, &queue).await);
        arrivals.push(started.elapsed().as_millis());
    };
    let first = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 1");
    record(&first).await;
    consumer.nack(&first).await.unwrap();
    let second = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 2 (after a nack)");
    record(&second).await;
    let requeued_at = Instant::now();
    consumer.requeue(&second, Duration::from_secs(1)).await.unwrap();
    let third = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 3 (after a requeue)");
    assert!(
        requeued_at.elapsed() >= Duration::from_secs(1),
        "a 1 s requeue came back after {:?}",
        requeued_at.elapsed()
    );
    record(&third).await;
    // Unsettled: its lease lapses. A channel made anew receives it.
    let lapsed_at = Instant::now();
    drop(consumer);
    let recreated = channel(&subscription, lease).await;
    let fourth = receive(&*recreated, sent.id(), Duration::from_secs(10)).await.expect("delivery 4 (after a lapse)");
    assert!(lapsed_at.elapsed() >= lease - Duration::from_millis(500), "received again before the lease lapsed");
    record(&fourth).await;
    eprintln!(
        "postgres counter: the row's deliveries read {counted:?}, presented {presented:?}, arrivals after send {arrivals:?} ms"
    );
    assert_eq!(counted, [1, 2, 3, 4]);
    assert_eq!(presented, [0, 1, 2, 3]);
    // The settled third delivery's receipt is stale: the lapse ended that delivery.
    let stale = recreated.acknowledge(&third).await.unwrap_err();
    assert!(matches!(stale, gateway::ChannelError::NotInFlight { .. }), "{stale}");
    recreated.acknowledge(&fourth).await.unwrap();
    assert!(counters(&client, &queue).await.is_empty(), "acknowledged, yet the row is there");
}

/// Reject is one transaction: a fault between the copy's insert and the original's delete (a
/// `BEFORE DELETE` trigger raising on this queue's rows) commits neither. The dead-letter queue
/// holds no copy, the original is still there and is received again; once the fault is gone, a
/// reject routes exactly one copy and removes the original.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_that_fails_between_insert_and_delete_routes_nothing_and_keeps_the_original() {
    let queue = unique("atomic");
    let dead_letter = format!("{queue}-dlq");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue).with_dead_letter(&dead_letter);
    let lease = Duration::from_secs(20);
    let consumer = channel(&subscription, lease).await;
    let client = sql().await;
    let trigger = format!("fault_{}", queue.replace('-', "_"));
    client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION conformance_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'injected fault: the delete of row % fails', OLD.id; END $$;",
        )
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "CREATE TRIGGER {trigger} BEFORE DELETE ON gateway_queue FOR EACH ROW \
             WHEN (OLD.queue = '{queue}') EXECUTE FUNCTION conformance_refuse_delete()"
        ))
        .await
        .unwrap();
    let sent = Message::new(&queue, MessageType::Command, "rejected under a fault");
    connection().producer().send(&sent).await.unwrap();
    let first = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 1");
    let failed = consumer.reject(&first, Some(&Rejection::delivery_error("budget spent"))).await.unwrap_err();
    assert_eq!(failed.kind(), Some(ErrorKind::Rejected), "{failed}");
    assert!(format!("{failed:?}").contains("injected fault"), "{failed:?}");
    assert_eq!(counters(&client, &dead_letter).await, Vec::<i32>::new(), "a copy was committed without the delete");
    assert_eq!(counters(&client, &queue).await, [1], "the original is gone");
    // Released by the failed reject: received again well before its 20 s lease.
    let released_at = Instant::now();
    let second = receive(&*consumer, sent.id(), Duration::from_secs(5)).await.expect("the original, received again");
    assert!(released_at.elapsed() < lease);
    assert_eq!(second.header.handled_count, 1);
    client.batch_execute(&format!("DROP TRIGGER {trigger} ON gateway_queue")).await.unwrap();
    assert!(consumer.reject(&second, Some(&Rejection::delivery_error("budget spent"))).await.unwrap());
    assert_eq!(counters(&client, &dead_letter).await, [0], "exactly one copy, not yet received");
    assert!(counters(&client, &queue).await.is_empty(), "the original is still there");
    let dead_letters = channel(&Subscription::new(format!("{dead_letter}-reader"), &dead_letter), lease).await;
    let copy = receive(&*dead_letters, sent.id(), Duration::from_secs(10)).await.expect("the copy");
    assert_eq!(copy.header.bag.get(keys::REJECTION_REASON), Some(&"DeliveryError".into()));
    dead_letters.acknowledge(&copy).await.unwrap();
    assert!(dead_letters.receive(Duration::from_secs(1)).await.unwrap().is_none(), "a second copy");
}

/// the dead-letter copy keeps its stamped count on every dead-letter delivery, whatever
/// the copy's own row counter says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_copy_keeps_its_stamp_across_dead_letter_deliveries() {
    let queue = unique("dlq");
    let dead_letter = format!("{queue}-dlq");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue).with_dead_letter(&dead_letter);
    let lease = Duration::from_secs(10);
    let consumer = channel(&subscription, lease).await;
    let dead_letters = channel(&Subscription::new(format!("{dead_letter}-reader"), &dead_letter), lease).await;
    let client = sql().await;
    let sent = Message::new(&queue, MessageType::Command, "rejected");
    connection().producer().send(&sent).await.unwrap();
    let mut delivered = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery");
    delivered.header.handled_count = 3; // as the pump leaves it when the budget R = 3 is spent
    assert!(consumer.reject(&delivered, Some(&Rejection::delivery_error("budget spent"))).await.unwrap());
    let (mut counts, mut row_counters) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let copy = receive(&*dead_letters, sent.id(), Duration::from_secs(10)).await.expect("a dead-letter delivery");
        assert_eq!(copy.header.bag.get(keys::REJECTION_REASON), Some(&"DeliveryError".into()));
        counts.push(copy.header.handled_count);
        row_counters.extend(counters(&client, &dead_letter).await);
        dead_letters.nack(&copy).await.unwrap();
    }
    assert_eq!(row_counters, [1, 2, 3]);
    assert_eq!(counts, [3, 3, 3]);
}

/// A row the gateway cannot read goes to the invalid-message queue as Unacceptable, with its
/// body, and leaves the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_row_is_routed_as_unacceptable() {
    let queue = unique("unreadable");
    let invalid_queue = format!("{queue}-invalid");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue).with_invalid_message(&invalid_queue);
    let lease = Duration::from_secs(10);
    let consumer = channel(&subscription, lease).await;
    let invalid = channel(&Subscription::new(format!("{invalid_queue}-reader"), &invalid_queue), lease).await;
    let client = sql().await;
    let none: Vec<String> = Vec::new();
    client
        .execute(
            "INSERT INTO gateway_queue (queue, attribute_names, attribute_values, body) VALUES ($1, $2, $2, $3)",
            &[&queue, &none, &b"not a gateway message".to_vec()],
        )
        .await
        .unwrap();
    assert!(consumer.receive(Duration::from_secs(2)).await.unwrap().is_none(), "the unreadable row was presented");
    let routed = invalid.receive(Duration::from_secs(10)).await.unwrap().expect("the routed copy");
    assert_eq!(routed.body.bytes, b"not a gateway message");
    assert_eq!(routed.header.bag.get(keys::REJECTION_REASON), Some(&"Unacceptable".into()));
    invalid.acknowledge(&routed).await.unwrap();
    assert!(counters(&client, &queue).await.is_empty(), "the unreadable row stayed in its queue");
}

/// A delayed send is received not before its delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_send_is_received_not_before_the_delay() {
    let queue = unique("delayed");
    let consumer = channel(&Subscription::new(format!("{queue}-sub"), &queue), Duration::from_secs(10)).await;
    let sent = Message::new(&queue, MessageType::Event, "later");
    let sent_at = Instant::now();
    connection().producer().send_with_delay(&sent, Duration::from_secs(2)).await.unwrap();
    let delivered = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("the delayed message");
    assert!(sent_at.elapsed() >= Duration::from_secs(2), "received {:?} after a 2 s delay", sent_at.elapsed());
    consumer.acknowledge(&delivered).await.unwrap();
}

/// `FOR UPDATE SKIP LOCKED`: two channels receiving from one queue at once never both hold a
/// row; every message is received exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_receivers_never_take_the_same_row() {
    let queue = unique("concurrent");
    let subscription = Subscription::new(format!("{queue}-sub"), &queue);
    let lease = Duration::from_secs(30);
    let (first, second) = (channel(&subscription, lease).await, channel(&subscription, lease).await);
    let mut sent: Vec<String> = Vec::new();
    for n in 0..40 {
        let message = Message::new(&queue, MessageType::Event, format!("message {n}"));
        connection().producer().send(&message).await.unwrap();
        sent.push(message.id().to_owned());
    }
    let drain = |consumer: Arc<dyn Channel>| async move {
        let mut received = Vec::new();
        while let Some(message) = consumer.receive(Duration::from_millis(500)).await.unwrap() {
            received.push(message.id().to_owned());
            consumer.acknowledge(&message).await.unwrap();
        }
        received
    };
    let (mut one, two) = tokio::join!(drain(first), drain(second));
    eprintln!("SKIP LOCKED: the two receivers took {} and {} of {}", one.len(), two.len(), sent.len());
    one.extend(two);
    one.sort();
    sent.sort();
    assert_eq!(one, sent, "a message received twice or never");
}

/// The server stops (an immediate shutdown, as a crash) and starts again on its own folder
/// between the second and third deliveries of a message under a budget of 3. The row's counter
/// is the broker's and durable, so the count continues: the third delivery presents 2 and the
/// pumps' rule rejects it to the dead-letter queue, one copy, nothing left behind. A count kept
/// by the consumer (ADR 0077's rejected alternative; the catalogue's consumer-count-per-channel)
/// starts again at 0 on the new connection, and the budget would fire two deliveries late.
/// The gateway does not reconnect a PostgreSQL connection: the old channel reports the lost
/// server as `Refused` on every call, and a consumer connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_between_deliveries_keeps_the_count_and_the_budget_fires_on_the_third() {
    let folder = KeptFolder::new("restarted-cluster");
    let port = providers::local::free_loopback_port();
    let url = providers::postgres::url_at(port);
    let start = || providers::postgres::start_kept(&folder.0, port).unwrap_or_else(|e| panic!("{e}"));
    let (subscription, reader) = under_a_budget_of_three(&unique("restart"));
    let channel_on = async |connection: &PostgresConnection, subscription: &Subscription| {
        let mut on_postgres = PostgresSubscription::new(subscription.clone());
        on_postgres.lease = Duration::from_secs(20);
        connection.channel(&on_postgres).await.expect("channel")
    };

    let server = start();
    let before = PostgresConnection::connect(&url).await.expect("connect");
    before.create_schema().await.expect("schema");
    let consumer = channel_on(&before, &subscription).await;
    let (id, presented) = send_and_defer_twice(&before.producer(), &*consumer, &subscription).await;

    server.stop(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    assert_refused(&*consumer, "the server stopped").await;
    let server = start();
    assert_refused(&*consumer, "the server back").await;

    let after = PostgresConnection::connect(&url).await.expect("connect again");
    let consumer = channel_on(&after, &subscription).await;
    let dead_letters = channel_on(&after, &reader).await;
    third_delivery_spends_the_budget(&*consumer, &*dead_letters, &subscription, &id, presented).await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    assert!(counters(&client, &subscription.routing_key).await.is_empty(), "the original is still there");
    assert!(counters(&client, &reader.routing_key).await.is_empty(), "a copy is left");
    server.stop(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
}

/// Every connection between the gateway and the server is reset (a TCP RST, through a proxy)
/// after a receive and before its acknowledge. The acknowledge fails `Refused`; the row stays
/// leased until its lease lapses, then a channel on a new connection receives it presenting 1,
/// the row's counter having counted the lost delivery. The gateway does not reconnect: the old
/// channel's next receive is `Refused` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_brings_the_message_back_counted() {
    let (proxy, url) = proxied(providers::postgres::url()).await;
    let queue = unique("reset");
    let lease = Duration::from_secs(2);
    let on = async |connection: &PostgresConnection| {
        let mut subscription = PostgresSubscription::new(Subscription::new(format!("{queue}-sub"), &queue));
        subscription.lease = lease;
        connection.channel(&subscription).await.expect("channel")
    };
    let through_proxy = PostgresConnection::connect(&url).await.expect("connect through the proxy");
    let consumer = on(&through_proxy).await;
    let sent = Message::new(&queue, MessageType::Command, "unsettled when the connection breaks");
    connection().producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    reset_before_acknowledge(&proxy, &*consumer, &received).await;
    assert_refused(&*consumer, "after the reset").await;
    let waited = comes_back_counted(&*on(connection()).await, sent.id(), lease * 5, Duration::from_secs(2)).await;
    eprintln!("came back {waited:?} after the reset (lease {lease:?})");
}

/// Under latency: every byte between the gateway and the server held 1.5 s (through a proxy),
/// longer than each receive waits. See `a_slow_broker_loses_nothing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_that_stops_waiting_on_a_slow_server_loses_nothing() {
    let (proxy, url) = proxied(providers::postgres::url()).await;
    let queue = unique("slow");
    let lease = Duration::from_secs(5);
    let mut subscription = PostgresSubscription::new(Subscription::new(format!("{queue}-sub"), &queue));
    subscription.lease = lease;
    let through_proxy = PostgresConnection::connect(&url).await.expect("connect through the proxy");
    let consumer = through_proxy.channel(&subscription).await.expect("channel");
    let sent = Message::new(&queue, MessageType::Command, "answered late");
    connection().producer().send(&sent).await.unwrap();
    let delay = Duration::from_millis(1500);
    a_slow_broker_loses_nothing(&proxy, &*consumer, &sent, delay, lease * 2, lease + Duration::from_secs(2)).await;
}

/// Past the call deadline: every byte held 2 s each way, the channel's deadline 7 s. A receive
/// is two round trips (tokio-postgres prepares the statement, then runs it): the query reaches
/// the server at 6 s, which leases the row and answers; the answer would arrive at 8 s, so the
/// receive fails `Timeout` at 7 s. Nothing is lost: the lease brings the row back when it lapses,
/// presenting 1 (the server counted the delivery whose answer was cut off), and acknowledged it
/// does not come again. (With a deadline inside the first round trip nothing is leased, and the
/// row arrives at once presenting 0.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_deadline_fails_as_a_timeout_and_the_lease_brings_the_row_back_counted() {
    let (proxy, url) = proxied(providers::postgres::url()).await;
    let queue = unique("past-deadline");
    let lease = Duration::from_secs(3);
    let mut subscription = PostgresSubscription::new(Subscription::new(format!("{queue}-sub"), &queue));
    subscription.lease = lease;
    subscription.call_deadline = Duration::from_secs(7);
    let through_proxy = PostgresConnection::connect(&url).await.expect("connect through the proxy");
    let consumer = through_proxy.channel(&subscription).await.expect("channel");
    let sent = Message::new(&queue, MessageType::Command, "answered past the deadline");
    connection().producer().send(&sent).await.unwrap();
    a_receive_past_its_deadline_times_out(&proxy, &*consumer, Duration::from_secs(2)).await;
    proxy.delay(Duration::ZERO);
    comes_back_counted(&*consumer, sent.id(), lease * 3, lease + Duration::from_secs(1)).await;
}

/// A send past its deadline: every byte held 1.5 s each way against a 2 s deadline
/// (`PostgresProducer::with_call_deadline`, 30 s by default; tokio-postgres has none). A send is
/// two round trips (the statement's preparation, then the insert): the preparation's answer would
/// come at 3 s, so the send fails `Timeout` at 2 s before the insert is sent, and nothing is
/// stored. The caller still holds the message: its retry, once the link is fast again, stores it
/// once. Red without the deadline: the send waits out both round trips and succeeds at 6 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_past_its_deadline_fails_as_a_timeout_and_the_retry_stores_it_once() {
    let (proxy, url) = proxied(providers::postgres::url()).await;
    let queue = unique("send-deadline");
    let through_proxy = PostgresConnection::connect(&url).await.expect("connect through the proxy");
    let producer = through_proxy.producer().with_call_deadline(Duration::from_secs(2));
    let subscription = PostgresSubscription::new(Subscription::new(format!("{queue}-sub"), &queue));
    let consumer = connection().channel(&subscription).await.expect("channel");
    let sent = Message::new(&queue, MessageType::Command, "sent too slowly");
    cut_off_at_its_deadline(&proxy, Duration::from_millis(1500), Duration::from_millis(2900), producer.send(&sent))
        .await;
    proxy.delay(Duration::ZERO);
    assert!(
        receive(&*consumer, sent.id(), Duration::from_secs(4)).await.is_none(),
        "cut off before the insert, yet stored"
    );
    producer.send(&sent).await.expect("the retry goes through");
    let stored = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("the retry stored it");
    assert_eq!(stored.header.handled_count, 0);
    consumer.acknowledge(&stored).await.unwrap();
    assert!(receive(&*consumer, sent.id(), Duration::from_secs(2)).await.is_none(), "stored twice");
}

/// Connecting and making a channel past their deadlines: every byte held 1.5 s each way. The
/// startup handshake is a round trip (3 s), so a connect with a 2 s deadline
/// (`PostgresConnection::connect_within`, 30 s by default; tokio-postgres has none unless the
/// connection string sets `connect_timeout`) fails as a `Timeout` at 2 s, and so does a channel
/// made on a connection through the proxy (the queue table's creation, a round trip under the
/// connection's deadline). Once the server answers again both succeed, and the channel carries a
/// message. Red without the deadlines: both wait out their round trips and succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_and_a_channel_past_their_deadlines_fail_as_timeouts_and_succeed_once_the_server_answers() {
    let (proxy, url) = proxied(providers::postgres::url()).await;
    let queue = unique("setup-deadline");
    let mut subscription = PostgresSubscription::new(Subscription::new(format!("{queue}-sub"), &queue));
    subscription.call_deadline = SETUP_DEADLINE;
    a_connect_and_a_channel_past_their_deadlines(
        &proxy,
        async |deadline| PostgresConnection::connect_within(&url, GatewayRuntime::shared(), deadline).await,
        async |through_proxy: &PostgresConnection| through_proxy.channel(&subscription).await,
        &connection().producer(),
        &queue,
    )
    .await;
}
