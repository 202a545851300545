//! The RocketMQ configuration: `rocketmq` (pop consumption, a normal topic).
//!
//! The broker, once per test binary: the name server in `NAMESRV_ADDR` (RocketMQ's own variable),
//! else a name server and broker in one local JVM, from the jars and launcher
//! `cargo xtask brokers install rocketmq` puts under `.brokers/rocketmq`.

use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::rocketmq::{RocketMqConnection, RocketMqSubscription};
use gateway::{Channel, Subscription};

use crate::assertion::FullHeader;
use crate::cell::{Cell, CellParts, CellSpec};
use crate::local::{self, LocalProcess};
use crate::Provider;

/// The lease of a popped message in a cell: long enough for any handler here, short enough
/// that a message left unsettled comes back within a cell's arrival ceiling.
pub const LEASE: Duration = Duration::from_secs(10);

struct Broker {
    connection: RocketMqConnection,
    _process: Option<LocalProcess>,
}

/// A free loopback port `p` for the broker with `p + 1` (its HA port) free too.
fn free_broker_port() -> u16 {
    loop {
        let port = local::free_loopback_port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

fn start_launcher() -> (LocalProcess, String) {
    let install = local::install_dir("rocketmq");
    let (name_server_port, broker_port) = (local::free_loopback_port(), free_broker_port());
    let work = install.join("run").join(broker_port.to_string());
    let mut command = Command::new("java");
    command
        .args(["-Xms128m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC"])
        // RocketMQ logs under the user's home: keep them in the run's folder.
        .arg(format!("-Duser.home={}", work.display()))
        .arg("-cp")
        .arg(format!("{}:{}", install.join("lib/*").display(), install.join("classes").display()))
        .arg("Launcher")
        .arg(&work)
        .arg(name_server_port.to_string())
        .arg(broker_port.to_string());
    let process = local::start("rocketmq", "rocketmq", command, broker_port, "rocketmq ready", Duration::from_secs(90));
    (process, format!("127.0.0.1:{name_server_port}"))
}

fn broker() -> &'static Broker {
    static BROKER: OnceLock<Broker> = OnceLock::new();
    BROKER.get_or_init(|| {
        let (name_server, process) = match std::env::var("NAMESRV_ADDR") {
            Ok(address) => (address, None),
            Err(_) => {
                let (process, address) = start_launcher();
                (address, Some(process))
            }
        };
        // Connecting is async, and the caller may itself be on a runtime: block a plain thread.
        let connection = std::thread::spawn(move || {
            gateway::blocking::runtime().block_on(RocketMqConnection::connect(&name_server))
        })
        .join()
        .expect("connecting to RocketMQ panicked")
        .unwrap_or_else(|e| panic!("{e}"));
        Broker { connection, _process: process }
    })
}

/// The connection to this binary's RocketMQ broker, for bespoke tests.
pub fn connection() -> &'static RocketMqConnection {
    &broker().connection
}

pub struct RocketMqConfiguration {
    name: &'static str,
}

pub fn rocketmq() -> &'static RocketMqConfiguration {
    static CONFIGURATION: RocketMqConfiguration = RocketMqConfiguration { name: "rocketmq" };
    &CONFIGURATION
}

/// A channel on `topic` for consumer group `group`, with the cells' lease.
async fn channel(subscription: Subscription) -> Arc<dyn Channel> {
    let name = subscription.name.clone();
    let mut subscription = RocketMqSubscription::new(subscription);
    subscription.invisible_time = LEASE;
    connection().channel(&subscription).await.unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

#[async_trait]
impl Provider for RocketMqConfiguration {
    fn configuration(&self) -> &'static str {
        self.name
    }

    // Topics are left on the broker: its store is the test binary's own and goes with it.
    async fn cell(&self, spec: CellSpec) -> Cell {
        let topic = spec.unique_name(self.name);
        let mut common = Subscription::new(format!("{topic}-group"), &topic).with_requeue_count(spec.requeue_count);
        if spec.dead_letter {
            common = common.with_dead_letter(format!("{topic}-dlq"));
        }
        if spec.invalid_channel {
            common = common.with_invalid_message(format!("{topic}-invalid"));
        }
        let main = channel(common.clone()).await;
        let mut readers = Vec::new();
        for destination in [&common.dead_letter_routing_key, &common.invalid_message_routing_key] {
            readers.push(match destination {
                Some(destination) => {
                    Some(channel(Subscription::new(format!("{destination}-reader"), destination)).await)
                }
                None => None,
            });
        }
        CellParts {
            publish_topic: topic,
            subscription: common,
            channel: main,
            producer: Arc::new(connection().producer()),
            invalid: readers.pop().flatten(),
            dead_letter: readers.pop().flatten(),
            assertion: Arc::new(FullHeader),
            teardown: None,
        }
        .into()
    }
}
