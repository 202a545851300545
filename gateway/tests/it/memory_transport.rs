//! The in-memory transport's own semantics, without a pump.

use std::time::{Duration, Instant};

use gateway::rejection::keys;
use gateway::transport::memory::MemoryBroker;
use gateway::{BagValue, Channel, ChannelError, MakeChannels, Message, MessageType, Producer, Subscription};

fn subscription() -> Subscription {
    Subscription::new("s", "q").with_dead_letter("q-dlq")
}

#[tokio::test]
async fn a_delayed_send_is_not_delivered_before_its_delay() {
    let broker = MemoryBroker::new();
    let channel = broker.channel(&subscription()).unwrap();
    let sent = Message::new("q", MessageType::Event, "later");
    let started = Instant::now();
    broker.producer().send_with_delay(&sent, Duration::from_millis(150)).await.unwrap();
    assert!(channel.receive(Duration::from_millis(50)).await.unwrap().is_none());
    let received = channel.receive(Duration::from_secs(2)).await.unwrap().expect("delivered after the delay");
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(received.id(), sent.id());
    assert_eq!(received.header.handled_count, 0);
}

#[tokio::test]
async fn a_requeue_carries_the_count_it_is_given_after_the_delay() {
    let broker = MemoryBroker::new();
    let channel = broker.channel(&subscription()).unwrap();
    broker.producer().send(&Message::new("q", MessageType::Command, "x")).await.unwrap();
    let mut received = channel.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    received.header.handled_count += 1; // as the pump does
    channel.requeue(&received, Duration::from_millis(100)).await.unwrap();
    assert!(channel.receive(Duration::from_millis(30)).await.unwrap().is_none());
    let again = channel.receive(Duration::from_secs(2)).await.unwrap().unwrap();
    assert_eq!((again.id(), again.header.handled_count), (received.id(), 1));
}

#[tokio::test]
async fn settling_twice_is_an_error_naming_the_message() {
    let broker = MemoryBroker::new();
    let channel = broker.channel(&subscription()).unwrap();
    broker.producer().send(&Message::new("q", MessageType::Command, "x")).await.unwrap();
    let received = channel.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    channel.acknowledge(&received).await.unwrap();
    let error = channel.acknowledge(&received).await.unwrap_err();
    assert!(matches!(error, ChannelError::NotInFlight { .. }));
    assert!(error.to_string().contains(received.id()), "{error}");
}

#[tokio::test]
async fn a_rejection_without_destinations_is_acknowledged_and_routes_nothing() {
    let broker = MemoryBroker::new();
    let channel = broker.channel(&Subscription::new("s", "q")).unwrap();
    broker.producer().send(&Message::new("q", MessageType::Command, "x")).await.unwrap();
    let received = channel.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    assert!(!channel.reject(&received, None).await.unwrap());
    assert_eq!((broker.waiting("q"), broker.in_flight("q")), (0, 0));
}

#[tokio::test]
async fn a_dead_letter_copy_keeps_its_count_and_metadata_when_read_back() {
    let broker = MemoryBroker::new();
    let channel = broker.channel(&subscription()).unwrap();
    broker.producer().send(&Message::new("q", MessageType::Command, "x")).await.unwrap();
    let mut received = channel.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    received.header.handled_count = 3;
    assert!(channel.reject(&received, None).await.unwrap());
    let dead_letters = broker.channel(&Subscription::new("dlq", "q-dlq")).unwrap();
    let copy = dead_letters.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    assert_eq!(copy.header.handled_count, 3);
    assert_eq!(copy.header.bag[keys::REJECTION_REASON], BagValue::from("None"));
}

#[test]
fn validate_mode_refuses_a_missing_queue_and_create_mode_makes_it() {
    let broker = MemoryBroker::new();
    let validating = Subscription::new("s", "absent").with_make_channels(MakeChannels::Validate);
    let error = broker.channel(&validating).unwrap_err();
    assert!(error.to_string().contains("absent"), "{error}");
    broker.channel(&Subscription::new("s", "absent")).unwrap();
    broker.channel(&validating).unwrap();
}

#[test]
fn both_pump_styles_can_share_one_broker() {
    // A blocking receive from another thread while an async one waits: both are served.
    let broker = MemoryBroker::new();
    let channel = broker.channel(&subscription()).unwrap();
    let blocking = gateway::Blocking::new(channel.clone());
    for _ in 0..2 {
        broker.publish("q", Message::new("q", MessageType::Command, "x"), Duration::ZERO);
    }
    let thread =
        std::thread::spawn(move || gateway::BlockingChannel::receive(&blocking, Duration::from_secs(1)).unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let asynchronous = runtime.block_on(channel.receive(Duration::from_secs(1))).unwrap();
    let blocked = thread.join().unwrap();
    assert!(asynchronous.is_some() && blocked.is_some());
    assert_ne!(asynchronous.unwrap().id(), blocked.unwrap().id());
}

#[tokio::test]
async fn closing_a_channel_puts_back_what_it_held_and_nothing_another_channel_holds() {
    let broker = MemoryBroker::new();
    let (first, second) = (broker.channel(&subscription()).unwrap(), broker.channel(&subscription()).unwrap());
    for body in ["a", "b", "c"] {
        broker.producer().send(&Message::new("q", MessageType::Command, body)).await.unwrap();
    }
    let settled = first.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    let held = first.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    let others = second.receive(Duration::from_secs(1)).await.unwrap().unwrap();
    first.acknowledge(&settled).await.unwrap();
    first.close().await.unwrap();
    assert_eq!(
        (broker.waiting("q"), broker.in_flight("q")),
        (1, 1),
        "only the unsettled message of the closed channel is back"
    );
    let again = second.receive(Duration::from_secs(1)).await.unwrap().expect("put back at once");
    assert_eq!((again.id(), again.header.handled_count), (held.id(), 0));
    second.acknowledge(&others).await.unwrap();
}
