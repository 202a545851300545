//! The pop consumer: pop, ack and change-invisible through the client's instance handles.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use cheetah_string::CheetahString;
use rocketmq_client_rust::{AckStatus, ClientInstanceHandle, ClientResult};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::MessageConst;
use rocketmq_protocol::protocol::header::ack_message_request_header::AckMessageRequestHeader;
use rocketmq_protocol::protocol::header::change_invisible_time_request_header::ChangeInvisibleTimeRequestHeader;
use rocketmq_protocol::protocol::header::extra_info_util::ExtraInfoUtil;
use rocketmq_protocol::protocol::header::namesrv::topic_operation_header::TopicRequestHeader as PopTopicHeader;
use rocketmq_protocol::protocol::header::pop_message_request_header::PopMessageRequestHeader;
use rocketmq_protocol::rpc::rpc_request_header::RpcRequestHeader;
use rocketmq_protocol::rpc::topic_request_header::TopicRequestHeader;

use super::producer::RocketMqProducer;
use super::subscription::RocketMqSubscription;
use super::{broker_error, BoxedFuture, MAX_INVISIBLE};
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// The longest a single pop waits. A waiting pop is not woken by a message coming back from the
/// retry topic (measured: it arrives when the poll ends), so polls stay short.
const MAX_POLL: Duration = Duration::from_secs(1);
const MIN_POLL: Duration = Duration::from_millis(100);
/// Added to a pop's poll time for its request deadline, and the deadline of ack and change-invisible.
const CALL_TIMEOUT_MILLIS: u64 = 5_000;
/// ConsumeInitMode.MIN: a new group starts at the queue's first message.
const INIT_MODE_MIN: i32 = 0;

/// The broker serving a channel's topic.
#[derive(Debug, Clone)]
pub(super) struct Broker {
    pub name: CheetahString,
    pub address: CheetahString,
}

/// The reader: a popped message as a `Message`, its handled count resolved with the broker's
/// attempt (`reconsume_times + 1`). The receipt is the pop checkpoint the broker settles by.
pub fn read_popped_message(popped: &MessageExt, warnings: &ReaderWarnings) -> Result<Message, MalformedMessage> {
    let properties = popped.properties();
    let body = popped.body().unwrap_or_default();
    let body =
        std::str::from_utf8(&body).map_err(|e| MalformedMessage { detail: format!("the body is not UTF-8: {e}") })?;
    let attribute = |name: &str| properties.get(name).map(CheetahString::as_str);
    let attempt = Some(i64::from(popped.reconsume_times()) + 1);
    let receipt = properties.get(MessageConst::PROPERTY_POP_CK).map(CheetahString::to_string);
    attributes::read_message(attribute, body, attempt, receipt, warnings)
}

fn now_millis() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// How a settle call changes a popped message.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Acknowledge,
    /// Invisible for this long from now, then redelivered.
    Invisible(Duration),
}

/// The client calls a channel makes, behind a trait object for the reason `BoxedFuture` gives:
/// a channel holds no client type, so its `async_trait` methods need no proof about one.
pub(super) trait PopClient: Send + Sync {
    fn pop(
        self: Arc<Self>,
        broker: Broker,
        header: PopMessageRequestHeader,
        timeout_millis: u64,
    ) -> BoxedFuture<'static, ClientResult<Option<MessageExt>>>;
    fn ack(
        self: Arc<Self>,
        broker: Broker,
        header: AckMessageRequestHeader,
    ) -> BoxedFuture<'static, ClientResult<AckStatus>>;
    fn change_invisible(
        self: Arc<Self>,
        broker: Broker,
        header: ChangeInvisibleTimeRequestHeader,
    ) -> BoxedFuture<'static, ClientResult<AckStatus>>;
}

impl PopClient for ClientInstanceHandle {
    fn pop(
        self: Arc<Self>,
        broker: Broker,
        header: PopMessageRequestHeader,
        timeout_millis: u64,
    ) -> BoxedFuture<'static, ClientResult<Option<MessageExt>>> {
        Box::pin(async move {
            let popped = self.pop_message(&broker.name, &broker.address, header, timeout_millis).await?;
            Ok(popped.msg_found_list.and_then(|messages| messages.into_iter().next()))
        })
    }

    fn ack(
        self: Arc<Self>,
        broker: Broker,
        header: AckMessageRequestHeader,
    ) -> BoxedFuture<'static, ClientResult<AckStatus>> {
        Box::pin(async move { Ok(self.ack_message(&broker.address, header, CALL_TIMEOUT_MILLIS).await?.status()) })
    }

    fn change_invisible(
        self: Arc<Self>,
        broker: Broker,
        header: ChangeInvisibleTimeRequestHeader,
    ) -> BoxedFuture<'static, ClientResult<AckStatus>> {
        Box::pin(async move {
            let changed =
                self.change_invisible_time(&broker.name, &broker.address, header, CALL_TIMEOUT_MILLIS).await?;
            Ok(changed.status())
        })
    }
}

