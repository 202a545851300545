//! The lost connections a call lived through. async-nats neither fails nor resends a request
//! whose connection is lost while it waits: a request written to a socket the network has reset
//! goes down with that connection, the client connects again, and the request waits out its
//! deadline (seen in CI as an acknowledge failing `Timeout` after a reset, and made certain in
//! `providers/tests/nats.rs` by resetting while the acknowledge is held in flight). Its timeout
//! alone cannot tell "the server is slow" from "the connection was lost"; the client's
//! `Disconnected` events, counted here, can.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{ChannelError, ErrorKind};
use crate::transport::kit;

/// How many times the client has lost its connection to the server.
#[derive(Clone, Default)]
pub(super) struct Disconnects(Arc<AtomicU64>);

impl Disconnects {
    /// Counts one `Disconnected` event of the client.
    pub(super) fn record(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// `call`'s result; a failure during which the client lost its connection is `Refused` (the
    /// connection was dropped), whatever the client called it: the request may never have
    /// reached the server, and its answer never will.
    pub(super) async fn across<T>(
        &self,
        channel: &str,
        operation: &'static str,
        call: impl Future<Output = Result<T, ChannelError>>,
    ) -> Result<T, ChannelError> {
        // Read before the call is handed to the client, so a loss that takes the call with it is
        // always counted after this.
        let before = self.0.load(Ordering::SeqCst);
        call.await.map_err(|error| {
            if self.0.load(Ordering::SeqCst) == before {
                return error;
            }
            let why = format!("the connection to the server was lost while the call waited for its answer ({error})");
            kit::broker_error(channel, operation, ErrorKind::Refused, why)
        })
    }
}
