//! The messaging gateway under test: a message model, the delivery-count contract of ADR 0077,
//! sync and async channels, the Reactor and Proactor pumps (the only budget enforcers), the
//! budget rules, and transports (the in-memory one always compiled).

pub mod blocking;
pub mod budget;
pub mod channel;
pub mod delivery_count;
pub mod endpoint;
pub mod error;
pub mod message;
pub mod pump;
pub mod rejection;
pub mod runtime;
pub mod subscription;
pub mod transport;

pub use blocking::{Blocking, BlockingChannel, BlockingProducer};
pub use channel::{Channel, Producer};
pub use error::ChannelError;
pub use message::{Bag, BagValue, Message, MessageBody, MessageHeader, MessageType};
pub use rejection::{Rejection, RejectionReason};
pub use runtime::GatewayRuntime;
pub use subscription::{MakeChannels, Subscription};