pub struct RocketMqChannel {
    runtime: GatewayRuntime,
    receiver: Arc<dyn PopClient>,
    settler: Arc<dyn PopClient>,
    broker: Broker,
    subscription: Subscription,
    invisible_time: Duration,
    router: RocketMqProducer,
    warnings: ReaderWarnings,
    counting: CountingReport,
}

impl RocketMqChannel {
    pub(super) fn new(
        runtime: GatewayRuntime,
        receiver: Arc<dyn PopClient>,
        settler: Arc<dyn PopClient>,
        broker: Broker,
        rocketmq: &RocketMqSubscription,
        router: RocketMqProducer,
    ) -> RocketMqChannel {
        let (subscription, invisible_time) = (rocketmq.subscription.clone(), rocketmq.invisible_time);
        let counting = CountingReport::of(rocketmq);
        let warnings = ReaderWarnings::new(&subscription.name);
        RocketMqChannel { runtime, receiver, settler, broker, subscription, invisible_time, router, warnings, counting }
    }

    fn topic_header(&self) -> Option<TopicRequestHeader> {
        let rpc = RpcRequestHeader { broker_name: Some(self.broker.name.clone()), ..Default::default() };
        Some(TopicRequestHeader { rpc_request_header: Some(rpc), lo: None })
    }

    async fn pop_one(&self, wait: Duration) -> Result<Option<MessageExt>, ChannelError> {
        let poll = wait.clamp(MIN_POLL, MAX_POLL).as_millis() as u64;
        let header = PopMessageRequestHeader {
            consumer_group: self.subscription.name.as_str().into(),
            topic: self.subscription.routing_key.as_str().into(),
            queue_id: -1,
            max_msg_nums: 1,
            invisible_time: self.invisible_time.as_millis() as u64,
            poll_time: poll,
            born_time: now_millis(),
            init_mode: INIT_MODE_MIN,
            exp_type: Some("TAG".into()),
            exp: Some("*".into()),
            order: Some(false),
            attempt_id: None,
            topic_request_header: Some(PopTopicHeader {
                lo: None,
                rpc: Some(RpcRequestHeader { broker_name: Some(self.broker.name.clone()), ..Default::default() }),
            }),
        };
        let (handle, broker) = (self.receiver.clone(), self.broker.clone());
        self.runtime
            .call(handle.pop(broker, header, poll + CALL_TIMEOUT_MILLIS))
            .await
            .map_err(|e| broker_error(self.name(), "pop", e))
    }

    /// Acknowledges or changes the invisible time of the popped message `message` came from.
    async fn settle(&self, message: &Message, how: Settle, operation: &'static str) -> Result<(), ChannelError> {
        let not_in_flight = || kit::not_in_flight(self.name(), operation, message);
        let checkpoint = message.receipt.clone().ok_or_else(not_in_flight)?;
        let extra =
            ExtraInfoUtil::parse_ack_extra_info(&checkpoint).map_err(|e| broker_error(self.name(), operation, e))?;
        // A redelivered message comes from the group's pop retry topic and settles there.
        let topic = ExtraInfoUtil::get_real_topic_with_retry(
            &self.subscription.routing_key,
            &self.subscription.name,
            extra.retry,
        )
        .map_err(|e| broker_error(self.name(), operation, e))?;
        let (queue_id, offset) = (extra.queue_id, extra.queue_offset);
        let (handle, broker, group) = (self.settler.clone(), self.broker.clone(), self.subscription.name.clone());
        let topic_header = self.topic_header();
        let call = match how {
            Settle::Acknowledge => handle.ack(
                broker,
                AckMessageRequestHeader {
                    consumer_group: group.into(),
                    topic: topic.into(),
                    queue_id,
                    extra_info: checkpoint.into(),
                    offset,
                    lite_topic: None,
                    topic_request_header: topic_header,
                },
            ),
            Settle::Invisible(duration) => handle.change_invisible(
                broker,
                ChangeInvisibleTimeRequestHeader {
                    consumer_group: group.into(),
                    topic: topic.into(),
                    queue_id,
                    extra_info: checkpoint.into(),
                    offset,
                    invisible_time: duration.min(MAX_INVISIBLE).as_millis() as i64,
                    lite_topic: None,
                    suspend: false,
                    topic_request_header: topic_header,
                },
            ),
        };
        let status = self.runtime.call(call).await.map_err(|e| broker_error(self.name(), operation, e))?;
        // The broker answers NotExist, not an error, for a checkpoint it no longer holds.
        match status {
            AckStatus::Ok => Ok(()),
            AckStatus::NotExist => Err(not_in_flight()),
        }
    }

