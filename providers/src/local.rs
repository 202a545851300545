//! Brokers run as local processes: started on a free loopback port, awaited until they say they
//! are ready, and tied to the test binary's life through their stdin (they stop at its end). A
//! broker that exits while the binary still runs stops the binary once, with its last lines.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// The workspace root, where `cargo xtask brokers install` puts what brokers need.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("providers is inside the workspace").to_path_buf()
}

/// Where `cargo xtask brokers install <transport>` installs a transport's broker.
pub fn install_dir(transport: &str) -> PathBuf {
    workspace_root().join(".brokers").join(transport)
}

pub fn free_loopback_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("no free loopback port");
    listener.local_addr().expect("bound").port()
}

/// A running broker process. Dropping the stdin it holds (at process exit) stops it.
pub struct LocalProcess {
    pub name: &'static str,
    pub port: u16,
    pub pid: u32,
    _stdin: ChildStdin,
}

/// How many of a broker's last output lines a failure shows.
const LAST_LINES: usize = 20;

/// Why a local broker did not come up; each names the broker, and says how to install it or
/// what it printed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("cannot start {name} ({error}); run `cargo xtask brokers install {transport}` first")]
    Spawn { name: &'static str, transport: &'static str, error: std::io::Error },
    #[error("{name} is not installed ({} is missing); run `{install}` first", .missing.display())]
    NotInstalled { name: &'static str, missing: PathBuf, install: &'static str },
    #[error("{name} did not report ready within {ceiling:?}; its output:\n{}", .output.join("\n"))]
    NotReady { name: &'static str, ceiling: Duration, output: Vec<String> },
    #[error("{name} exited ({status}) while the tests ran; its last lines:\n{}", .last.join("\n"))]
    Died { name: &'static str, status: String, last: Vec<String> },
}

/// Starts `command` and waits up to `ceiling` for a stdout line starting with `ready`.
pub fn start(
    name: &'static str,
    transport: &'static str,
    mut command: Command,
    port: u16,
    ready: &str,
    ceiling: Duration,
) -> Result<LocalProcess, LocalError> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|error| LocalError::Spawn { name, transport, error })?;
    let stdout = child.stdout.take().expect("piped");
    let (lines, received) = mpsc::channel();
    let last = Arc::new(Mutex::new(VecDeque::with_capacity(LAST_LINES)));
    let kept = last.clone();
    std::thread::spawn(move || {
        // Read to the end, so the broker never writes into a closed pipe.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() == LAST_LINES {
                kept.pop_front();
            }
            kept.push_back(line.clone());
            let _ = lines.send(line);
        }
    });
    let mut output = Vec::new();
    loop {
        match received.recv_timeout(ceiling) {
            Ok(line) if line.starts_with(ready) => break,
            Ok(line) => output.push(line),
            Err(_) => return Err(LocalError::NotReady { name, ceiling, output }),
        }
    }
    let stdin = child.stdin.take().expect("piped");
    let pid = child.id();
    // The broker ends with the binary (its stdin closes); ending before, it is an outage.
    std::thread::spawn(move || {
        let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
        std::thread::sleep(Duration::from_millis(100)); // its last lines reach the reader
        let last = last.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
        crate::broker::fatal(transport, &LocalError::Died { name, status, last });
    });
    Ok(LocalProcess { name, port, pid, _stdin: stdin })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_that_cannot_start_names_its_install_command() {
        let command = Command::new("/nonexistent/conformance-broker");
        let error = start("moto", "sqs", command, 1, "ready", Duration::from_secs(1)).err().expect("no such program");
        let message = error.to_string();
        assert!(message.starts_with("cannot start moto ("), "{message}");
        assert!(message.ends_with("); run `cargo xtask brokers install sqs` first"), "{message}");
    }

    #[test]
    fn a_broker_not_installed_names_what_is_missing_and_its_install_command() {
        let missing = PathBuf::from(".brokers/sqs/elasticmq/classes/ElasticMqLauncher.class");
        let install = "cargo xtask brokers install sqs --impl elasticmq";
        let error = LocalError::NotInstalled { name: "elasticmq", missing, install };
        assert_eq!(
            error.to_string(),
            "elasticmq is not installed (.brokers/sqs/elasticmq/classes/ElasticMqLauncher.class is missing); run \
             `cargo xtask brokers install sqs --impl elasticmq` first"
        );
    }
}
