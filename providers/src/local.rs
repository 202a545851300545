//! Brokers run as local processes: started on a free loopback port, awaited until they say they
//! are ready, and tied to the test binary's life through their stdin (they stop at its end).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
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
    _child: Child,
    _stdin: ChildStdin,
}

/// Why a local broker did not come up; each names the broker, and says how to install it or
/// what it printed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("cannot start {name} ({error}); run `cargo xtask brokers install {transport}` first")]
    Spawn { name: &'static str, transport: &'static str, error: std::io::Error },
    #[error("{name} did not report ready within {ceiling:?}; its output:\n{}", .output.join("\n"))]
    NotReady { name: &'static str, ceiling: Duration, output: Vec<String> },
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
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
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
    Ok(LocalProcess { name, port, _child: child, _stdin: stdin })
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
}
