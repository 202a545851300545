//! The FR-23 handler: always defers, and records how often each message was dispatched.

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
