//! The blocking channel and producer the Reactor uses. A transport with a blocking SDK may
//! implement them directly; every async transport gets them from `Blocking`, a thin adapter that
//! drives the async call on one lazily created runtime, never a second implementation.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::channel::{Channel, Producer};
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;

pub trait BlockingChannel: Send + Sync {
    fn name(&self) -> &str;
    fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError>;
    fn acknowledge(&self, message: &Message) -> Result<(), ChannelError>;
    fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError>;
    fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError>;
    fn nack(&self, message: &Message) -> Result<(), ChannelError>;
}

pub trait BlockingProducer: Send + Sync {
    fn send(&self, message: &Message) -> Result<(), ChannelError>;
    fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError>;
}

/// The runtime every blocking adapter shares, created on first use. Callers must not be on a
/// runtime thread themselves (as with any blocking API): the Reactor runs on its own thread.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gateway-blocking")
            .enable_all()
            .build()
            .expect("the blocking adapter's runtime could not start")
    })
}

/// Runs a broker SDK call on the gateway's runtime. SDK clients keep pooled connections and
/// background tasks on the runtime that opened them; a caller's runtime that ends (every async
/// test has its own) would strand them for the next caller. The call is spawned at once, so the
/// returned future holds only its join handle: the SDK's future types stay out of the caller's.
/// Dropping the returned future aborts the call, so cancelling a channel call cancels its
/// broker call too instead of leaving it running detached.
#[cfg(any(feature = "sqs", feature = "gcp", feature = "rocketmq"))]
pub(crate) fn on_gateway_runtime<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> impl std::future::Future<Output = T> {
    let mut call = AbortOnDrop(runtime().spawn(future));
    async move { (&mut call.0).await.expect("a broker SDK call panicked") }
}

/// A spawned call that is aborted when its handle is dropped before it finished.
#[cfg(any(feature = "sqs", feature = "gcp", feature = "rocketmq"))]
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

#[cfg(any(feature = "sqs", feature = "gcp", feature = "rocketmq"))]
impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Wraps an async channel or producer as a blocking one.
#[derive(Debug, Clone)]
pub struct Blocking<T>(pub T);

impl<C: Channel> BlockingChannel for Blocking<C> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        runtime().block_on(self.0.receive(timeout))
    }
    fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        runtime().block_on(self.0.acknowledge(message))
    }
    fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        runtime().block_on(self.0.reject(message, rejection))
    }
    fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        runtime().block_on(self.0.requeue(message, delay))
    }
    fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        runtime().block_on(self.0.nack(message))
    }
}

impl<P: Producer> BlockingProducer for Blocking<P> {
    fn send(&self, message: &Message) -> Result<(), ChannelError> {
        runtime().block_on(self.0.send(message))
    }
    fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        runtime().block_on(self.0.send_with_delay(message, delay))
    }
}

#[cfg(all(test, any(feature = "sqs", feature = "gcp", feature = "rocketmq")))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn dropping_the_future_of_a_broker_call_cancels_the_call() {
        let finished = Arc::new(AtomicBool::new(false));
        let call = {
            let finished = finished.clone();
            on_gateway_runtime(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                finished.store(true, Ordering::SeqCst);
            })
        };
        let caller = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let timed_out = caller.block_on(async { tokio::time::timeout(Duration::from_millis(20), call).await.is_err() });
        assert!(timed_out, "the call was given 20 ms of its 300");
        std::thread::sleep(Duration::from_millis(600));
        assert!(!finished.load(Ordering::SeqCst), "the call went on after its caller gave up on it");
    }

    #[test]
    fn a_call_that_is_awaited_completes() {
        let caller = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        assert_eq!(caller.block_on(on_gateway_runtime(async { 7 })), 7);
    }
}
