//! Azure Queue Storage (cargo feature `azure`): a queue per topic, consumed directly (no
//! subscriptions), through `azure_storage_queue` (Microsoft's own client).
//!
//! A message is one queue message whose text is the JSON envelope `transport::envelope` writes
//! (an Azure message carries no attributes): the header in the attribute layout the transports
//! share, and the UTF-8 body. One that cannot be read is routed as Unacceptable with its text.
//!
//! Counting: the service counts deliveries. Every Get Messages that hands a message out adds one
//! to its `DequeueCount` (1 on a first delivery): after a visibility update to 0, after a delayed
//! update, after a lapsed visibility timeout (the lease), for any client (measured on Azurite in
//! `providers/tests/azure.rs`). The reader resolves the handled count with it through
//! `delivery_count::resolve`.
//!
//! Settling goes through the message's pop receipt, never by sending again: acknowledge deletes;
//! nack updates the visibility to 0 and a requeue to its delay (whole seconds, rounded up);
//! reject sends the stamped copy to the dead-letter or invalid-message queue (Azure has no
//! dead-lettering of its own), then deletes. A settlement whose pop receipt the service no longer
//! honours (the lease lapsed, another client holds the message) fails as `NotInFlight`. Every
//! call fails as a `Timeout` past the subscription's `call_deadline` (30 s).
//!
//! Credentials: the account key never leaves the process. Each request carries an account SAS
//! signed with it (`account`), renewed before it expires; error texts have the SAS signature
//! taken out.

mod account;
mod channel;
mod clients;
mod connection;
mod message;
mod producer;
mod subscription;

pub use account::{AzureAccount, DEVELOPMENT_ACCOUNT};
pub use channel::AzureQueueChannel;
pub use connection::AzureQueueConnection;
pub use message::{read_queue_message, Receipt};
pub use producer::AzureQueueProducer;
pub use subscription::AzureQueueSubscription;

/// The client crate, for callers that need a raw call (the bespoke broker tests).
pub use ::azure_storage_queue as native;

use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// The longest visibility timeout the service takes: 7 days.
const MAX_VISIBILITY_SECONDS: u64 = 7 * 24 * 60 * 60;

/// A failed call on `channel`, its text without the SAS signature a request URL carried.
fn broker_error(channel: &str, operation: &'static str, error: azure_core::Error) -> ChannelError {
    let kind = error_kind(&error);
    kit::broker_error(channel, operation, kind, account::without_signature(&error.to_string()))
}

fn error_kind(error: &azure_core::Error) -> ErrorKind {
    use azure_core::error::ErrorKind as Azure;
    match error.kind() {
        Azure::HttpResponse { status, .. } => match u16::from(*status) {
            404 => ErrorKind::NotFound,
            408 | 504 => ErrorKind::Timeout,
            503 => ErrorKind::Refused,
            400..=499 => ErrorKind::Rejected,
            _ => ErrorKind::Other,
        },
        Azure::Connection => ErrorKind::Refused,
        Azure::Io => kit::io_kind(error).unwrap_or(ErrorKind::Refused),
        Azure::DataConversion => ErrorKind::Malformed,
        Azure::Credential => ErrorKind::Rejected,
        _ => kit::io_kind(error).unwrap_or(ErrorKind::Other),
    }
}

/// The service's error code (`QueueNotFound`, `PopReceiptMismatch`), where it answered with one.
fn error_code(error: &azure_core::Error) -> Option<&str> {
    match error.kind() {
        azure_core::error::ErrorKind::HttpResponse { error_code, .. } => error_code.as_deref(),
        _ => None,
    }
}

/// Whether `name` is a queue name the service takes: 3 to 63 lowercase letters, digits and
/// hyphens, starting and ending with a letter or digit, no two hyphens together. Checked before
/// any call, so a bad name is an error that says the rule, not the service's bare 400.
fn check_queue_name(name: &str) -> Result<(), ChannelError> {
    let characters = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let valid = (3..=63).contains(&name.len())
        && characters
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if valid {
        return Ok(());
    }
    let rule = "an Azure queue name is 3 to 63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit";
    Err(kit::broker_error(name, "name the queue", ErrorKind::Unsupported, format!("{name:?}: {rule}")))
}

/// A visibility timeout of `delay` in the whole seconds the service counts in (rounded up, so a
/// message is never visible again before its delay), refused beyond the service's 7 days.
fn visibility_seconds(channel: &str, operation: &'static str, delay: std::time::Duration) -> Result<i32, ChannelError> {
    let seconds = kit::whole_seconds(delay);
    if seconds > MAX_VISIBILITY_SECONDS {
        let why = format!("a delay of {delay:?} is longer than the 7 days an Azure queue message can stay invisible");
        return Err(kit::broker_error(channel, operation, ErrorKind::Unsupported, why));
    }
    Ok(i32::try_from(seconds).expect("7 days of seconds fit an i32"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn queue_names_follow_the_service_rule() {
        for name in ["orders", "azure-queue-dc-1-reactor-0a1b2c3d", "abc", &"a".repeat(63)] {
            assert!(check_queue_name(name).is_ok(), "{name}");
        }
        for name in ["ab", "Orders", "orders_1", "-orders", "orders-", "or--ders", &"a".repeat(64), "orders.dlq"] {
            let error = check_queue_name(name).unwrap_err();
            assert_eq!(error.kind(), Some(ErrorKind::Unsupported), "{name}");
            assert!(error.to_string().contains("lowercase letters"), "{error}");
        }
    }

    #[test]
    fn visibility_rounds_up_and_stops_at_seven_days() {
        assert_eq!(visibility_seconds("q", "requeue", Duration::ZERO).unwrap(), 0);
        assert_eq!(visibility_seconds("q", "requeue", Duration::from_millis(1_001)).unwrap(), 2);
        assert_eq!(visibility_seconds("q", "requeue", Duration::from_secs(MAX_VISIBILITY_SECONDS)).unwrap(), 604_800);
        let error = visibility_seconds("q", "requeue", Duration::from_secs(MAX_VISIBILITY_SECONDS + 1)).unwrap_err();
        assert_eq!(error.kind(), Some(ErrorKind::Unsupported));
    }
}
