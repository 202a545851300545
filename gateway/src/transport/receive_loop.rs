//! The receive loop of the transports that fetch one broker message at a time (Pub/Sub pull,
//! RocketMQ pop): fetch until a readable message arrives or the timeout passes.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::channel::ChannelError;
use crate::message::Message;
use crate::transport::attributes::MalformedMessage;

/// Fetches with `fetch(remaining)` until `read` turns a fetched message into a `Message`, or
/// `timeout` passes. An unreadable message goes to `route_unreadable` (never dropped) and
/// fetching goes on. After an empty fetch the loop pauses `empty_pause` (for brokers whose empty
/// fetch returns at once) within what is left of the timeout.
///
/// Plain closures returning futures, not async closures: a caller's `async_trait` future must be
/// `Send`, which the compiler cannot yet prove through an async closure's borrowing future.
pub(crate) async fn receive_readable<Fetched, Fetching, Routing>(
    timeout: Duration,
    empty_pause: Duration,
    fetch: impl Fn(Duration) -> Fetching,
    read: impl Fn(&Fetched) -> Result<Message, MalformedMessage>,
    route_unreadable: impl Fn(Fetched, MalformedMessage) -> Routing,
) -> Result<Option<Message>, ChannelError>
where
    Fetching: Future<Output = Result<Option<Fetched>, ChannelError>>,
    Routing: Future<Output = Result<(), ChannelError>>,
{
    let started = Instant::now();
    loop {
        if let Some(fetched) = fetch(timeout.saturating_sub(started.elapsed())).await? {
            match read(&fetched) {
                Ok(message) => return Ok(Some(message)),
                Err(problem) => route_unreadable(fetched, problem).await?,
            }
            continue;
        }
        let remaining = timeout.saturating_sub(started.elapsed());
        if remaining.is_zero() {
            return Ok(None);
        }
        if !empty_pause.is_zero() {
            tokio::time::sleep(empty_pause.min(remaining)).await;
        }
    }
}
