//! What every broker transport needs the same way, written once: the error for a failed call,
//! a delay in the whole seconds brokers count in, and the error for settling a message that is
//! not in flight. A transport keeps only its broker calls, its reader, and how its SDK's errors
//! map to an `ErrorKind`.

use std::time::Duration;

use crate::error::{BoxError, ChannelError, ErrorKind};
use crate::message::Message;

/// A failed broker call on `channel`.
pub(crate) fn broker_error(
    channel: &str,
    operation: &'static str,
    kind: ErrorKind,
    source: impl Into<BoxError>,
) -> ChannelError {
    ChannelError::broker(channel, operation, kind, source)
}

/// The kind an I/O error somewhere in `error`'s chain gives (connection refused, timed out),
/// for SDKs whose own error types say no more.
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
pub(crate) fn whole_seconds(delay: Duration) -> u64 {
    delay.as_secs() + u64::from(delay.subsec_nanos() > 0)
}

/// Settling `message` on `channel` found no receipt for it: already settled, or its lease lapsed.
pub(crate) fn not_in_flight(channel: &str, operation: &'static str, message: &Message) -> ChannelError {
    ChannelError::NotInFlight { channel: channel.to_owned(), operation, message_id: message.id().to_owned() }
}

#[cfg(test)]
mod tests {
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
}
