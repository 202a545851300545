//! The per-cell ceiling. A cell that has not finished after `CONFORMANCE_CELL_TIMEOUT` seconds
//! (`cargo xtask conformance --cell-timeout`) fails with "timed out after N s waiting for …",
//! naming the harness step it was in.
//!
//! Why a thread of its own: a hung broker call may block its thread without ever yielding, so
//! neither a tokio timeout around the body nor libtest (no per-test time limit on stable) can end
//! it. The body runs on a thread named like the test; the test's thread waits with a deadline and
//! fails the cell. The stuck thread is left behind: it ends with the process, which libtest ends
//! once every test has reported (and `cargo xtask conformance` kills at the per-binary ceiling).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use gateway::budget::CountingReport;
use gateway::{Channel, ChannelError, Message, Rejection};

/// Seconds a cell may take, end to end (broker set-up and teardown included).
pub const VARIABLE: &str = contract::CELL_TIMEOUT_VARIABLE;
/// The default ceiling: well above the slowest cell recorded (about 80 s for an SQS FIFO cell
/// while its whole binary runs at once), so only a hang reaches it.
pub const DEFAULT: Duration = Duration::from_secs(300);

/// The ceiling the environment asks for. A value that is not a whole number of seconds above 0
/// panics naming the variable: a typo must not silently run without a ceiling.
pub fn from_environment() -> Duration {
    match std::env::var(VARIABLE) {
        Err(_) => DEFAULT,
        Ok(value) => match value.trim().parse::<u64>() {
            Ok(seconds) if seconds > 0 => Duration::from_secs(seconds),
            _ => panic!("{VARIABLE}={value:?} is not a ceiling; valid: a whole number of seconds above 0"),
        },
    }
}

/// What a cell is doing now: the harness steps and channel calls in flight (the test's and its
/// pump's), in the order they started, and the last one that finished.
#[derive(Default)]
struct Progress {
    started: u64,
    in_flight: BTreeMap<u64, String>,
    finished: Option<String>,
}

impl Progress {
    fn waiting_for(&self) -> String {
        let mut in_flight = self.in_flight.values();
        match (in_flight.next(), &self.finished) {
            (Some(first), _) => {
                let others: Vec<&str> = in_flight.map(String::as_str).collect();
                if others.is_empty() {
                    first.clone()
                } else {
                    format!("{first}; also in flight: {}", others.join("; "))
                }
            }
            (None, Some(last)) => format!("the test's own code after: {last}"),
            (None, None) => "the test's first step".to_owned(),
        }
    }
}

/// The progress of one cell, shared by everything that works for it.
#[derive(Clone, Default)]
pub struct Watch(Arc<Mutex<Progress>>);

impl Watch {
    /// The watch of the cell running on this thread, if a ceiling watches it. Taken where a
    /// cell is built, so calls made later from other threads (a pump's) are seen too.
    pub fn current() -> Option<Watch> {
        WATCH.with(|w| w.borrow().clone())
    }

    fn progress(&self) -> MutexGuard<'_, Progress> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self, what: String) -> u64 {
        let mut progress = self.progress();
        progress.started += 1;
        let token = progress.started;
        progress.in_flight.insert(token, what);
        token
    }
}

thread_local! {
    static WATCH: RefCell<Option<Watch>> = const { RefCell::new(None) };
}

/// A harness step or channel call in progress; dropping it marks it finished.
#[must_use = "the step ends when this is dropped"]
pub struct Step {
    watch: Option<(Watch, u64)>,
}

/// Marks `what` as in flight for the cell on this thread until the returned guard drops.
/// Outside a ceiling it does nothing (and `what` is never called).
pub fn step(what: impl FnOnce() -> String) -> Step {
    step_of(Watch::current().as_ref(), what)
}

fn step_of(watch: Option<&Watch>, what: impl FnOnce() -> String) -> Step {
    Step { watch: watch.map(|watch| (watch.clone(), watch.begin(what()))) }
}

impl Drop for Step {
    fn drop(&mut self) {
        if let Some((watch, token)) = &self.watch {
            let mut progress = watch.progress();
            progress.finished = progress.in_flight.remove(token);
        }
    }
}

/// The cell's channel, with every call marked in flight on the cell's watch: a hung broker
/// call made by the test itself or by its pump is named when the ceiling fires.
pub struct Watched {
    inner: Arc<dyn Channel>,
    watch: Option<Watch>,
}

impl Watched {
    /// Wraps `inner` for the cell on this thread (a plain pass-through outside a ceiling).
    pub fn new(inner: Arc<dyn Channel>) -> Watched {
        Watched { inner, watch: Watch::current() }
    }

    fn call(&self, what: impl FnOnce() -> String) -> Step {
        step_of(self.watch.as_ref(), || format!("{} on {}", what(), self.inner.name()))
    }
}

