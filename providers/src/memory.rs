//! The in-memory configuration: one broker per test binary, queues named per cell.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gateway::transport::memory::MemoryBroker;
use gateway::{Channel, Producer};

use crate::builder::{reader_subscription, CellBroker, CellNames, CellPlan};
use crate::cell::Ceilings;
use crate::fault::{Fault, StaleRequeue};

pub struct Memory {
    broker: MemoryBroker,
}

/// The provider of the `memory` configuration, shared by every test in the binary.
pub fn memory() -> &'static Memory {
    static PROVIDER: OnceLock<Memory> = OnceLock::new();
    PROVIDER.get_or_init(|| Memory { broker: MemoryBroker::new() })
}

#[async_trait]
impl CellBroker for Memory {
    type Created = ();

    fn configuration(&self) -> &'static str {
        "memory"
    }

    /// One queue, named as the cell.
    fn names(&self, unique: &str) -> CellNames {
        CellNames::new(unique, unique)
    }

    async fn channel(&self, plan: &CellPlan, _: &mut ()) -> Arc<dyn Channel> {
        let healthy = self.broker.channel(&plan.subscription).expect("create mode always succeeds");
        match Fault::from_environment() {
            Some(Fault::StaleRequeue) => Arc::new(StaleRequeue::new(healthy)),
            Some(Fault::KillBroker) => {
                panic!("CONFORMANCE_FAULT=kill-broker needs a broker; memory has none")
            }
            Some(Fault::FailsFirstAttempt) | None => Arc::new(healthy),
        }
    }

    async fn reader(&self, queue: &str, _: &mut ()) -> Arc<dyn Channel> {
        Arc::new(self.broker.channel(&reader_subscription(queue)).expect("create mode always succeeds"))
    }

    fn producer(&self, _: &CellPlan) -> Arc<dyn Producer> {
        Arc::new(self.broker.producer())
    }

    /// In-process, nothing is slower than its timers: the longest a healthy cell waits for one
    /// arrival is FR-9's delay (3 s) and its at-once bound (1.6 s, templates/manifest.yaml), and
    /// the whole matrix takes 5 s. Twice the longest wait, so a defect that loses a message fails
    /// its cell in 10 s, not the 30 or 60 a broker needs (a third of the memory mutation run).
    fn ceilings(&self) -> Ceilings {
        Ceilings { arrival: Duration::from_secs(10), rejection: Duration::from_secs(10) }
    }
}
