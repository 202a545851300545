//! Bespoke Azure Queue Storage tests outside the templates: the measurement of a message's
//! `DequeueCount` (the counter kind in the manifest rests on it) across a visibility update to 0,
//! a delayed update, a lapsed visibility timeout and a new client; the service restarted between
//! two deliveries of a message under a budget (issue #31); a connection reset between a receive
//! and its acknowledge; and calls past their deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::transport::azure::{AzureAccount, AzureQueueConnection, AzureQueueSubscription};
use gateway::{Channel, GatewayRuntime, Message, MessageType, Producer, Subscription};

mod support;
use support::proxy::{proxied, FaultProxy};
use support::{
    acknowledge_after_the_reset, comes_back_counted, cut_off_at_its_deadline, receive, send_and_defer_twice,
    settled_once_or_back, third_delivery_spends_the_budget, under_a_budget_of_three, unique, KeptFolder,
};

fn connection() -> &'static AzureQueueConnection {
    providers::azure::connection()
}

async fn channel_on(
    connection: &AzureQueueConnection,
    subscription: &Subscription,
    lease: Duration,
) -> Arc<dyn Channel> {
    let mut on_azure = AzureQueueSubscription::new(subscription.clone());
    on_azure.lease = lease;
    connection.channel(&on_azure).await.expect("channel")
}

/// A connection of its own to this binary's service through a fault proxy, with `deadline` for
/// connecting.
async fn through_a_proxy(deadline: Duration) -> (FaultProxy, AzureQueueConnection) {
    let (proxy, endpoint) = proxied(connection().endpoint()).await;
    let address = endpoint.trim_start_matches("http://").split('/').next().expect("host:port").to_owned();
    let account = AzureAccount::from_connection_string(&providers::azure::connection_string_for(&address)).unwrap();
    let through = AzureQueueConnection::connect_within(account, GatewayRuntime::shared(), deadline)
        .await
        .expect("connect through the proxy");
    (proxy, through)
}

/// One message through every way the service hands a message out again, on channels with a 2 s
/// visibility timeout: a first receive, a nack (visibility 0), a requeue with a 1 s delay (not
/// back sooner), a lapsed visibility timeout, and a receive on a new connection after another
/// lapse. Measured on Azurite 3.37.0: `DequeueCount` 1, 2, 3, 4, 5, presented 0, 1, 2, 3, 4:
/// every receive that hands it out adds exactly one, and the count is the service's (a new
/// client continues it). The header carried 7 and never decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dequeue_count_counts_every_delivery_across_nack_delay_lapse_and_a_new_client() {
    let queue = unique("counted");
    let subscription = Subscription::new(&queue, &queue);
    let lease = Duration::from_secs(2);
    let consumer = channel_on(connection(), &subscription, lease).await;
    let mut sent = Message::new(&queue, MessageType::Command, "counted by the service");
    sent.header.handled_count = 7;
    connection().producer().send(&sent).await.unwrap();
    let mut presented = Vec::new();

    let first = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    presented.push(first.header.handled_count);
    consumer.nack(&first).await.unwrap();
    let nacked = receive(&*consumer, sent.id(), Duration::from_secs(5)).await.expect("back after a nack");
    presented.push(nacked.header.handled_count);
    let delay = Duration::from_secs(1);
    // From before the call: the server starts the delay when the request reaches it, which may
    // be before the call returns (a redelivery 999.9 ms after the return was seen on nats).
    let requeued_at = Instant::now();
    consumer.requeue(&nacked, delay).await.unwrap();
    let delayed = receive(&*consumer, sent.id(), Duration::from_secs(5)).await.expect("back after the delay");
    assert!(requeued_at.elapsed() >= delay, "a delayed requeue came back sooner: {:?}", requeued_at.elapsed());
    presented.push(delayed.header.handled_count);
    let lapsed = receive(&*consumer, sent.id(), lease * 3).await.expect("back when its visibility lapsed");
    presented.push(lapsed.header.handled_count);
    drop(consumer);

    let account = providers::azure::account();
    let client = AzureQueueConnection::connect_within(account, GatewayRuntime::shared(), Duration::from_secs(10))
        .await
        .expect("a new connection");
    let other = channel_on(&client, &subscription, lease).await;
    let last = receive(&*other, sent.id(), lease * 3).await.expect("delivered to the new client");
    presented.push(last.header.handled_count);
    assert_eq!(presented, [0, 1, 2, 3, 4], "DequeueCount 1..5, whatever the header carried (7)");
    other.acknowledge(&last).await.unwrap();
    assert!(receive(&*other, sent.id(), lease * 2).await.is_none(), "acknowledged, yet delivered again");
    let stale = other.acknowledge(&lapsed).await.expect_err("an old pop receipt settles nothing");
    assert!(matches!(stale, gateway::ChannelError::NotInFlight { .. }), "{stale}");
}

