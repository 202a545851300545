//! Redis Streams (cargo feature `redis`): a stream per topic, a consumer group per subscription.
//!
//! The client is the `redis` crate's multiplexed async connection on tokio. A message is one
//! stream entry: the header as the fields `transport::attributes` shares with SQS, Pub/Sub and
//! RocketMQ (header fields own their names, the bag is one JSON field), the body as the field
//! `body`. An entry that cannot be read as a message is routed as Unacceptable.
//!
//! Counting: the broker counts deliveries. Each entry a group hands out sits in the group's
//! pending entries list (PEL) with a times-delivered counter: `XREADGROUP … >` creates it at 1,
//! and every claim (`XCLAIM`, `XAUTOCLAIM`) adds one (measured in `providers/tests/redis.rs`:
//! 1, 2, 3). The reader resolves the handled count with it through `delivery_count::resolve`.
//!
//! Settling goes through the PEL, never by republishing: acknowledge is `XACK`; nack and requeue
//! set the entry's idle time (`XCLAIM … IDLE … JUSTID`, which leaves the counter alone) so the
//! receive path's `XAUTOCLAIM`, which claims entries idle for longer than the lease, takes it at
//! once (nack) or once the delay has passed (requeue); reject adds the stamped copy to the
//! dead-letter or invalid-message stream, then acknowledges. Entries are acknowledged, not
//! deleted (`XDEL`): a stream is shared by every subscription (group) on its topic, and deleting
//! an entry one group settled would take it from the others. Trimming a stream is the operator's
//! (`XTRIM`, `MAXLEN`).

mod channel;
mod connection;
mod entry;
mod producer;
mod subscription;

pub use channel::RedisChannel;
pub use connection::RedisConnection;
pub use entry::{read_entry, to_fields, StreamEntry, BODY_FIELD};
pub use producer::RedisProducer;
pub use subscription::RedisSubscription;

/// The client crate, for callers that need a raw command (the bespoke broker tests).
pub use ::redis as native;

use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// A failed Redis call on `channel`: the client says whether it timed out or lost the
/// connection; a missing group (`NOGROUP`) is not found; any other server error is the broker's.
fn broker_error(channel: &str, operation: &'static str, error: ::redis::RedisError) -> ChannelError {
    let kind = if error.is_timeout() {
        ErrorKind::Timeout
    } else if error.is_connection_refusal() || error.is_connection_dropped() || error.is_io_error() {
        ErrorKind::Refused
    } else if error.code() == Some("NOGROUP") {
        ErrorKind::NotFound
    } else if error.code().is_some() {
        ErrorKind::Rejected
    } else {
        kit::io_kind(&error).unwrap_or(ErrorKind::Other)
    };
    kit::broker_error(channel, operation, kind, error)
}
