//! The Proactor: an async pump on a tokio task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{
    decide, Action, AsyncHandler, Backoff, MessageMapper, PumpCounters, PumpKind, PumpStats, PumpStuck, Shared,
};
use crate::budget::{self, BudgetWarning};
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
///
/// Cancelling ends a pending `receive` at once (the async `Channel::receive` is cancel-safe:
/// dropping it loses no message) and cuts a backoff sleep short; a handler and a settlement
/// already under way run to their end.
pub struct ProactorHandle {
    token: CancellationToken,
    shared: Arc<Shared>,
    channel: String,
    task: JoinHandle<()>,
    budget_warnings: Vec<BudgetWarning>,
}

impl ProactorHandle {
    pub fn counters(&self) -> &PumpCounters {
        &self.shared.counters
    }

    /// The budget rules' findings logged when the pump started (R-7, R-10, R-11; R-25).
    pub fn budget_warnings(&self) -> &[BudgetWarning] {
        &self.budget_warnings
    }

    /// Stops within `STOP_LIMIT`.
    pub async fn stop(self) -> Result<PumpStats, PumpStuck> {
        self.stop_within(super::STOP_LIMIT).await
    }

    /// Cancels the pump and waits at most `limit` for its task to end (on the runtime's timer).
    ///
    /// On `PumpStuck` the task is aborted: unlike a thread, a task can be ended safely at its next
    /// await, and once `stop` has returned the pump must not settle anything behind its caller's
    /// back (on a channel being torn down, or against a consumer started in its place). The
    /// message in hand is left unsettled; the broker redelivers it when its lease lapses, as
    /// after a crash. A handler that blocks its worker without awaiting is only ended when it
    /// next awaits.
    pub async fn stop_within(mut self, limit: Duration) -> Result<PumpStats, PumpStuck> {
        let started = Instant::now();
        self.token.cancel();
        match tokio::time::timeout(limit, &mut self.task).await {
            Ok(ended) => {
                if let Err(error) = ended {
                    tracing::error!(channel = self.channel.as_str(), %error, "the proactor task failed");
                }
                Ok(self.shared.counters.snapshot())
            }
            Err(_elapsed) => {
                let stuck = self.shared.stuck(PumpKind::Proactor, &self.channel, started.elapsed());
                self.task.abort();
                tracing::error!(%stuck, "the proactor task is aborted");
                Err(stuck)
            }
        }
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
        let budget_warnings =
            budget::warn_at_start(&self.subscription, self.channel.counting().as_ref(), self.channel.name());
        let token = CancellationToken::new();
        let shared = Arc::new(Shared::default());
        let channel = self.channel.name().to_owned();
        let (pump_token, pump_shared) = (token.clone(), shared.clone());
        let task = tokio::spawn(async move { self.run(&pump_token, &pump_shared).await });
        ProactorHandle { token, shared, channel, task, budget_warnings }
    }

    async fn run(self, token: &CancellationToken, shared: &Shared) {
        let counters = &shared.counters;
        let mut backoff = Backoff::new();
        while !token.is_cancelled() {
            // Receive first: a message already waiting is taken without polling the token's
            // future (the loop's check has just seen it uncancelled).
            let received = tokio::select! {
                biased;
                received = self.channel.receive(self.subscription.receive_timeout) => received,
                () = token.cancelled() => break,
            };
            let mut message = match received {
                Ok(Some(message)) => message,
                Ok(None) => continue,
                Err(error) => {
                    counters.failed();
                    tracing::warn!(channel = self.channel.name(), %error, "receive failed; retrying");
                    pause(backoff.next_delay(), token).await;
                    continue;
                }
            };
            backoff.reset();
            counters.received();
            shared.in_hand.handling(message.id());
            let dispatch = match self.mapper.map(&message) {
                Ok(request) => Ok(self.handler.handle(request).await),
                Err(error) => Err(error),
            };
            let action = decide(&mut message, dispatch, &self.subscription);
            shared.in_hand.settling();
            self.settle(&message, &action, token, counters).await;
            shared.in_hand.settled();
            // A channel that always has a message ready never returns Pending; spend tokio's
            // cooperative budget so the pump yields now and then and cannot starve its worker
            // (or block the runtime's shutdown), without paying for a yield on every message.
            tokio::task::consume_budget().await;
        }
    }

    /// As the Reactor's: retry with backoff, release on stop rather than drop.
    async fn settle(&self, message: &Message, action: &Action, token: &CancellationToken, counters: &PumpCounters) {
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
                    if token.is_cancelled() {
                        if let Err(error) = self.channel.nack(message).await {
                            tracing::error!(message_id = message.id(), %error, "release on stop failed; the broker's lease will redeliver it");
                        }
                        return;
                    }
                    // Cut short by a stop: the next attempt, if it fails, releases the message.
                    pause(backoff.next_delay(), token).await;
                }
            }
        }
    }
}

/// Sleeps for `delay`, or until the token is cancelled.
async fn pause(delay: Duration, token: &CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = token.cancelled() => {}
    }
}