#[async_trait]
impl Channel for Watched {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let _call = self.call(|| format!("a receive (timeout {timeout:?})"));
        self.inner.receive(timeout).await
    }
    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        let _call = self.call(|| format!("the acknowledge of {}", message.id()));
        self.inner.acknowledge(message).await
    }
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let _call = self.call(|| format!("the reject of {}", message.id()));
        self.inner.reject(message, rejection).await
    }
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let _call = self.call(|| format!("the requeue of {} (delay {delay:?})", message.id()));
        self.inner.requeue(message, delay).await
    }
    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        let _call = self.call(|| format!("the nack of {}", message.id()));
        self.inner.nack(message).await
    }
    async fn close(&self) -> Result<(), ChannelError> {
        let _call = self.call(|| "the close".to_owned());
        self.inner.close().await
    }
    fn counting(&self) -> Option<CountingReport> {
        self.inner.counting()
    }
}

/// Runs a Reactor cell's `body` under the ceiling from the environment.
pub fn within_ceiling(body: impl FnOnce() + Send + 'static) {
    within(from_environment(), body)
}

/// Runs a Proactor cell's async body under the ceiling from the environment, on a
/// multi-threaded tokio runtime of two workers built on the cell's own thread.
pub fn within_ceiling_async<F: Future<Output = ()>>(body: impl FnOnce() -> F + Send + 'static) {
    within(from_environment(), move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("the cell's tokio runtime starts");
        runtime.block_on(body());
    })
}

/// Runs `body` on its own thread; fails (panics) after `ceiling` naming what it was waiting for.
/// A panic in the body is the cell's failure, passed on as it is.
pub fn within(ceiling: Duration, body: impl FnOnce() + Send + 'static) {
    let watch = Watch::default();
    let (done, finished) = mpsc::channel::<()>();
    let watched = watch.clone();
    let name = std::thread::current().name().unwrap_or("cell").to_owned();
    let runner = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            WATCH.with(|w| *w.borrow_mut() = Some(watched));
            body();
            let _ = done.send(());
        })
        .expect("the cell's thread starts");
    match finished.recv_timeout(ceiling) {
        // Ended: the join passes on the body's panic, if it panicked (the channel then closed).
        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
            if let Err(panic) = runner.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(RecvTimeoutError::Timeout) => {
            let waiting_for = watch.progress().waiting_for();
            panic!("timed out after {} s waiting for {waiting_for}", ceiling.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(body: impl FnOnce() + Send + 'static) -> String {
        failure_within(Duration::from_millis(300), body)
    }

    fn failure_within(ceiling: Duration, body: impl FnOnce() + Send + 'static) -> String {
        let run = std::panic::AssertUnwindSafe(|| within(ceiling, body));
        let panic = std::panic::catch_unwind(run).unwrap_err();
        panic.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn a_hung_step_fails_the_cell_naming_the_step() {
        let message = failure(|| {
            let _sending = step(|| "sending m-1 to orders".to_owned());
            std::thread::sleep(Duration::from_secs(5));
        });
        assert_eq!(message, "timed out after 0.3 s waiting for sending m-1 to orders");
    }

    #[test]
    fn a_hang_between_steps_names_the_last_step_finished() {
        let message = failure(|| {
            drop(step(|| "the cell's broker set-up".to_owned()));
            std::thread::sleep(Duration::from_secs(5));
        });
        assert_eq!(message, "timed out after 0.3 s waiting for the test's own code after: the cell's broker set-up");
    }

    #[test]
    fn a_nested_step_gives_way_to_its_outer_step() {
        let message = failure(|| {
            let _outer = step(|| "a copy of m-1 on orders-dlq".to_owned());
            drop(step(|| "acknowledging".to_owned()));
            std::thread::sleep(Duration::from_secs(5));
        });
        assert_eq!(message, "timed out after 0.3 s waiting for a copy of m-1 on orders-dlq");
    }

    #[test]
    fn steps_in_flight_at_once_are_all_named_in_the_order_they_started() {
        let message = failure(|| {
            let _copy = step(|| "a copy of m-1 on orders-dlq".to_owned());
            let watch = Watch::current().expect("inside a ceiling");
            std::thread::spawn(move || {
                let _receive = step_of(Some(&watch), || "a receive on orders".to_owned());
                std::thread::sleep(Duration::from_secs(5));
            });
            std::thread::sleep(Duration::from_secs(5));
        });
        assert_eq!(
            message,
            "timed out after 0.3 s waiting for a copy of m-1 on orders-dlq; also in flight: a receive on orders"
        );
    }

    #[test]
    fn a_failing_body_fails_with_its_own_message() {
        // A generous ceiling: with RUST_BACKTRACE=1 the panic hook symbolicates a backtrace
        // before the body's thread reports, which on a loaded machine took longer than 0.3 s.
        let message = failure_within(Duration::from_secs(60), || panic!("{}", "dispatched 4 times"));
        assert_eq!(message, "dispatched 4 times");
    }

    #[test]
    fn a_body_that_ends_in_time_passes() {
        within(Duration::from_secs(5), || drop(step(|| "a quick step".to_owned())));
    }

    #[test]
    fn an_async_body_runs_on_a_multi_threaded_runtime() {
        within_ceiling_async(|| async {
            let worker = tokio::spawn(async { std::thread::current().name().map(str::to_owned) });
            assert!(worker.await.unwrap().is_some_and(|name| name.starts_with("tokio")));
        });
    }
}
