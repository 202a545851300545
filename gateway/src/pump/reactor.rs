//! The Reactor: a blocking pump on its own thread.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{decide, Action, Backoff, Handler, MessageMapper, PumpCounters, PumpKind, PumpStats, PumpStuck, Shared};
use crate::blocking::BlockingChannel;
use crate::budget::{self, BudgetWarning};
use crate::error::ChannelError;
use crate::message::Message;
use crate::subscription::Subscription;

pub struct Reactor<M: MessageMapper, H> {
    channel: Arc<dyn BlockingChannel>,
    subscription: Subscription,
    mapper: M,
    handler: H,
}

/// Stops the Reactor: the message in hand is finished and settled before the thread ends.
///
/// The thread checks the cancellation token between messages; it cannot interrupt a blocking
/// `receive`, which returns within the subscription's `receive_timeout` (and a message it
/// returns is handled and settled before the thread ends), nor a handler, nor a backoff sleep
/// after a failing channel call (2 s at most).
pub struct ReactorHandle {
    token: CancellationToken,
    shared: Arc<Shared>,
    channel: String,
    receive_timeout: Duration,
    /// Disconnected when the thread ends (its sender is dropped, on return or unwind).
    finished: mpsc::Receiver<()>,
    thread: JoinHandle<()>,
    budget_warnings: Vec<BudgetWarning>,
}

impl ReactorHandle {
    pub fn counters(&self) -> &PumpCounters {
        &self.shared.counters
    }

    /// The budget rules' findings logged when the pump started (R-7, R-10, R-11; R-25).
    pub fn budget_warnings(&self) -> &[BudgetWarning] {
        &self.budget_warnings
    }

    /// Stops within the subscription's `receive_timeout` plus `STOP_LIMIT`: the receive the
    /// thread may be blocked in, then the time to finish and settle a message.
    pub fn stop(self) -> Result<PumpStats, PumpStuck> {
        let limit = self.receive_timeout.saturating_add(super::STOP_LIMIT);
        self.stop_within(limit)
    }

    /// Cancels the pump and waits at most `limit` for its thread to end. A limit shorter than the
    /// subscription's `receive_timeout` may expire while the thread is still inside a receive.
    ///
    /// On `PumpStuck` the thread is left detached: a thread cannot be ended from outside, so it
    /// finishes on its own, settling the message in hand (released, if settling fails, since it
    /// is cancelled) and receiving no further message; nothing joins it.
    pub fn stop_within(self, limit: Duration) -> Result<PumpStats, PumpStuck> {
        let started = Instant::now();
        self.token.cancel();
        match self.finished.recv_timeout(limit) {
            Err(RecvTimeoutError::Timeout) => {
                let stuck = self.shared.stuck(PumpKind::Reactor, &self.channel, started.elapsed());
                tracing::error!(%stuck, "the reactor thread is left detached");
                Err(stuck)
            }
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if self.thread.join().is_err() {
                    tracing::error!(channel = self.channel.as_str(), "the reactor thread panicked");
                }
                Ok(self.shared.counters.snapshot())
            }
        }
    }
}

impl<M: MessageMapper, H: Handler<M::Request>> Reactor<M, H> {
    pub fn new(channel: Arc<dyn BlockingChannel>, subscription: Subscription, mapper: M, handler: H) -> Self {
        Reactor { channel, subscription, mapper, handler }
    }

    pub fn start(self) -> ReactorHandle {
        let budget_warnings =
            budget::warn_at_start(&self.subscription, self.channel.counting().as_ref(), self.channel.name());
        let token = CancellationToken::new();
        let shared = Arc::new(Shared::default());
        let (channel, receive_timeout) = (self.channel.name().to_owned(), self.subscription.receive_timeout);
        let (pump_token, pump_shared) = (token.clone(), shared.clone());
        let (ended, finished) = mpsc::sync_channel::<()>(0);
        let thread = std::thread::Builder::new()
            .name(format!("reactor-{}", self.subscription.name))
            .spawn(move || {
                let _ended = ended;
                self.run(&pump_token, &pump_shared);
            })
            .expect("the reactor thread could not start");
        ReactorHandle { token, shared, channel, receive_timeout, finished, thread, budget_warnings }
    }

    fn run(self, token: &CancellationToken, shared: &Shared) {
        let counters = &shared.counters;
        let mut backoff = Backoff::new();
        while !token.is_cancelled() {
            let mut message = match self.channel.receive(self.subscription.receive_timeout) {
                Ok(Some(message)) => message,
                Ok(None) => continue,
                Err(error) => {
                    counters.failed();
                    tracing::warn!(channel = self.channel.name(), %error, "receive failed; retrying");
                    std::thread::sleep(backoff.next_delay());
                    continue;
                }
            };
            backoff.reset();
            counters.received();
            shared.in_hand.handling(message.id());
            let dispatch = self.mapper.map(&message).map(|request| self.handler.handle(request));
            let action = decide(&mut message, dispatch, &self.subscription);
            shared.in_hand.settling();
            self.settle(&message, &action, token, counters);
            shared.in_hand.settled();
        }
    }

    /// Applies the action, retrying a failing channel with backoff; once stopping, a message
    /// that still cannot be settled is released (nack) rather than dropped.
    fn settle(&self, message: &Message, action: &Action, token: &CancellationToken, counters: &PumpCounters) {
        let mut backoff = Backoff::new();
        loop {
            let result = match action {
                Action::Acknowledge => self.channel.acknowledge(message),
                Action::Requeue(delay) => self.channel.requeue(message, *delay),
                Action::Nack => self.channel.nack(message),
                Action::Reject(rejection) => self.channel.reject(message, rejection.as_ref()).map(drop),
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
                        if let Err(error) = self.channel.nack(message) {
                            tracing::error!(message_id = message.id(), %error, "release on stop failed; the broker's lease will redeliver it");
                        }
                        return;
                    }
                    std::thread::sleep(backoff.next_delay());
                }
            }
        }
    }
}
