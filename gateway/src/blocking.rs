//! The blocking channel and producer the Reactor uses. A transport with a blocking SDK may
//! implement them directly; every async transport gets them from `Blocking`, a thin adapter that
//! drives the async call on a `GatewayRuntime`, never a second implementation.

use std::time::Duration;

use crate::budget::CountingReport;
use crate::channel::{Channel, Producer};
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;

pub trait BlockingChannel: Send + Sync {
    fn name(&self) -> &str;
    fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError>;
    fn acknowledge(&self, message: &Message) -> Result<(), ChannelError>;
    fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError>;
    fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError>;
    fn nack(&self, message: &Message) -> Result<(), ChannelError>;
    /// As `Channel::counting`.
    fn counting(&self) -> Option<CountingReport> {
        None
    }
}

pub trait BlockingProducer: Send + Sync {
    fn send(&self, message: &Message) -> Result<(), ChannelError>;
    fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError>;
}

/// The shared default runtime (see `GatewayRuntime::shared`).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    crate::runtime::shared()
}

/// Wraps an async channel or producer as a blocking one, driving its calls on a
/// `GatewayRuntime`. Callers must not be on a worker thread of that runtime.
#[derive(Debug, Clone)]
pub struct Blocking<T> {
    inner: T,
    runtime: GatewayRuntime,
}

impl<T> Blocking<T> {
    /// On the shared default runtime.
    pub fn new(inner: T) -> Blocking<T> {
        Blocking::on(GatewayRuntime::shared(), inner)
    }

    /// On the caller's runtime.
    pub fn on(runtime: GatewayRuntime, inner: T) -> Blocking<T> {
        Blocking { inner, runtime }
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }
}

impl<C: Channel> BlockingChannel for Blocking<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        self.runtime.block_on(self.inner.receive(timeout))
    }
    fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.runtime.block_on(self.inner.acknowledge(message))
    }
    fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        self.runtime.block_on(self.inner.reject(message, rejection))
    }
    fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.runtime.block_on(self.inner.requeue(message, delay))
    }
    fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.runtime.block_on(self.inner.nack(message))
    }
    fn counting(&self) -> Option<CountingReport> {
        self.inner.counting()
    }
}

impl<P: Producer> BlockingProducer for Blocking<P> {
    fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.runtime.block_on(self.inner.send(message))
    }
    fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.runtime.block_on(self.inner.send_with_delay(message, delay))
    }
}
