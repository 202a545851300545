//! The in-memory transport: a shared broker of named queues, the embedded default of the
//! harness. It has no delivery counter of its own; it conforms by republishing: a requeue or
//! nack puts back the message as the pump left it, so the handled count the pump incremented
//! travels with the copy. Safe to use from both pumps at once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::channel::{Channel, Producer};
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::{self, Rejection};
use crate::subscription::{MakeChannels, Subscription};
use crate::transport::kit;

#[derive(Debug, Default)]
struct Queue {
    /// Sorted by the instant each message becomes visible; FIFO among equals.
    waiting: VecDeque<(Instant, Message)>,
    /// Received and not yet settled, by receipt: the message and the channel holding it.
    in_flight: HashMap<String, (ChannelId, Message)>,
}

/// Which channel holds an in-flight message, so closing a channel returns only its own.
type ChannelId = u64;

#[derive(Debug, Default)]
struct Shared {
    queues: Mutex<HashMap<String, Queue>>,
    /// Woken on every publish so that waiting receivers look again.
    published: Notify,
    /// The last channel id handed out.
    channels: std::sync::atomic::AtomicU64,
}

/// A broker of named queues; clones share the same queues.
#[derive(Debug, Clone, Default)]
pub struct MemoryBroker {
    shared: Arc<Shared>,
}

impl MemoryBroker {
    pub fn new() -> MemoryBroker {
        MemoryBroker::default()
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<String, Queue>> {
        // A panic while holding the lock cannot leave a queue half-updated (every update is a
        // single collection call), so a poisoned lock is still consistent.
        self.shared.queues.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn create_queue(&self, name: &str) {
        self.queues().entry(name.to_owned()).or_default();
    }

    pub fn queue_exists(&self, name: &str) -> bool {
        self.queues().contains_key(name)
    }

    /// Messages waiting (visible or delayed) on a queue.
    pub fn waiting(&self, name: &str) -> usize {
        self.queues().get(name).map_or(0, |queue| queue.waiting.len())
    }

    /// Messages received from a queue and not yet settled.
    pub fn in_flight(&self, name: &str) -> usize {
        self.queues().get(name).map_or(0, |queue| queue.in_flight.len())
    }

    /// Puts a message on a queue, visible after `delay`.
    pub fn publish(&self, queue: &str, message: Message, delay: Duration) {
        let visible_at = Instant::now() + delay;
        {
            let mut queues = self.queues();
            let waiting = &mut queues.entry(queue.to_owned()).or_default().waiting;
            let position = waiting.partition_point(|(at, _)| *at <= visible_at);
            waiting.insert(position, (visible_at, message));
        }
        self.shared.published.notify_waiters();
    }

    /// A consumer's channel for the subscription, honouring its make-channels mode.
    pub fn channel(&self, subscription: &Subscription) -> Result<MemoryChannel, ChannelError> {
        let queue = &subscription.routing_key;
        match subscription.make_channels {
            MakeChannels::Create => self.create_queue(queue),
            MakeChannels::Validate if !self.queue_exists(queue) => {
                return Err(ChannelError::Missing { channel: queue.clone() })
            }
            MakeChannels::Validate | MakeChannels::Assume => {}
        }
        let id = self.shared.channels.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Ok(MemoryChannel { broker: self.clone(), subscription: subscription.clone(), id })
    }

    pub fn producer(&self) -> MemoryProducer {
        MemoryProducer { broker: self.clone() }
    }

    async fn receive(&self, queue: &str, holder: ChannelId, timeout: Duration) -> Option<Message> {
        let deadline = Instant::now() + timeout;
        loop {
            // Register for the wake-up before looking, so a publish in between is not missed.
            let published = self.shared.published.notified();
            tokio::pin!(published);
            published.as_mut().enable();
            let now = Instant::now();
            let next_visible = {
                let mut queues = self.queues();
                let queue = queues.entry(queue.to_owned()).or_default();
                match queue.waiting.front() {
                    Some((visible_at, _)) if *visible_at <= now => {
                        let (_, mut message) = queue.waiting.pop_front().expect("front exists");
                        let receipt = uuid::Uuid::new_v4().to_string();
                        queue.in_flight.insert(receipt.clone(), (holder, message.clone()));
                        message.receipt = Some(receipt);
                        return Some(message);
                    }
                    Some((visible_at, _)) => Some(*visible_at),
                    None => None,
                }
            };
            if now >= deadline {
                return None;
            }
            let wake = next_visible.map_or(deadline, |at| at.min(deadline));
            tokio::select! {
                _ = published => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// Takes a message out of flight; every settlement starts here.
    fn settle(&self, queue: &str, message: &Message, operation: &'static str) -> Result<(), ChannelError> {
        let removed = message
            .receipt
            .as_deref()
            .and_then(|receipt| self.queues().get_mut(queue).and_then(|q| q.in_flight.remove(receipt)));
        match removed {
            Some(_) => Ok(()),
            None => Err(kit::not_in_flight(queue, operation, message)),
        }
    }

    /// Puts back, visible at once, every message `holder` received from `queue` and did not
    /// settle: what a broker does with a consumer that goes away.
    fn release_held_by(&self, queue: &str, holder: ChannelId) {
        let held: Vec<Message> = match self.queues().get_mut(queue) {
            Some(queue) => {
                let receipts: Vec<String> =
                    queue.in_flight.iter().filter(|(_, (by, _))| *by == holder).map(|(r, _)| r.clone()).collect();
                receipts.iter().filter_map(|receipt| queue.in_flight.remove(receipt)).map(|(_, m)| m).collect()
            }
            None => Vec::new(),
        };
        for message in held {
            self.publish(queue, message.without_receipt(), Duration::ZERO);
        }
    }
}

/// A consumer's channel on a `MemoryBroker` queue.
#[derive(Debug, Clone)]
pub struct MemoryChannel {
    broker: MemoryBroker,
    subscription: Subscription,
    /// This channel's own: clones are the same channel.
    id: ChannelId,
}

#[async_trait]
impl Channel for MemoryChannel {
    // A channel is named after the queue it reads, not the subscription.
    #[allow(clippy::misnamed_getters)]
    fn name(&self) -> &str {
        &self.subscription.routing_key
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        // No broker counter: the header count stands (`delivery_count::resolve` with `None`).
        Ok(self.broker.receive(self.name(), self.id, timeout).await)
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.broker.settle(self.name(), message, "acknowledge")
    }

    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        self.broker.settle(self.name(), message, "reject")?;
        let publish = async |channel: &str, copy: Message| {
            self.broker.publish(channel, copy, Duration::ZERO);
            Ok(())
        };
        rejection::forward(&self.subscription, message, rejection, publish).await
    }

    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.broker.settle(self.name(), message, "requeue")?;
        self.broker.publish(self.name(), message.without_receipt(), delay);
        Ok(())
    }

    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.broker.settle(self.name(), message, "nack")?;
        self.broker.publish(self.name(), message.without_receipt(), Duration::ZERO);
        Ok(())
    }

    /// What this channel received and did not settle is put back at once, as its consumer is gone.
    async fn close(&self) -> Result<(), ChannelError> {
        self.broker.release_held_by(self.name(), self.id);
        Ok(())
    }
}

/// Publishes to the queue named by the message's topic.
#[derive(Debug, Clone)]
pub struct MemoryProducer {
    broker: MemoryBroker,
}

#[async_trait]
impl Producer for MemoryProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.send_with_delay(message, Duration::ZERO).await
    }

    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let mut sent = message.without_receipt();
        sent.header.delay = delay;
        self.broker.publish(&message.header.topic, sent, delay);
        Ok(())
    }
}
