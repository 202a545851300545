//! Helpers the bespoke broker tests share: unique names, a bounded receive by id, and a
//! captured tracing output.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::{Channel, Message};

pub fn unique(name: &str) -> String {
    format!("bespoke-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// A folder under the system's temporary directory, named uniquely, deleted when dropped (a
/// failing test's too): a restarted broker's kept storage.
pub struct KeptFolder(pub std::path::PathBuf);

impl KeptFolder {
    pub fn new(name: &str) -> KeptFolder {
        KeptFolder(std::env::temp_dir().join(unique(name)))
    }
}

impl Drop for KeptFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The next delivery of `id`, polling every 500 ms until `ceiling`.
pub async fn receive(channel: &dyn Channel, id: &str, ceiling: Duration) -> Option<Message> {
    let deadline = tokio::time::Instant::now() + ceiling;
    while tokio::time::Instant::now() < deadline {
        if let Some(message) = channel.receive(Duration::from_millis(500)).await.unwrap() {
            if message.id() == id {
                return Some(message);
            }
        }
    }
    None
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

/// What `work` logs through tracing, as text.
pub fn captured_logs(work: impl FnOnce()) -> String {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    tracing::subscriber::with_default(subscriber, work);
    let bytes = captured.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}
