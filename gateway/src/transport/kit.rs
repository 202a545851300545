//! What every broker transport needs the same way, written once: the error for a failed call,
//! a delay in the whole seconds brokers count in, the error for settling a message that is not
//! in flight, reject as "route the copy, then settle the original", and routing a message that
//! cannot be read. A transport keeps only its broker calls, its reader, and how its SDK's errors
//! map to an `ErrorKind`.

use std::future::Future;
use std::time::Duration;

use crate::channel::Channel;
use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::message::Message;
use crate::rejection::{self, Rejection};
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;

/// A failed broker call on `channel`.
pub(crate) fn broker_error(
    channel: &str,
    operation: &'static str,
    kind: ErrorKind,
    source: impl Into<BoxError>,
) -> ChannelError {
    ChannelError::broker(channel, operation, kind, source)
}

/// Runs `call` on the gateway's runtime, failing it on `channel` as a `Timeout` once `deadline`
/// has passed, for clients with no deadline of their own. A call cut off may still have reached
/// the broker: the caller says what then becomes of the message.
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "gcp",
        feature = "kafka",
        feature = "rabbitmq",
        feature = "nats",
        feature = "azure",
        feature = "rocketmq"
    )),
    allow(dead_code)
)]
pub(crate) async fn within<R: Send + 'static>(
    runtime: &GatewayRuntime,
    channel: &str,
    operation: &'static str,
    deadline: Duration,
    call: impl Future<Output = R> + Send + 'static,
) -> Result<R, ChannelError> {
    runtime.call(tokio::time::timeout(deadline, call)).await.map_err(|elapsed| {
        let why = format!("no answer within the call deadline of {deadline:?} ({elapsed})");
        broker_error(channel, operation, ErrorKind::Timeout, why)
    })
}

/// The kind an I/O error somewhere in `error`'s chain gives (connection refused, timed out),
/// for SDKs whose own error types say no more.
#[cfg_attr(not(any(feature = "sqs", feature = "gcp", feature = "rocketmq", feature = "azure")), allow(dead_code))]
pub(crate) fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            return Some(match io.kind() {
                Io::TimedOut | Io::WouldBlock => ErrorKind::Timeout,
                Io::ConnectionRefused
                | Io::ConnectionReset
                | Io::ConnectionAborted
                | Io::NotConnected
                | Io::BrokenPipe
                | Io::AddrNotAvailable
                | Io::UnexpectedEof => ErrorKind::Refused,
                Io::NotFound => ErrorKind::NotFound,
                Io::InvalidData => ErrorKind::Malformed,
                _ => ErrorKind::Other,
            });
        }
        cause = current.source();
    }
    None
}

/// Whole seconds, rounded up, so a message is never visible again before the delay.
#[cfg_attr(not(any(feature = "sqs", feature = "gcp", feature = "azure")), allow(dead_code))]
pub(crate) fn whole_seconds(delay: Duration) -> u64 {
    delay.as_secs() + u64::from(delay.subsec_nanos() > 0)
}

/// A delayed send on a broker with no per-message delay is refused (`why` says so): sending it
/// at once would break the delay's promise.
#[cfg_attr(
    not(any(feature = "sqs", feature = "gcp", feature = "mqtt", feature = "redis", feature = "kafka")),
    allow(dead_code)
)]
pub(crate) fn refuse_delay(message: &Message, delay: Duration, why: &'static str) -> Result<(), ChannelError> {
    if delay.is_zero() {
        return Ok(());
    }
    Err(ChannelError::broker(&message.header.topic, "send with delay", ErrorKind::Unsupported, why))
}

/// Settling `message` on `channel` found no receipt for it: already settled, or its lease lapsed.
pub(crate) fn not_in_flight(channel: &str, operation: &'static str, message: &Message) -> ChannelError {
    ChannelError::NotInFlight { channel: channel.to_owned(), operation, message_id: message.id().to_owned() }
}

/// What a reject does to the original once the copy's fate is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterRouting {
    /// The copy is routed (or there was nowhere to route it): acknowledge the original.
    Acknowledge,
    /// The copy could not be routed: release the original for another attempt.
    Release,
}

