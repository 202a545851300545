//! Deliberate faults, to prove the conformance harness can fail. Chosen with the
//! `CONFORMANCE_FAULT` environment variable; never set in a normal run.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use gateway::{Channel, ChannelError, Message, Rejection};

pub const VARIABLE: &str = "CONFORMANCE_FAULT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Requeue puts back the copy as it was received, so its handled count never grows: the
    /// defect ADR 0077 fixes on brokers that re-serve their stored copy.
    StaleRequeue,
    /// The broker (a container, or a local process) is killed (SIGKILL) 250 ms after it is up,
    /// while the first cells run: the run must stop, name the broker, and leave the ledger
    /// untouched. Needs a broker the binary started (`containers` or `local`).
    KillBroker,
    /// Every cell fails its first attempt in a conformance run and passes when run again: a
    /// flaky cell, to prove a rerun records it as a flake and keeps its status. Attempts are
    /// remembered per run (the parent process, which is `cargo xtask conformance`) in a folder
    /// under the system's temporary directory.
    FailsFirstAttempt,
}

impl Fault {
    const CHOICES: [(&'static str, Fault); 3] = [
        ("stale-requeue", Fault::StaleRequeue),
        ("kill-broker", Fault::KillBroker),
        ("fails-first-attempt", Fault::FailsFirstAttempt),
    ];

    /// The fault the environment asks for. An unknown value panics naming the valid choices:
    /// a typo must not silently run the healthy provider.
    pub fn from_environment() -> Option<Fault> {
        let value = std::env::var(VARIABLE).ok().filter(|v| !v.is_empty())?;
        match Fault::CHOICES.iter().find(|(name, _)| *name == value) {
            Some((_, fault)) => Some(*fault),
            None => {
                let names: Vec<_> = Fault::CHOICES.iter().map(|(name, _)| *name).collect();
                panic!("{VARIABLE}={value:?} is not a fault; valid choices: {}", names.join(", "))
            }
        }
    }
}

/// Under `FailsFirstAttempt`, panics the first time `cell` (configuration, behaviour, variant)
/// is built in this conformance run; later attempts pass.
pub fn fail_first_attempt(cell: &str) {
    if Fault::from_environment() != Some(Fault::FailsFirstAttempt) {
        return;
    }
    let folder = std::env::temp_dir().join(format!("conformance-attempts-{}", std::os::unix::process::parent_id()));
    std::fs::create_dir_all(&folder).expect("the attempts folder can be created");
    let first = std::fs::OpenOptions::new().write(true).create_new(true).open(folder.join(cell)).is_ok();
    if first {
        panic!("{VARIABLE}=fails-first-attempt: the first attempt at {cell} fails on purpose");
    }
}

/// Wraps a channel so that a requeue forgets the handled count the pump gave the message.
pub struct StaleRequeue<C> {
    inner: C,
    received_counts: Mutex<HashMap<String, u32>>,
}

impl<C> StaleRequeue<C> {
    pub fn new(inner: C) -> StaleRequeue<C> {
        StaleRequeue { inner, received_counts: Mutex::default() }
    }
}

#[async_trait]
impl<C: Channel> Channel for StaleRequeue<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let received = self.inner.receive(timeout).await?;
        if let Some(message) = &received {
            self.received_counts.lock().unwrap().insert(message.header.id.clone(), message.header.handled_count);
        }
        Ok(received)
    }
    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.inner.acknowledge(message).await
    }
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        self.inner.reject(message, rejection).await
    }
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let mut stale = message.clone();
        if let Some(count) = self.received_counts.lock().unwrap().get(&message.header.id) {
            stale.header.handled_count = *count;
        }
        self.inner.requeue(&stale, delay).await
    }
    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.inner.nack(message).await
    }
    async fn close(&self) -> Result<(), ChannelError> {
        self.inner.close().await
    }
}
