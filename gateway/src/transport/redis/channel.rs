//! The consumer: a consumer of the subscription's group, reading through the group's pending
//! entries list (PEL), and its settlement.
//!
//! Receive first claims an entry left idle in the PEL for longer than the lease (`XAUTOCLAIM`,
//! which adds one to its times-delivered counter), then reads a new one (`XREADGROUP … >`, which
//! puts it in the PEL at 1). A lapsed lease, a nack and a requeue all come back through the first
//! step: nack and requeue only set the entry's idle time (`XCLAIM … IDLE … JUSTID`: `JUSTID`
//! leaves the counter alone, so each redelivery counts once, in the claim that makes it), to the
//! lease (claimable at once) or to the lease less the delay (claimable once the delay has passed,
//! on the server's clock). Nothing is republished, so the broker's counter is the count.

use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::Value;
use async_trait::async_trait;

use super::broker_error;
use super::entry::{self, read_entry, StreamEntry};
use super::producer::RedisProducer;
use super::subscription::RedisSubscription;
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// The longest a read blocks. A blocked `XREADGROUP` wakes only for new entries, not for one a
/// nack made claimable, so blocks stay short and the claim step runs between them.
pub(super) const MAX_BLOCK: Duration = Duration::from_millis(250);
/// How many `XAUTOCLAIM` pages one receive follows (each scans at most 10 PEL entries per entry
/// asked for) before reading new entries.
const MAX_CLAIM_PAGES: usize = 16;

/// An entry as fetched, with the group's times-delivered counter for it.
type Fetched = (StreamEntry, Option<i64>);

pub struct RedisChannel {
    runtime: GatewayRuntime,
    /// This channel's own connection: its blocking reads hold up nothing else.
    receiver: MultiplexedConnection,
    /// The connection's shared one, for settling.
    settler: MultiplexedConnection,
    subscription: Subscription,
    /// This channel's consumer name in the group.
    consumer: String,
    lease: Duration,
    router: RedisProducer,
    warnings: ReaderWarnings,
    counting: CountingReport,
}

impl RedisChannel {
    pub(super) fn new(
        runtime: GatewayRuntime,
        receiver: MultiplexedConnection,
        settler: MultiplexedConnection,
        redis: &RedisSubscription,
        router: RedisProducer,
    ) -> RedisChannel {
        let subscription = redis.subscription.clone();
        let counting = CountingReport::of(redis);
        let warnings = ReaderWarnings::new(&subscription.name);
        let consumer = format!("consumer-{}", uuid::Uuid::new_v4().simple());
        RedisChannel {
            runtime,
            receiver,
            settler,
            subscription,
            consumer,
            lease: redis.lease,
            router,
            warnings,
            counting,
        }
    }

    fn stream(&self) -> &str {
        &self.subscription.routing_key
    }

    async fn query(
        &self,
        connection: &MultiplexedConnection,
        command: ::redis::Cmd,
        operation: &'static str,
    ) -> Result<Value, ChannelError> {
        let mut connection = connection.clone();
        self.runtime
            .call(async move { command.query_async::<Value>(&mut connection).await })
            .await
            .map_err(|e| broker_error(self.name(), operation, e))
    }

    fn command(&self, name: &str) -> ::redis::Cmd {
        let mut command = ::redis::cmd(name);
        command.arg(self.stream()).arg(&self.subscription.name);
        command
    }

    /// An entry idle in the group's PEL for longer than the lease, claimed for this consumer.
    async fn claim_lapsed(&self) -> Result<Option<Fetched>, ChannelError> {
        let mut cursor = "0-0".to_owned();
        for _ in 0..MAX_CLAIM_PAGES {
            let mut command = self.command("XAUTOCLAIM");
            command.arg(&self.consumer).arg(self.lease.as_millis() as u64).arg(&cursor).arg("COUNT").arg(1);
            let Value::Array(reply) = self.query(&self.receiver, command, "claim").await? else {
                return Ok(None);
            };
            let mut reply = reply.into_iter();
            let next = reply.next().and_then(entry::text).unwrap_or_else(|| "0-0".to_owned());
            let claimed = match reply.next() {
                Some(Value::Array(claimed)) => claimed.into_iter().find_map(StreamEntry::from_value),
                _ => None,
            };
            if let Some(claimed) = claimed {
                let count = self.times_delivered(&claimed.id).await?;
                return Ok(Some((claimed, count)));
            }
            if next == "0-0" {
                break;
            }
            cursor = next;
        }
        Ok(None)
    }

