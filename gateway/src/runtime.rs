//! Where the gateway's own async work runs: broker SDK calls, the blocking adapter's calls and
//! the stream subscriber's delayed releases. A user passes their runtime in
//! (`GatewayRuntime::new`); the simple path uses one shared runtime created on first use.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::task::JoinHandle;

/// A handle on a multi-threaded tokio runtime that outlives the channels made with it.
///
/// Why not the caller's runtime at each call: SDK clients keep pooled connections and background
/// tasks on the runtime that opened them, and a caller's runtime that ends (every async test has
/// its own) would strand them for the next caller. So clients are created, and their calls run,
/// on this one.
#[derive(Debug, Clone)]
pub struct GatewayRuntime {
    handle: Handle,
}

/// A runtime the gateway cannot use.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the gateway needs a multi-threaded tokio runtime (got {flavor:?}): a current-thread runtime \
     runs its tasks only inside its own block_on, so broker calls and blocking channels would hang"
)]
pub struct UnusableRuntime {
    pub flavor: RuntimeFlavor,
}

impl GatewayRuntime {
    /// The caller's runtime, which must be multi-threaded.
    pub fn new(handle: Handle) -> Result<GatewayRuntime, UnusableRuntime> {
        match handle.runtime_flavor() {
            RuntimeFlavor::CurrentThread => Err(UnusableRuntime { flavor: RuntimeFlavor::CurrentThread }),
            _ => Ok(GatewayRuntime { handle }),
        }
    }

    /// The shared default runtime (two workers), created on first use.
    pub fn shared() -> GatewayRuntime {
        GatewayRuntime { handle: shared().handle().clone() }
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `future` to completion from a thread that is not a runtime worker (the Reactor's).
    pub fn block_on<T>(&self, future: impl Future<Output = T>) -> T {
        self.handle.block_on(future)
    }

    /// Runs `future` on this runtime, detached from the caller.
    pub fn spawn<T: Send + 'static>(&self, future: impl Future<Output = T> + Send + 'static) -> JoinHandle<T> {
        self.handle.spawn(future)
    }

    /// Runs a broker SDK call on this runtime. The call is spawned at once, so the returned
    /// future holds only its join handle: the SDK's future types stay out of the caller's.
    /// Dropping the returned future aborts the call, so cancelling a channel call cancels its
    /// broker call instead of leaving it running detached.
    pub fn call<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> impl Future<Output = T> + Send + 'static {
        let mut call = AbortOnDrop(self.handle.spawn(future));
        async move { (&mut call.0).await.expect("a broker SDK call panicked") }
    }
}

impl Default for GatewayRuntime {
    fn default() -> GatewayRuntime {
        GatewayRuntime::shared()
    }
}

/// The runtime behind `GatewayRuntime::shared`. Callers must not be on one of its worker threads
/// when they block on it (as with any blocking API).
pub fn shared() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gateway")
            .enable_all()
            .build()
            .expect("the gateway's shared runtime could not start")
    })
}

/// A spawned call that is aborted when its handle is dropped before it finished.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn dropping_the_future_of_a_broker_call_cancels_the_call() {
        let finished = Arc::new(AtomicBool::new(false));
        let call = {
            let finished = finished.clone();
            GatewayRuntime::shared().call(async move {
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
    fn a_call_runs_on_the_runtime_it_was_given() {
        let mine = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("callers-own")
            .enable_all()
            .build()
            .unwrap();
        let runtime = GatewayRuntime::new(mine.handle().clone()).unwrap();
        let thread = runtime.block_on(runtime.call(async { std::thread::current().name().map(str::to_owned) }));
        assert_eq!(thread.as_deref(), Some("callers-own"));
    }

    #[test]
    fn a_current_thread_runtime_is_refused_with_the_reason() {
        let current = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let error = GatewayRuntime::new(current.handle().clone()).unwrap_err();
        assert!(error.to_string().contains("multi-threaded"), "{error}");
    }
}
