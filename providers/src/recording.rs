//! The pump tests' handlers: FR-23's always defers, DC-6's holds each message a while, then
//! defers; both record how often each message was dispatched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use gateway::pump::{AsyncHandler, Handler, Outcome, TextRequest};

#[derive(Debug, Clone, Default)]
pub struct AlwaysDefers {
    dispatches: Arc<Mutex<HashMap<String, u32>>>,
}

impl AlwaysDefers {
    pub fn dispatches(&self, id: &str) -> u32 {
        self.dispatches.lock().unwrap_or_else(|p| p.into_inner()).get(id).copied().unwrap_or(0)
    }

    fn record(&self, request: &TextRequest) -> Outcome {
        *self.dispatches.lock().unwrap_or_else(|p| p.into_inner()).entry(request.id.clone()).or_default() += 1;
        Outcome::Defer
    }
}

impl Handler<TextRequest> for AlwaysDefers {
    fn handle(&self, request: TextRequest) -> Outcome {
        self.record(&request)
    }
}

#[async_trait]
impl AsyncHandler<TextRequest> for AlwaysDefers {
    async fn handle(&self, request: TextRequest) -> Outcome {
        self.record(&request)
    }
}

/// The DC-6 handler: holds every message it is given for `hold` (a handler mid-work), then
/// defers it; records each dispatch so a test can stop the pump while one is held.
#[derive(Debug, Clone)]
pub struct HoldsThenDefers {
    hold: std::time::Duration,
    dispatches: AlwaysDefers,
}

impl HoldsThenDefers {
    pub fn new(hold: std::time::Duration) -> HoldsThenDefers {
        HoldsThenDefers { hold, dispatches: AlwaysDefers::default() }
    }

    pub fn dispatches(&self, id: &str) -> u32 {
        self.dispatches.dispatches(id)
    }

    /// Waits (blocking) until `id` has been dispatched, at most `ceiling`; whether it was.
    pub fn wait_for_dispatch(&self, id: &str, ceiling: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + ceiling;
        while self.dispatches(id) == 0 {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }

    /// As [`HoldsThenDefers::wait_for_dispatch`], for an async test.
    pub async fn dispatched(&self, id: &str, ceiling: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + ceiling;
        while self.dispatches(id) == 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        true
    }
}

impl Handler<TextRequest> for HoldsThenDefers {
    fn handle(&self, request: TextRequest) -> Outcome {
        self.dispatches.record(&request);
        std::thread::sleep(self.hold);
        Outcome::Defer
    }
}

#[async_trait]
impl AsyncHandler<TextRequest> for HoldsThenDefers {
    async fn handle(&self, request: TextRequest) -> Outcome {
        self.dispatches.record(&request);
        tokio::time::sleep(self.hold).await;
        Outcome::Defer
    }
}
