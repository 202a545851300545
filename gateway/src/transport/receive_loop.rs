//! The receive loop of the transports that fetch one broker message at a time (Pub/Sub pull,
//! RocketMQ pop, Redis Streams): fetch until a readable message arrives or the timeout passes.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::ChannelError;
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::message::MessageType;

    /// A broker that serves `fetched` in order (`None`: an empty fetch), then nothing.
    fn receive(fetched: Vec<Option<&'static str>>, timeout: Duration) -> (Option<Message>, Vec<String>) {
        let queue = RefCell::new(fetched.into_iter());
        let routed = RefCell::new(Vec::new());
        let fetch = |_wait: Duration| {
            let next = queue.borrow_mut().next().flatten();
            async move { Ok(next) }
        };
        let read = |body: &&str| match *body {
            "unreadable" => Err(MalformedMessage { detail: "no header".into() }),
            body => Ok(Message::new("orders", MessageType::Event, body)),
        };
        let route = |body: &str, _problem| {
            routed.borrow_mut().push(body.to_owned());
            async { Ok(()) }
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let received = runtime.block_on(receive_readable(timeout, Duration::from_millis(5), fetch, read, route));
        (received.unwrap(), routed.into_inner())
    }

    #[test]
    fn an_unreadable_message_is_routed_and_the_next_readable_one_returned() {
        let (received, routed) = receive(vec![None, Some("unreadable"), Some("ok")], Duration::from_secs(5));
        assert_eq!(received.map(|m| m.body.bytes), Some(b"ok".to_vec()));
        assert_eq!(routed, ["unreadable"]);
    }

    #[test]
    fn nothing_readable_within_the_timeout_is_none() {
        let (received, routed) = receive(vec![Some("unreadable")], Duration::from_millis(30));
        assert!(received.is_none());
        assert_eq!(routed, ["unreadable"]);
    }
}
