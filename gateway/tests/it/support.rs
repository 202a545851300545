//! Test doubles shared by the pump tests: a scripted recording handler, a mapper that hands
//! over the whole message, a channel that fails on demand, and a way to run either pump.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gateway::pump::{
    AsyncHandler, Handler, MappingError, MessageMapper, Outcome, Proactor, ProactorHandle, PumpStats, PumpStuck,
    Reactor, ReactorHandle,
};
use gateway::{Blocking, Channel, ChannelError, Message, Rejection, Subscription};

pub const UNMAPPABLE: &[u8] = &[0xff, 0xfe];

/// Hands the handler the whole message; a body of `UNMAPPABLE` bytes cannot be mapped.
pub struct WholeMessage;

impl MessageMapper for WholeMessage {
    type Request = Message;
    fn map(&self, message: &Message) -> Result<Message, MappingError> {
        if message.body.bytes == UNMAPPABLE {
            return Err(MappingError { message_id: message.header.id.clone(), detail: "not a request".into() });
        }
        Ok(message.clone())
    }
}

/// Answers each dispatch from a script (the last entry repeats) and records, per message id,
/// the handled counts it was dispatched with.
#[derive(Clone)]
pub struct Scripted {
    script: Arc<Vec<Outcome>>,
    pub seen: Arc<Mutex<HashMap<String, Vec<u32>>>>,
    pause: Duration,
}

impl Scripted {
    pub fn new(script: Vec<Outcome>) -> Scripted {
        Scripted { script: Arc::new(script), seen: Arc::default(), pause: Duration::ZERO }
    }

    pub fn pausing(mut self, pause: Duration) -> Scripted {
        self.pause = pause;
        self
    }

    fn answer(&self, message: &Message) -> Outcome {
        let mut seen = self.seen.lock().unwrap();
        let counts = seen.entry(message.header.id.clone()).or_default();
        counts.push(message.header.handled_count);
        self.script[(counts.len() - 1).min(self.script.len() - 1)].clone()
    }

    pub fn dispatches(&self, id: &str) -> Vec<u32> {
        self.seen.lock().unwrap().get(id).cloned().unwrap_or_default()
    }

    pub fn total_dispatches(&self) -> usize {
        self.seen.lock().unwrap().values().map(Vec::len).sum()
    }
}

impl Handler<Message> for Scripted {
    fn handle(&self, message: Message) -> Outcome {
        std::thread::sleep(self.pause);
        self.answer(&message)
    }
}

#[async_trait]
impl AsyncHandler<Message> for Scripted {
    async fn handle(&self, message: Message) -> Outcome {
        // No await without a pause: a handler that never yields is what the pump must survive.
        if !self.pause.is_zero() {
            tokio::time::sleep(self.pause).await;
        }
        self.answer(&message)
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Pump {
    Reactor,
    Proactor,
}

pub enum Running {
    Reactor(ReactorHandle),
    Proactor(ProactorHandle, tokio::runtime::Runtime),
}

impl Running {
    /// Stops within the default limit; a pump that does not is a failure.
    pub fn stop(self) -> PumpStats {
        let stopped = match self {
            Running::Reactor(handle) => handle.stop(),
            Running::Proactor(handle, runtime) => runtime.block_on(handle.stop()),
        };
        stopped.unwrap_or_else(|stuck| panic!("{stuck}"))
    }

    pub fn budget_warnings(&self) -> &[gateway::budget::BudgetWarning] {
        match self {
            Running::Reactor(handle) => handle.budget_warnings(),
            Running::Proactor(handle, _) => handle.budget_warnings(),
        }
    }

    pub fn stop_within(self, limit: Duration) -> Result<PumpStats, PumpStuck> {
        match self {
            Running::Reactor(handle) => handle.stop_within(limit),
            Running::Proactor(handle, runtime) => runtime.block_on(handle.stop_within(limit)),
        }
    }
}

pub fn start(pump: Pump, channel: Arc<dyn Channel>, subscription: Subscription, handler: Scripted) -> Running {
    match pump {
        Pump::Reactor => Running::Reactor(
            Reactor::new(Arc::new(Blocking::new(channel)), subscription, WholeMessage, handler).start(),
        ),
        Pump::Proactor => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            let handle = {
                let _entered = runtime.enter();
                Proactor::new(channel, subscription, WholeMessage, handler).start()
            };
            Running::Proactor(handle, runtime)
        }
    }
}

/// Polls `condition` every 10 ms until it holds or `ceiling` passes; returns whether it held.
pub fn eventually(ceiling: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + ceiling;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A channel whose acknowledgements fail: the first `failures` of them, or all while `always`.
pub struct FailingAcks<C> {
    pub inner: C,
    pub failures: AtomicU32,
}

#[async_trait]
impl<C: Channel> Channel for FailingAcks<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        self.inner.receive(timeout).await
    }
    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(ChannelError::broker(
                self.name(),
                "acknowledge",
                gateway::error::ErrorKind::Refused,
                "injected",
            ));
        }
        self.inner.acknowledge(message).await
    }
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        self.inner.reject(message, rejection).await
    }
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.inner.requeue(message, delay).await
    }
    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.inner.nack(message).await
    }
    async fn close(&self) -> Result<(), ChannelError> {
        self.inner.close().await
    }
}
