//! The Reactor: a blocking pump on its own thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{decide, Action, Backoff, Handler, MessageMapper, PumpCounters, PumpStats};
use crate::blocking::BlockingChannel;
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
pub struct ReactorHandle {
    stop: Arc<AtomicBool>,
    counters: Arc<PumpCounters>,
    thread: JoinHandle<()>,
}

impl ReactorHandle {
    pub fn counters(&self) -> &PumpCounters {
        &self.counters
    }

    pub fn stop(self) -> PumpStats {
        self.stop.store(true, Ordering::SeqCst);
        if self.thread.join().is_err() {
            tracing::error!("the reactor thread panicked");
        }
        self.counters.snapshot()
    }
}

impl<M: MessageMapper, H: Handler<M::Request>> Reactor<M, H> {
    pub fn new(channel: Arc<dyn BlockingChannel>, subscription: Subscription, mapper: M, handler: H) -> Self {
        Reactor { channel, subscription, mapper, handler }
    }

    pub fn start(self) -> ReactorHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(PumpCounters::default());
        let (pump_stop, pump_counters) = (stop.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name(format!("reactor-{}", self.subscription.name))
            .spawn(move || self.run(&pump_stop, &pump_counters))
            .expect("the reactor thread could not start");
        ReactorHandle { stop, counters, thread }
    }

    fn run(self, stop: &AtomicBool, counters: &PumpCounters) {
        let mut backoff = Backoff::new();
        while !stop.load(Ordering::SeqCst) {
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
            let dispatch = self.mapper.map(&message).map(|request| self.handler.handle(request));
            let action = decide(&mut message, dispatch, &self.subscription);
            self.settle(&message, &action, stop, counters);
        }
    }

    /// Applies the action, retrying a failing channel with backoff; once stopping, a message
    /// that still cannot be settled is released (nack) rather than dropped.
    fn settle(&self, message: &Message, action: &Action, stop: &AtomicBool, counters: &PumpCounters) {
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
                    if stop.load(Ordering::SeqCst) {
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
