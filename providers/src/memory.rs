//! The in-memory configuration: one broker per test binary, queues named per cell.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use gateway::transport::memory::MemoryBroker;
use gateway::{Channel, Subscription};

use crate::assertion::FullHeader;
use crate::cell::{Cell, CellParts, CellSpec};
use crate::fault::{Fault, StaleRequeue};
use crate::Provider;

pub struct Memory {
    broker: MemoryBroker,
}

/// The provider of the `memory` configuration, shared by every test in the binary.
pub fn memory() -> &'static Memory {
    static PROVIDER: OnceLock<Memory> = OnceLock::new();
    PROVIDER.get_or_init(|| Memory { broker: MemoryBroker::new() })
}

impl Memory {
    fn reader(&self, queue: &str) -> Arc<dyn Channel> {
        let subscription = Subscription::new(format!("{queue}-reader"), queue);
        Arc::new(self.broker.channel(&subscription).expect("create mode always succeeds"))
    }
}

#[async_trait]
impl Provider for Memory {
    fn configuration(&self) -> &'static str {
        "memory"
    }

    async fn cell(&self, spec: CellSpec) -> Cell {
        let queue = spec.unique_name(self.configuration());
        let mut subscription = Subscription::new(&queue, &queue).with_requeue_count(spec.requeue_count);
        if spec.dead_letter {
            subscription = subscription.with_dead_letter(format!("{queue}-dlq"));
        }
        if spec.invalid_channel {
            subscription = subscription.with_invalid_message(format!("{queue}-invalid"));
        }
        let healthy = self.broker.channel(&subscription).expect("create mode always succeeds");
        let channel: Arc<dyn Channel> = match Fault::from_environment() {
            Some(Fault::StaleRequeue) => Arc::new(StaleRequeue::new(healthy)),
            Some(Fault::KillBroker) => {
                panic!("CONFORMANCE_FAULT=kill-broker needs a broker container; memory has no broker")
            }
            None => Arc::new(healthy),
        };
        CellParts {
            dead_letter: subscription.dead_letter_routing_key.as_deref().map(|q| self.reader(q)),
            invalid: subscription.invalid_message_routing_key.as_deref().map(|q| self.reader(q)),
            publish_topic: queue,
            subscription,
            channel,
            producer: Arc::new(self.broker.producer()),
            assertion: Arc::new(FullHeader),
            teardown: None,
        }
        .into()
    }
}
