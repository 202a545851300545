//! The Proactor: an async pump on a tokio task.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::{decide, Action, AsyncHandler, Backoff, MessageMapper, PumpCounters, PumpStats};
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::subscription::Subscription;

pub struct Proactor<M: MessageMapper, H> {
    channel: Arc<dyn Channel>,
    subscription: Subscription,
    mapper: M,
    handler: H,
}

/// Stops the Proactor: the message in hand is finished and settled before the task ends.
pub struct ProactorHandle {
    stop: Arc<AtomicBool>,
    counters: Arc<PumpCounters>,
    task: JoinHandle<()>,
}

impl ProactorHandle {
    pub fn counters(&self) -> &PumpCounters {
        &self.counters
    }

    pub async fn stop(self) -> PumpStats {
        self.stop.store(true, Ordering::SeqCst);
        if let Err(error) = self.task.await {
            tracing::error!(%error, "the proactor task failed");
        }
        self.counters.snapshot()
    }
}

impl<M: MessageMapper, H: AsyncHandler<M::Request>> Proactor<M, H>
where
    M::Request: 'static,
{
    pub fn new(channel: Arc<dyn Channel>, subscription: Subscription, mapper: M, handler: H) -> Self {
        Proactor { channel, subscription, mapper, handler }
    }

    /// Spawns the pump on the current tokio runtime.
    pub fn start(self) -> ProactorHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(PumpCounters::default());
        let (pump_stop, pump_counters) = (stop.clone(), counters.clone());
        let task = tokio::spawn(async move { self.run(&pump_stop, &pump_counters).await });
        ProactorHandle { stop, counters, task }
    }

    async fn run(self, stop: &AtomicBool, counters: &PumpCounters) {
        let mut backoff = Backoff::new();
        while !stop.load(Ordering::SeqCst) {
            let mut message = match self.channel.receive(self.subscription.receive_timeout).await {
                Ok(Some(message)) => message,
                Ok(None) => continue,
                Err(error) => {
                    counters.failed();
                    tracing::warn!(channel = self.channel.name(), %error, "receive failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
            };
            backoff.reset();
            counters.received();
            let dispatch = match self.mapper.map(&message) {
                Ok(request) => Ok(self.handler.handle(request).await),
                Err(error) => Err(error),
            };
            let action = decide(&mut message, dispatch, &self.subscription);
            self.settle(&message, &action, stop, counters).await;
            // A channel that always has a message ready never returns Pending; spend tokio's
            // cooperative budget so the pump yields now and then and cannot starve its worker
            // (or block the runtime's shutdown), without paying for a yield on every message.
            tokio::task::consume_budget().await;
        }
    }

    /// As the Reactor's: retry with backoff, release on stop rather than drop.
    async fn settle(&self, message: &Message, action: &Action, stop: &AtomicBool, counters: &PumpCounters) {
        let mut backoff = Backoff::new();
        loop {
            let result = match action {
                Action::Acknowledge => self.channel.acknowledge(message).await,
                Action::Requeue(delay) => self.channel.requeue(message, *delay).await,
                Action::Nack => self.channel.nack(message).await,
                Action::Reject(rejection) => self.channel.reject(message, rejection.as_ref()).await.map(drop),
            };
            match result {
                Ok(()) => return counters.settled(action),
                Err(error @ ChannelError::NotInFlight { .. }) => {
                    return tracing::warn!(%error, "nothing to settle");
                }
                Err(error) => {
                    counters.failed();
                    tracing::warn!(channel = self.channel.name(), message_id = message.id(), %error, "settling failed");
                    if stop.load(Ordering::SeqCst) {
                        if let Err(error) = self.channel.nack(message).await {
                            tracing::error!(message_id = message.id(), %error, "release on stop failed; the broker's lease will redeliver it");
                        }
                        return;
                    }
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }
}