    /// The group's times-delivered counter for the pending entry `id` (`XPENDING … id id 1`):
    /// one call, made only for a claimed entry (a new one is at 1).
    async fn times_delivered(&self, id: &str) -> Result<Option<i64>, ChannelError> {
        let mut command = self.command("XPENDING");
        command.arg(id).arg(id).arg(1);
        let Value::Array(pending) = self.query(&self.receiver, command, "pending").await? else { return Ok(None) };
        let Some(Value::Array(detail)) = pending.into_iter().next() else { return Ok(None) };
        // [id, consumer, idle ms, times delivered]
        Ok(match detail.into_iter().nth(3) {
            Some(Value::Int(count)) => Some(count),
            Some(other) => {
                let text = entry::text(other).unwrap_or_default();
                attributes::broker_count_from_text(Some(&text), &self.warnings)
            }
            None => None,
        })
    }

    /// A new entry for this consumer, blocking up to `wait` (at most `MAX_BLOCK`).
    async fn read_new(&self, wait: Duration) -> Result<Option<Fetched>, ChannelError> {
        let mut command = ::redis::cmd("XREADGROUP");
        command.arg("GROUP").arg(&self.subscription.name).arg(&self.consumer).arg("COUNT").arg(1);
        let block = wait.min(MAX_BLOCK).as_millis() as u64;
        // BLOCK 0 would wait for ever: no block at all when no time is left.
        if block > 0 {
            command.arg("BLOCK").arg(block);
        }
        command.arg("STREAMS").arg(self.stream()).arg(">");
        let Value::Array(streams) = self.query(&self.receiver, command, "read").await? else { return Ok(None) };
        // [[stream, [entry]]]
        let Some(Value::Array(stream)) = streams.into_iter().next() else { return Ok(None) };
        let Some(Value::Array(entries)) = stream.into_iter().nth(1) else { return Ok(None) };
        // `>` hands out an entry the group never delivered: the broker puts it in the PEL at 1.
        Ok(entries.into_iter().find_map(StreamEntry::from_value).map(|entry| (entry, Some(1))))
    }

    async fn fetch(&self, wait: Duration) -> Result<Option<Fetched>, ChannelError> {
        if let Some(claimed) = self.claim_lapsed().await? {
            return Ok(Some(claimed));
        }
        self.read_new(wait).await
    }

    fn receipt<'m>(&self, message: &'m Message, operation: &'static str) -> Result<&'m str, ChannelError> {
        message.receipt.as_deref().ok_or_else(|| kit::not_in_flight(self.name(), operation, message))
    }

    /// `XACK`: 0 acknowledged means the entry was not pending (already settled).
    async fn acknowledge_as(&self, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        let mut command = self.command("XACK");
        command.arg(self.receipt(message, operation)?);
        match self.query(&self.settler, command, operation).await? {
            Value::Int(0) => Err(kit::not_in_flight(self.name(), operation, message)),
            _ => Ok(()),
        }
    }

    /// Makes the pending entry claimable after `delay` (at most the lease): its idle time becomes
    /// the lease less the delay. `JUSTID` leaves the times-delivered counter alone; min idle 0
    /// and this consumer keep it ours until then.
    async fn release_after(
        &self,
        message: &Message,
        delay: Duration,
        operation: &'static str,
    ) -> Result<(), ChannelError> {
        let idle = self.lease.saturating_sub(delay).as_millis() as u64;
        let mut command = self.command("XCLAIM");
        command.arg(&self.consumer).arg(0).arg(self.receipt(message, operation)?).arg("IDLE").arg(idle).arg("JUSTID");
        match self.query(&self.settler, command, operation).await? {
            Value::Array(ids) if !ids.is_empty() => Ok(()),
            _ => Err(kit::not_in_flight(self.name(), operation, message)),
        }
    }
}

#[async_trait]
impl Channel for RedisChannel {
    /// Nothing is held by the client: an entry not settled stays pending and is claimed again once idle past the lease.
    async fn close(&self) -> Result<(), ChannelError> {
        Ok(())
    }

    // A channel is named after its consumer group.
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        // No pause after an empty fetch: the read itself blocks.
        let fetch = |wait| self.fetch(wait);
        let read = |(entry, count): &Fetched| read_entry(entry, *count, &self.warnings);
        let route = move |(raw, _): Fetched, problem| async move {
            kit::route_unreadable(self, &entry::unreadable(&raw, self.stream()), problem).await
        };
        receive_readable(timeout, Duration::ZERO, fetch, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.acknowledge_as(message, "acknowledge").await
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let publish = async |stream: &str, copy: Message| self.router.publish_to(stream, &copy).await;
        let settle = async |after| match after {
            AfterRouting::Acknowledge => self.acknowledge_as(message, "reject").await,
            AfterRouting::Release => self.release_after(message, Duration::ZERO, "release after a failed reject").await,
        };
        kit::reject_by_forwarding(self.name(), &self.subscription, message, rejection, publish, settle).await
    }

    /// Claimable again once `delay` has passed. Redis cannot set an idle time below zero, so a
    /// delay longer than the lease comes back after the lease (warned about at channel creation
    /// when the subscription's requeue delay is longer).
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.release_after(message, delay, "requeue").await
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.release_after(message, Duration::ZERO, "nack").await
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}
