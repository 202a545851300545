//! Transports: each turns broker messages into `Message`s through the delivery-count rule and
//! settles them. The in-memory one is always compiled; broker ones sit behind cargo features.

#[cfg(feature = "broker")]
pub mod attributes;
#[cfg(feature = "azure")]
pub mod azure;
#[cfg(feature = "envelope")]
pub mod envelope;
#[cfg(feature = "gcp")]
pub mod gcp;
#[cfg(feature = "kafka")]
pub mod kafka;
// The shared pieces; the in-memory transport uses only some of them.
#[cfg_attr(not(feature = "broker"), allow(dead_code))]
mod kit;
pub mod memory;
#[cfg(feature = "mqtt")]
pub mod mqtt;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "receive-loop")]
mod receive_loop;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "rocketmq")]
pub mod rocketmq;
#[cfg(feature = "sqs")]
pub mod sqs;
