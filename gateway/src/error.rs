//! What a channel or producer call can fail with. Its own module, below `channel` and
//! `rejection`, so neither depends on the other for it.

use std::fmt;

/// The error a broker SDK (or the transport itself) gave, kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure a broker call met: enough for a caller to tell a timeout from a refusal
/// without parsing text. The SDK's own error stays reachable as the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The call did not complete in time.
    Timeout,
    /// The broker could not be reached, or refused or dropped the connection.
    Refused,
    /// The queue, topic or subscription named does not exist.
    NotFound,
    /// What the broker returned could not be read.
    Malformed,
    /// The transport cannot do what was asked (a per-message delay on Pub/Sub, say).
    Unsupported,
    /// The broker answered with an error of its own (permissions, limits, a bad argument).
    Rejected,
    /// Anything else.
    Other,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Refused => "refused",
            ErrorKind::NotFound => "not found",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Rejected => "rejected by the broker",
            ErrorKind::Other => "other",
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// A broker call failed; the pump logs it and retries with backoff.
    #[error("{operation} on channel {channel} failed ({kind}): {}", chain(.source.as_ref()))]
    Broker {
        channel: String,
        operation: &'static str,
        kind: ErrorKind,
        #[source]
        source: BoxError,
    },
    /// The message to settle is not in flight on this channel (already settled, or its lease lapsed).
    #[error("{operation} on channel {channel}: message {message_id} is not in flight")]
    NotInFlight { channel: String, operation: &'static str, message_id: String },
    /// Channel creation found missing infrastructure under `MakeChannels::Validate`.
    #[error("channel {channel} does not exist and make_channels is validate")]
    Missing { channel: String },
}

impl ChannelError {
    /// A failed broker call on `channel`, its cause kept as the source.
    pub fn broker(
        channel: &str,
        operation: &'static str,
        kind: ErrorKind,
        source: impl Into<BoxError>,
    ) -> ChannelError {
        ChannelError::Broker { channel: channel.to_owned(), operation, kind, source: source.into() }
    }

    /// The kind of a broker failure; `NotInFlight` and `Missing` are their own kinds.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ChannelError::Broker { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// An error and its causes, one after another: SDK errors often display only a category and
/// keep the detail in their sources.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let next = inner.to_string();
        // Some SDKs repeat their source's text in their own: say each thing once.
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connection failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_broker_error_keeps_its_kind_and_source_and_says_the_whole_chain() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "127.0.0.1:9 refused");
        let error = ChannelError::broker("orders", "receive", ErrorKind::Refused, Outer(refused));
        assert_eq!(error.kind(), Some(ErrorKind::Refused));
        assert_eq!(
            error.to_string(),
            "receive on channel orders failed (refused): connection failed: 127.0.0.1:9 refused"
        );
        let source = std::error::Error::source(&error).expect("the SDK error is the source");
        assert!(source.downcast_ref::<Outer>().is_some(), "a caller can reach the SDK's own error");
    }

    #[test]
    fn a_transport_refusal_reads_as_one_sentence() {
        let error =
            ChannelError::broker("t", "send with delay", ErrorKind::Unsupported, "Pub/Sub has no per-message delay");
        assert_eq!(
            error.to_string(),
            "send with delay on channel t failed (unsupported): Pub/Sub has no per-message delay"
        );
    }
}
