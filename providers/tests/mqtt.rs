//! Bespoke MQTT tests outside the templates: the measurement that MQTT has no delivery counter
//! (a redelivery on a resumed session carries only the DUP flag, and an unacknowledged message
//! is not redelivered while its session stays connected), so the counter kind is `republished`;
//! republishing growing the count on each requeue; the persistent session keeping what was
//! published while its channel was gone; the dead-letter copy keeping its stamp across
//! dead-letter reads; an unreadable payload routed as Unacceptable; a delay refused; and
//! a channel whose session another connection takes over (past the claim check) ending, saying
//! so, instead of taking it back; a connection reset before the acknowledge; and a broker restart
//! between two deliveries.

use std::sync::Arc;
use std::time::Duration;

use gateway::error::ErrorKind;
use gateway::rejection::{keys, Rejection};
use gateway::transport::mqtt::MqttConnection;
use gateway::{Channel, Message, MessageType, Producer, Subscription};

mod support;
use support::proxy::proxied;
use support::{
    a_slow_broker_loses_nothing, receive, send_and_defer_twice, third_delivery_spends_the_budget,
    under_a_budget_of_three, unique, KeptFolder,
};

fn connection() -> &'static MqttConnection {
    providers::mqtt::connection()
}

async fn channel(subscription: &Subscription) -> Arc<dyn Channel> {
    connection().channel(subscription).await.unwrap()
}

fn session(topic: &str) -> Subscription {
    Subscription::new(format!("{topic}-session"), topic)
}

/// The counter measurement: a message received and never settled, its session dropped and
/// resumed twice. mosquitto resends it on each resumption (the DUP flag set) but MQTT carries no
/// count, so every delivery presents the header's 0; while the session stays connected nothing
/// comes back at all (no lease). Hence `republished`: the count grows only by republishing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_has_no_delivery_counter_a_resumed_session_resends_with_the_same_count() {
    let topic = unique("counter");
    let subscription = session(&topic).with_requeue_count(3);
    let mut consumer = channel(&subscription).await;
    let sent = Message::new(&topic, MessageType::Command, "measured");
    connection().producer().send(&sent).await.unwrap();
    let mut presented = Vec::new();
    for resumption in 0..3 {
        let delivery = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("a delivery");
        presented.push(delivery.header.handled_count);
        if resumption == 0 {
            let again = receive(&*consumer, sent.id(), Duration::from_secs(3)).await;
            assert!(again.is_none(), "an unsettled message came back on a connected session: MQTT has a lease?");
        }
        if resumption < 2 {
            drop(consumer);
            tokio::time::sleep(Duration::from_millis(300)).await;
            consumer = channel(&subscription).await;
        } else {
            consumer.acknowledge(&delivery).await.unwrap();
        }
    }
    eprintln!("counter: presented {presented:?} across two session resumptions");
    assert_eq!(presented, [0, 0, 0], "MQTT has no broker counter: a resend presents the header's count");
    assert!(receive(&*consumer, sent.id(), Duration::from_secs(2)).await.is_none(), "acknowledged, yet redelivered");
}

/// The republished counter: each requeue (the pump adds one first) and nack publishes a copy with
/// the count as given, so the count grows by exactly one per deferral: 0, 1, 2, 3, then a nack
/// of the last keeps 3. The original is acknowledged each time: one copy in play.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republishing_grows_the_count_by_one_on_each_requeue() {
    let topic = unique("requeue");
    let consumer = channel(&session(&topic)).await;
    let sent = Message::new(&topic, MessageType::Command, "requeued");
    connection().producer().send(&sent).await.unwrap();
    let mut presented = Vec::new();
    let mut delivery = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery 1");
    for _ in 0..3 {
        presented.push(delivery.header.handled_count);
        delivery.header.handled_count += 1; // as the pump leaves a deferred message
        consumer.requeue(&delivery, Duration::ZERO).await.unwrap();
        delivery = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("a redelivery");
    }
    presented.push(delivery.header.handled_count);
    consumer.nack(&delivery).await.unwrap();
    let nacked = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("the nacked copy");
    presented.push(nacked.header.handled_count);
    consumer.acknowledge(&nacked).await.unwrap();
    eprintln!("republished: presented {presented:?}");
    assert_eq!(presented, [0, 1, 2, 3, 3]);
    assert!(receive(&*consumer, sent.id(), Duration::from_secs(2)).await.is_none(), "a requeued original came back");
}

/// The persistent session: a message published while the subscription's channel is gone is
/// delivered when it is made again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_while_the_channel_is_gone_is_kept_by_its_session() {
    let topic = unique("session");
    let subscription = session(&topic);
    drop(channel(&subscription).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = Message::new(&topic, MessageType::Event, "kept");
    connection().producer().send(&sent).await.unwrap();
    let consumer = channel(&subscription).await;
    let delivery = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("the kept message");
    consumer.acknowledge(&delivery).await.unwrap();
    assert!(consumer.acknowledge(&delivery).await.unwrap_err().to_string().contains("not in flight"));
}