/// Every broker transport's reject: route the stamped copy through `rejection::forward`, then
/// settle the original. A message whose copy was not routed is never acknowledged: it is
/// released, and the routing error returned (a failed release is logged: the broker's lease
/// redelivers the message anyway).
pub(crate) async fn reject_by_forwarding<'s>(
    channel: &str,
    subscription: &'s Subscription,
    message: &Message,
    rejection: Option<&Rejection>,
    publish: impl AsyncFnOnce(&'s str, Message) -> Result<(), ChannelError>,
    settle: impl AsyncFnOnce(AfterRouting) -> Result<(), ChannelError>,
) -> Result<bool, ChannelError> {
    match rejection::forward(subscription, message, rejection, publish).await {
        Ok(routed) => {
            settle(AfterRouting::Acknowledge).await?;
            Ok(routed)
        }
        Err(error) => {
            if let Err(release) = settle(AfterRouting::Release).await {
                tracing::warn!(channel, message_id = message.id(), %release, "releasing after a failed reject failed too; the lease will redeliver it");
            }
            Err(error)
        }
    }
}

/// A message that cannot be read is rejected as Unacceptable with its raw body (`unreadable`,
/// made by the transport from what its broker gave), never dropped.
pub(crate) async fn route_unreadable<C: Channel + ?Sized>(
    channel: &C,
    unreadable: &Message,
    problem: impl std::fmt::Display,
) -> Result<(), ChannelError> {
    tracing::warn!(channel = channel.name(), message_id = unreadable.id(), %problem, "routing an unreadable message as Unacceptable");
    channel.reject(unreadable, Some(&Rejection::unacceptable(problem.to_string()))).await.map(drop)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn an_io_error_anywhere_in_the_chain_gives_the_kind() {
        #[derive(Debug, thiserror::Error)]
        #[error("dispatch failure")]
        struct Dispatch(#[source] std::io::Error);
        let refused = Dispatch(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(io_kind(&refused), Some(ErrorKind::Refused));
        assert_eq!(io_kind(&std::io::Error::from(std::io::ErrorKind::TimedOut)), Some(ErrorKind::Timeout));
        assert_eq!(io_kind(&std::fmt::Error), None);
    }

    #[test]
    fn whole_seconds_round_up_and_never_shorten_a_delay() {
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2_001)), 3);
    }

    #[test]
    fn not_in_flight_names_the_channel_operation_and_message() {
        let message = Message::new("orders", crate::MessageType::Event, "b");
        let error = not_in_flight("orders-sub", "acknowledge", &message);
        assert_eq!(
            error.to_string(),
            format!("acknowledge on channel orders-sub: message {} is not in flight", message.id())
        );
    }

    fn routed_to(dead_letter: Option<&str>) -> Subscription {
        let mut subscription = Subscription::new("orders-sub", "orders");
        subscription.dead_letter_routing_key = dead_letter.map(str::to_owned);
        subscription
    }

    fn reject(subscription: &Subscription, publish_fails: bool) -> (Result<bool, ChannelError>, Vec<String>) {
        let events = Mutex::new(Vec::new());
        let message = Message::new("orders", crate::MessageType::Event, "b");
        let publish = async |destination: &str, copy: Message| {
            events.lock().unwrap().push(format!("publish {destination} {}", copy.id()));
            if publish_fails {
                Err(ChannelError::broker(destination, "publish", ErrorKind::Refused, "down"))
            } else {
                Ok(())
            }
        };
        let settle = async |how: AfterRouting| {
            events.lock().unwrap().push(format!("{how:?}"));
            Ok(())
        };
        let rejected = block_on(reject_by_forwarding("orders-sub", subscription, &message, None, publish, settle));
        let events = events.into_inner().unwrap().into_iter().map(|e| e.replace(message.id(), "ID")).collect();
        (rejected, events)
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    #[test]
    fn a_routed_copy_is_published_before_the_original_is_acknowledged() {
        let (rejected, events) = reject(&routed_to(Some("orders-dlq")), false);
        assert!(rejected.unwrap());
        assert_eq!(events, ["publish orders-dlq ID", "Acknowledge"]);
    }

    #[test]
    fn a_copy_that_cannot_be_routed_releases_the_original_and_returns_the_routing_error() {
        let (rejected, events) = reject(&routed_to(Some("orders-dlq")), true);
        assert_eq!(rejected.unwrap_err().kind(), Some(ErrorKind::Refused));
        assert_eq!(events, ["publish orders-dlq ID", "Release"]);
    }

    #[test]
    fn with_nowhere_to_route_the_original_is_acknowledged() {
        let (rejected, events) = reject(&routed_to(None), false);
        assert!(!rejected.unwrap());
        assert_eq!(events, ["Acknowledge"]);
    }
}
