//! The client options every MQTT connection of the gateway shares: the producer's, each
//! channel's session and the short-lived claim check (`claim`).

use std::time::Duration;

use rumqttc::MqttOptions;

/// Packets larger than the client's 10 KiB default are allowed, up to this.
const MAX_PACKET: usize = 1024 * 1024;
/// The requests (publishes, acks) a session queues for its event loop.
pub(super) const REQUEST_CAPACITY: usize = 256;

/// A client `client_id` of the broker at `host:port`, with manual acks; `persistent` keeps its
/// session (and what it subscribed) on the broker across connections.
pub(super) fn options(client_id: &str, host: &str, port: u16, persistent: bool) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, host, port);
    options
        .set_clean_session(!persistent)
        .set_manual_acks(true)
        .set_keep_alive(Duration::from_secs(30))
        .set_max_packet_size(MAX_PACKET, MAX_PACKET)
        .set_request_channel_capacity(REQUEST_CAPACITY);
    options
}