/// the dead-letter copy keeps its stamped count on every dead-letter read, nacked between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_copy_keeps_its_stamp_across_dead_letter_reads() {
    let topic = unique("dlq");
    let consumer = channel(&session(&topic).with_dead_letter(format!("{topic}-dlq"))).await;
    let dead_letters = channel(&Subscription::new(format!("{topic}-dlq-reader"), format!("{topic}-dlq"))).await;
    let sent = Message::new(&topic, MessageType::Command, "rejected");
    connection().producer().send(&sent).await.unwrap();
    let mut delivered = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery");
    delivered.header.handled_count = 3; // as the pump leaves it when the budget R = 3 is spent
    assert!(consumer.reject(&delivered, Some(&Rejection::delivery_error("budget spent"))).await.unwrap());
    let mut counts = Vec::new();
    for _ in 0..3 {
        let copy = receive(&*dead_letters, sent.id(), Duration::from_secs(10)).await.expect("a dead-letter read");
        assert_eq!(copy.header.bag.get(keys::REJECTION_REASON), Some(&"DeliveryError".into()));
        counts.push(copy.header.handled_count);
        dead_letters.nack(&copy).await.unwrap();
    }
    assert_eq!(counts, [3, 3, 3]);
    assert!(receive(&*consumer, sent.id(), Duration::from_secs(2)).await.is_none(), "the rejected source came back");
}

/// A payload the gateway cannot read goes to the invalid-message topic as Unacceptable, with its
/// body, and leaves the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_payload_is_routed_as_unacceptable() {
    let topic = unique("unreadable");
    let consumer = channel(&session(&topic).with_invalid_message(format!("{topic}-invalid"))).await;
    let invalid = channel(&Subscription::new(format!("{topic}-invalid-reader"), format!("{topic}-invalid"))).await;
    connection().producer().publish_raw(&topic, b"not a gateway message".to_vec()).await.unwrap();
    assert!(consumer.receive(Duration::from_secs(3)).await.unwrap().is_none(), "the unreadable payload was presented");
    let routed = invalid.receive(Duration::from_secs(10)).await.unwrap().expect("the routed copy");
    assert_eq!(routed.body.bytes, b"not a gateway message");
    assert_eq!(routed.header.bag.get(keys::REJECTION_REASON), Some(&"Unacceptable".into()));
    invalid.acknowledge(&routed).await.unwrap();
    drop(consumer);
    // Acknowledged after routing: the resumed session does not resend it.
    let resumed = channel(&session(&topic).with_invalid_message(format!("{topic}-invalid"))).await;
    assert!(resumed.receive(Duration::from_secs(2)).await.unwrap().is_none(), "the routed payload came back");
    assert!(invalid.receive(Duration::from_secs(2)).await.unwrap().is_none(), "routed twice");
}

/// MQTT has no per-message delay: a delayed send and a delayed requeue are refused, and the
/// refused requeue leaves the message in flight to be settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_is_refused_not_shortened() {
    let topic = unique("delay");
    let consumer = channel(&session(&topic)).await;
    let sent = Message::new(&topic, MessageType::Command, "delayed");
    let refused = connection().producer().send_with_delay(&sent, Duration::from_secs(1)).await.unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::Unsupported));
    assert!(receive(&*consumer, sent.id(), Duration::from_secs(2)).await.is_none(), "a refused send was delivered");
    connection().producer().send(&sent).await.unwrap();
    let delivery = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivery");
    let refused = consumer.requeue(&delivery, Duration::from_secs(1)).await.unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::Unsupported));
    consumer.acknowledge(&delivery).await.unwrap();
}

/// Two consumers racing past the claim check: a plain client connects with the subscription's
/// client id (taking the channel's session over, as MQTT 3.1.1 lets it) and claims the
/// subscription. The channel, finding the other claim before it reconnects, ends: its receive
/// fails naming the other claim, and it never takes the session back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_taken_over_ends_its_channel_instead_of_fighting_for_it() {
    use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
    let topic = unique("takeover");
    let subscription = session(&topic);
    let consumer = channel(&subscription).await;
    let (host, port) = providers::mqtt::address().rsplit_once(':').expect("host:port");
    let mut options = MqttOptions::new(subscription.name.clone(), host, port.parse().expect("a port"));
    options.set_clean_session(false);
    let (rival, mut events) = AsyncClient::new(options, 8);
    let claim = format!("gateway/claim/{}", subscription.name);
    rival.publish(&claim, QoS::AtLeastOnce, true, "the-rival").await.unwrap();
    let rival_events = tokio::spawn(async move {
        let mut connects = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_millis(200), events.poll()).await {
                Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => connects += 1,
                Ok(Err(_)) => {
                    connects += 100; // taken back: the fight this test rules out
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => {}
            }
        }
        connects
    });
    let error = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Err(error) = consumer.receive(Duration::from_millis(200)).await {
                return error;
            }
        }
    })
    .await
    .expect("the channel's receive fails once its session is taken over");
    assert_eq!(error.kind(), Some(ErrorKind::Refused), "{error}");
    assert!(error.to_string().contains("the-rival"), "the error names the other claim: {error}");
    assert_eq!(rival_events.await.unwrap(), 1, "the rival connected once and kept the session");
}