/// The service is stopped (SIGTERM) and started again on its stored queues between the second
/// and third deliveries of a message under a budget of 3: the message and its `DequeueCount` are
/// the service's and stored with the queue, so the count continues; the third delivery presents
/// 2 and the pumps' rule rejects it to the dead-letter queue, one copy, nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_restart_between_deliveries_keeps_the_count_and_the_budget_fires_on_the_third() {
    let folder = KeptFolder::new("restarted-azurite");
    let port = providers::local::free_loopback_port();
    let text = providers::azure::connection_string_at(port);
    let start = || providers::azure::start_kept(&folder.0, port).unwrap_or_else(|e| panic!("{e}"));
    let (subscription, reader) = under_a_budget_of_three(&unique("restart"));
    let lease = Duration::from_secs(5);

    let service = start();
    let before = AzureQueueConnection::connect(&text).await.expect("connect");
    let consumer = channel_on(&before, &subscription, lease).await;
    let dead_letters = channel_on(&before, &reader, lease).await;
    let (id, presented) = send_and_defer_twice(&before.producer(), &*consumer, &subscription).await;
    drop((consumer, dead_letters, before));
    service.stop(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    let service = start();

    let after = AzureQueueConnection::connect(&text).await.expect("connect again");
    let consumer = channel_on(&after, &subscription, lease).await;
    let dead_letters = channel_on(&after, &reader, lease).await;
    third_delivery_spends_the_budget(&*consumer, &*dead_letters, &subscription, &id, presented).await;
    service.stop(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
}

/// Every connection between the gateway and the service is reset (a TCP RST, through a proxy)
/// after a receive and before its acknowledge. HTTP holds nothing on a connection: the client
/// sends the delete on a new one (azure_core retries a request whose connection broke), so the
/// acknowledge goes through and the message is settled, not back after its visibility timeout;
/// or it fails `Refused`, and the message comes back presenting 1 (the service counted the
/// delivery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_settles_once() {
    let (proxy, through) = through_a_proxy(Duration::from_secs(10)).await;
    let queue = unique("reset");
    let lease = Duration::from_secs(3);
    let consumer = channel_on(&through, &Subscription::new(&queue, &queue), lease).await;
    let sent = Message::new(&queue, MessageType::Command, "unsettled when the connection breaks");
    connection().producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    assert_eq!(received.header.handled_count, 0, "a first delivery presents 0");
    assert!(proxy.reset_all().await > 0, "the consumer's connection goes through the proxy");
    let acknowledged = acknowledge_after_the_reset(&*consumer, &received).await;
    let back = receive(&*consumer, sent.id(), lease + Duration::from_secs(4)).await;
    settled_once_or_back(acknowledged, back, 1);
}

/// Past a receive's deadline: every byte held 1.5 s each way against a 2 s call deadline
/// (`AzureQueueSubscription::call_deadline`, 30 s by default), so the Get Messages reaches the
/// service at 1.5 s, which hands the message out (counted, invisible for the lease), and its
/// answer would come at 3 s. The receive fails `Timeout` at the deadline; the message comes back
/// when its visibility lapses, presenting 1, and acknowledged does not come again. Red without
/// the deadline: the receive waits its 3 s answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_past_its_deadline_fails_as_a_timeout_and_the_message_comes_back_counted() {
    let (proxy, through) = through_a_proxy(Duration::from_secs(10)).await;
    let queue = unique("deadline");
    let lease = Duration::from_secs(3);
    let mut on_azure = AzureQueueSubscription::new(Subscription::new(&queue, &queue));
    on_azure.lease = lease;
    on_azure.call_deadline = Duration::from_secs(2);
    let consumer = through.channel(&on_azure).await.expect("channel");
    let sent = Message::new(&queue, MessageType::Command, "received too slowly");
    connection().producer().send(&sent).await.unwrap();
    let receiving = consumer.receive(Duration::from_millis(500));
    cut_off_at_its_deadline(&proxy, Duration::from_millis(1500), Duration::from_millis(2900), receiving).await;
    proxy.delay(Duration::ZERO);
    comes_back_counted(&*consumer, sent.id(), lease + Duration::from_secs(5), lease + Duration::from_secs(2)).await;
}

/// Connecting past its deadline: the first call (the service's properties) is a round trip of
/// 3 s through the proxy, against a 2 s deadline (`AzureQueueConnection::connect_within`, 30 s
/// by default): it fails as a `Timeout` at 2 s, and connects once the service answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_past_its_deadline_fails_as_a_timeout_and_succeeds_once_the_service_answers() {
    let (proxy, endpoint) = proxied(connection().endpoint()).await;
    let address = endpoint.trim_start_matches("http://").split('/').next().expect("host:port").to_owned();
    let account = || AzureAccount::from_connection_string(&providers::azure::connection_string_for(&address)).unwrap();
    let deadline = Duration::from_secs(2);
    let connecting = AzureQueueConnection::connect_within(account(), GatewayRuntime::shared(), deadline);
    cut_off_at_its_deadline(&proxy, Duration::from_millis(1500), Duration::from_millis(2900), connecting).await;
    proxy.delay(Duration::ZERO);
    AzureQueueConnection::connect_within(account(), GatewayRuntime::shared(), deadline)
        .await
        .expect("a connect once the service answers");
}

/// A storage account the service does not know is refused at connect, and the error names the
/// endpoint, never the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_refused_at_connect_and_the_error_never_shows_a_credential() {
    let address = connection().endpoint().trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let wrong = "d3Jvbmcga2V5IGZvciB0aGUgZGV2ZWxvcG1lbnQgYWNjb3VudA==";
    let text = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={wrong};QueueEndpoint=http://{address}/devstoreaccount1;"
    );
    let refused = AzureQueueConnection::connect(&text).await.expect_err("a wrong key connects");
    let shown = refused.to_string();
    eprintln!("{shown}");
    assert_eq!(refused.kind(), Some(gateway::error::ErrorKind::Rejected), "{shown}");
    assert!(!shown.contains(wrong), "{shown}");
    assert!(!shown.contains("sig=") || shown.contains("sig=REDACTED"), "{shown}");
}
