//! The async channel and producer traits: the primary API. The blocking ones the Reactor uses
//! are a thin adapter over these (see `blocking`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::budget::CountingReport;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;

/// A consumer's channel. Every call is bounded: `receive` waits at most `timeout`.
///
/// Cancel safety: dropping a call's future before it completes cancels its broker call (it is
/// not left running). Nothing is lost by cancelling `receive`: a message the broker handed out
/// but the caller never saw comes back when its lease lapses, as any unsettled delivery does.
/// A cancelled settlement (acknowledge, reject, requeue, nack) may or may not have reached the
/// broker; settle again or let the lease lapse.
#[async_trait]
pub trait Channel: Send + Sync {
    fn name(&self) -> &str;
    /// The next message, or `None` when none arrived within `timeout`. The handled count is
    /// already resolved by the delivery-count rule.
    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError>;
    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError>;
    /// Routes a stamped copy to the dead-letter or invalid-message destination and settles the
    /// source. Returns whether a copy was routed (false: no destination, acknowledged and logged).
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError>;
    /// Puts the message back to be redelivered not before `delay`.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError>;
    /// Releases the message for redelivery at once.
    async fn nack(&self, message: &Message) -> Result<(), ChannelError>;
    /// Ends the channel as a consumer that stops does: what it received and did not settle goes
    /// back to the broker and is delivered again, at once or, on a broker that leases, when its
    /// lease lapses. Settle first what must not come back; the channel is not used afterwards.
    async fn close(&self) -> Result<(), ChannelError>;
    /// The broker's delivery counting as the channel found it at creation (a native redrive
    /// limit, a reason it cannot count); `None` for a republishing transport. Pumps read it when
    /// they start, to surface the budget rules.
    fn counting(&self) -> Option<CountingReport> {
        None
    }
}

/// Publishes to the routing key in the message's header topic.
#[async_trait]
pub trait Producer: Send + Sync {
    async fn send(&self, message: &Message) -> Result<(), ChannelError>;
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError>;
}

#[async_trait]
impl<C: Channel + ?Sized> Channel for Arc<C> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        (**self).receive(timeout).await
    }
    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        (**self).acknowledge(message).await
    }
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        (**self).reject(message, rejection).await
    }
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        (**self).requeue(message, delay).await
    }
    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        (**self).nack(message).await
    }
    async fn close(&self) -> Result<(), ChannelError> {
        (**self).close().await
    }
    fn counting(&self) -> Option<CountingReport> {
        (**self).counting()
    }
}

#[async_trait]
impl<P: Producer + ?Sized> Producer for Arc<P> {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        (**self).send(message).await
    }
    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        (**self).send_with_delay(message, delay).await
    }
}