/// Every connection between the gateway and the broker is reset (a TCP RST, through a proxy)
/// after a receive and before its acknowledge. The MQTT session reconnects on its own (a
/// persistent session) and the broker resends what it holds unacknowledged: the same channel
/// receives the message again, presenting 0, since MQTT carries no count. The acknowledge made
/// over the broken connection returned `Ok`: a QoS 1 `PUBACK` has no reply, so it is queued, never
/// confirmed, and one lost with its connection shows only as the resend. Measured on mosquitto
/// 2.0.11: one resend, then nothing once the resend is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_acknowledge_resends_on_the_reconnected_session_uncounted() {
    let (proxy, url) = proxied(&format!("tcp://{}", providers::mqtt::address())).await;
    let through_proxy =
        MqttConnection::connect(url.trim_start_matches("tcp://")).await.expect("connect through the proxy");
    let topic = unique("reset");
    let consumer = through_proxy.channel(&session(&topic)).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "unsettled when the connection breaks");
    connection().producer().send(&sent).await.unwrap();
    let received = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("delivered");
    assert!(proxy.reset_all().await > 0, "the session's connection goes through the proxy");
    consumer.acknowledge(&received).await.expect("a PUBACK is queued, never confirmed");
    let again = receive(&*consumer, sent.id(), Duration::from_secs(10)).await.expect("resent after the reconnect");
    assert_eq!(again.header.handled_count, 0, "MQTT has no counter: the resend presents the header's count");
    consumer.acknowledge(&again).await.unwrap();
    assert!(receive(&*consumer, sent.id(), Duration::from_secs(3)).await.is_none(), "acknowledged, yet resent");
}

/// mosquitto is stopped and started again on its store between the second and third deliveries
/// of a message under a budget of 3. MQTT keeps no delivery counter: the count is the gateway's,
/// republished with each requeue, and the republished copy waits in the persistent session, which
/// mosquitto writes to its store when it stops. So the count continues: the third delivery, on a
/// new connection, presents 2, and the pumps' rule rejects it, one copy stamped 3. Without a store
/// (`persistence false`, as the matrix's broker runs) the sessions and the copy do not survive
/// the restart: the message is lost, not counted again from 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_between_deliveries_keeps_the_republished_count_in_the_session() {
    let store = KeptFolder::new("restarted-mosquitto");
    let port = providers::local::free_loopback_port();
    let address = format!("127.0.0.1:{port}");
    let start = || providers::mqtt::start_kept(&store.0, port).unwrap_or_else(|e| panic!("{e}"));
    let (subscription, reader) = under_a_budget_of_three(&unique("restart"));

    let broker = start();
    let before = MqttConnection::connect(&address).await.expect("connect");
    let consumer = before.channel(&subscription).await.unwrap();
    // Subscribed before anything is routed: a session receives only what is published after it.
    let dead_letters = before.channel(&reader).await.unwrap();
    let (id, presented) = send_and_defer_twice(&before.producer(), &*consumer, &subscription).await;
    consumer.close().await.unwrap();
    dead_letters.close().await.unwrap();
    drop((consumer, dead_letters, before));
    broker.stop(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    let broker = start();

    let after = MqttConnection::connect(&address).await.expect("connect again");
    let consumer = after.channel(&subscription).await.unwrap();
    let dead_letters = after.channel(&reader).await.unwrap();
    third_delivery_spends_the_budget(&*consumer, &*dead_letters, &subscription, &id, presented).await;
    broker.stop(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
}

/// Under latency: every byte between the gateway and the broker held 1.5 s (through a proxy),
/// longer than each receive waits. See `a_slow_broker_loses_nothing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_that_stops_waiting_on_a_slow_broker_loses_nothing() {
    let (proxy, url) = proxied(&format!("tcp://{}", providers::mqtt::address())).await;
    let through_proxy =
        MqttConnection::connect(url.trim_start_matches("tcp://")).await.expect("connect through the proxy");
    let topic = unique("slow");
    let consumer = through_proxy.channel(&session(&topic)).await.unwrap();
    let sent = Message::new(&topic, MessageType::Command, "answered late");
    connection().producer().send(&sent).await.unwrap();
    let delay = Duration::from_millis(1500);
    let ceiling = Duration::from_secs(12);
    a_slow_broker_loses_nothing(&proxy, &*consumer, &sent, delay, ceiling, Duration::from_secs(5)).await;
}
