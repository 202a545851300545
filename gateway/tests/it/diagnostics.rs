//! The channel-creation diagnostic: a warning naming the subscription and the reason,
//! captured through a tracing subscriber.

use std::io::Write;
use std::sync::{Arc, Mutex};

use gateway::budget::{warn_if_unenforceable, DeliveryCounting};
use gateway::Subscription;

struct NoCounter;

impl DeliveryCounting for NoCounter {
    fn native_redrive_limit(&self) -> Option<u32> {
        None
    }
    fn unenforceable_reason(&self) -> Option<String> {
        Some("the subscription has no dead-letter policy, so the broker reports no delivery attempt".into())
    }
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured_logs(work: impl FnOnce()) -> String {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    tracing::subscriber::with_default(subscriber, work);
    let bytes = captured.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn an_unenforceable_budget_is_logged_once_with_its_reason() {
    let subscription = Subscription::new("payments", "payments").with_requeue_count(3);
    let logs = captured_logs(|| warn_if_unenforceable(&subscription, &NoCounter));
    assert_eq!(logs.lines().count(), 1, "{logs}");
    assert!(logs.contains("WARN") && logs.contains("payments") && logs.contains("no dead-letter policy"), "{logs}");
}

#[test]
fn an_unlimited_budget_has_nothing_to_warn_about() {
    let subscription = Subscription::new("payments", "payments").with_requeue_count(-1);
    assert_eq!(captured_logs(|| warn_if_unenforceable(&subscription, &NoCounter)), "");
}