    /// Requeue and nack: a failed change keeps the message invisible for the rest of its lease,
    /// after which the broker redelivers it anyway, so the failure is logged, not raised.
    async fn make_invisible(&self, message: &Message, duration: Duration, operation: &'static str) {
        if let Err(error) = self.settle(message, Settle::Invisible(duration), operation).await {
            tracing::warn!(channel = self.name(), %error, "falling back to the receive lease");
        }
    }

    /// The raw message, for routing when it cannot be read.
    fn unreadable(&self, popped: MessageExt) -> Message {
        let body = popped.body().unwrap_or_default();
        let receipt = popped.properties().get(MessageConst::PROPERTY_POP_CK).map(CheetahString::to_string);
        attributes::unreadable(
            popped.msg_id(),
            &self.subscription.routing_key,
            &String::from_utf8_lossy(&body),
            receipt,
        )
    }
}

#[async_trait]
impl Channel for RocketMqChannel {
    /// Nothing is held by the client: RocketMQ pops what was not settled again when its invisible time lapses.
    async fn close(&self) -> Result<(), ChannelError> {
        Ok(())
    }

    // A channel is named after its consumer group.
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        // No pause after an empty pop: the pop itself long-polls.
        let pop = |wait| self.pop_one(wait);
        let route =
            move |popped, problem| async move { kit::route_unreadable(self, &self.unreadable(popped), problem).await };
        let read = |popped: &MessageExt| read_popped_message(popped, &self.warnings);
        receive_readable(timeout, Duration::ZERO, pop, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.settle(message, Settle::Acknowledge, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let publish = async |topic: &str, copy: Message| self.router.publish_to(topic, &copy, Duration::ZERO).await;
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.settle(message, Settle::Acknowledge, "reject").await,
            AfterRouting::Release => {
                self.settle(message, Settle::Invisible(Duration::ZERO), "release after a failed reject").await
            }
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// The invisible time becomes the delay (at most 12 h): redelivered no sooner.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.make_invisible(message, delay, "requeue").await;
        Ok(())
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.make_invisible(message, Duration::ZERO, "nack").await;
        Ok(())
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::{keys, Rejection};
    use crate::transport::rocketmq::to_rocketmq_message;

    /// `sent` as the broker would hand it back on delivery `reconsume_times + 1`.
    fn popped(sent: &Message, reconsume_times: i32) -> MessageExt {
        let mut popped = MessageExt::default();
        popped.set_message_inner(to_rocketmq_message("orders", sent, Duration::ZERO).unwrap());
        popped.set_reconsume_times(reconsume_times);
        popped
    }

    #[test]
    fn a_first_delivery_presents_0_whatever_the_header_count() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 5;
        assert_eq!(read_popped_message(&popped(&sent, 0), &ReaderWarnings::default()).unwrap().header.handled_count, 0);
    }

    #[test]
    fn each_redelivery_presents_the_broker_attempt_less_one() {
        let sent = Message::new("orders", MessageType::Command, "x");
        let counts: Vec<u32> = (0..4)
            .map(|times| {
                read_popped_message(&popped(&sent, times), &ReaderWarnings::default()).unwrap().header.handled_count
            })
            .collect();
        assert_eq!(counts, [0, 1, 2, 3]);
    }

    #[test]
    fn the_header_round_trips_through_user_properties() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.partition_key = Some("p".into());
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read = read_popped_message(&popped(&sent, 0), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.header.partition_key, sent.header.partition_key);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.body.bytes, sent.body.bytes);
    }

    /// R-28 and the publisher rule: a forwarded rejection copy keeps its stamped count, even when
    /// its bag carries a stale entry under the header's own property name.
    #[test]
    fn a_rejection_copy_keeps_its_stamped_count_over_a_stale_bag_entry_and_the_dlq_counter() {
        let mut received = Message::new("orders", MessageType::Command, "x");
        received.header.handled_count = 3;
        received.header.bag.insert("handledCount".into(), BagValue::Int(1));
        let copy = crate::rejection::stamp(&received, Some(&Rejection::delivery_error("budget spent")));
        for reconsume_times in [0, 4] {
            let read = read_popped_message(&popped(&copy, reconsume_times), &ReaderWarnings::default()).unwrap();
            assert_eq!(read.header.handled_count, 3);
            assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
        }
    }

    #[test]
    fn a_message_without_the_header_is_malformed_and_names_what_is_missing() {
        let mut popped = MessageExt::default();
        let raw = rocketmq_model::common::message::message_builder::MessageBuilder::new()
            .topic("orders")
            .body_slice(b"raw")
            .build()
            .unwrap();
        popped.set_message_inner(raw);
        let problem = read_popped_message(&popped, &ReaderWarnings::default()).unwrap_err();
        assert!(problem.detail.contains("messageType"), "{problem}");
    }
}
