//! Brokers run as local processes: started on a free loopback port, awaited until they say they
//! are ready, and tied to the test binary's life through their stdin (they stop at its end). A
//! broker that exits while the binary still runs stops the binary once, with its last lines.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// A broker version from the Debian 13 root (`.brokers/trixie`, made by `cargo xtask brokers
/// install <transport> --impl <name>`): `launcher` (a script under `providers/brokers`, copied
/// into the root as it is in the tree now) run there by bash through
/// `providers/brokers/trixie/in-root.sh`; the caller adds the launcher's arguments, paths inside
/// the root. The root shares the host's network: the broker listens on the host's loopback.
/// `binary`, a path inside the root, must be there (else `NotInstalled`, naming `install`).
pub fn in_trixie(
    name: &'static str,
    binary: &str,
    launcher: &str,
    install: &'static str,
) -> Result<Command, LocalError> {
    let root = workspace_root().join(".brokers/trixie");
    let installed = root.join(binary.trim_start_matches('/'));
    if !installed.exists() {
        return Err(LocalError::NotInstalled { name, missing: installed, install });
    }
    let file = Path::new(launcher).file_name().expect("a launcher is a file");
    let inside = Path::new("launchers").join(name).join(file);
    std::fs::create_dir_all(root.join(&inside).parent().expect("a folder"))
        .and_then(|()| std::fs::copy(workspace_root().join("providers/brokers").join(launcher), root.join(&inside)))
        .map_err(|error| LocalError::Spawn { name, transport: "trixie", error })?;
    let mut command = Command::new(workspace_root().join("providers/brokers/trixie/in-root.sh"));
    command.arg(&root).arg("bash").arg(Path::new("/").join(inside));
    Ok(command)
}

/// One free loopback port; a broker that needs several picks them with one [`FreePorts`].
pub fn free_loopback_port() -> u16 {
    FreePorts::default().pick(&[])
}

/// Free loopback ports that are also distinct, and outside the kernel's ephemeral range. Each
/// picked port stays bound until this value is dropped (just before the broker that needs them
/// starts), so no pick can return a port an earlier one took: released between picks, the kernel
/// handed one out again (a RocketMQ broker was given its own name server's port, CI, run folder
/// 32923). And the kernel gives an outgoing connection a port of its ephemeral range, so a port
/// picked there can be taken by any connection in the seconds before the broker binds it: with
/// the transports' binaries running at once, RocketMQ's HA port was (`BindException` in
/// `DefaultHAService`). Below that range only an explicit bind takes a port.
#[derive(Default)]
pub struct FreePorts {
    held: Vec<TcpListener>,
}

impl FreePorts {
    /// The lowest port picked: above the registered ports services commonly use.
    const FLOOR: u16 = 12_000;

    /// A free port `p` whose `p + offset` is free too for every offset in `neighbours` (ports a
    /// broker derives from the one it is given); all of them are held from here on.
    pub fn pick(&mut self, neighbours: &[i32]) -> u16 {
        let ceiling = ephemeral_floor().max(Self::FLOOR + 1_000);
        let bind = |port: i32| u16::try_from(port).ok().and_then(|port| TcpListener::bind(("127.0.0.1", port)).ok());
        loop {
            let candidate = i32::from(Self::FLOOR) + (random() % u64::from(ceiling - Self::FLOOR)) as i32;
            let Some(listener) = bind(candidate) else { continue };
            let around: Option<Vec<TcpListener>> = neighbours.iter().map(|offset| bind(candidate + offset)).collect();
            if let Some(around) = around {
                self.held.push(listener);
                self.held.extend(around);
                return candidate as u16;
            }
        }
    }
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`; Linux's default 32768).
fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A random number from std's per-process random hash keys (no random crate for one use).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

/// A running broker process. Dropping it (a shared broker: at process exit) closes its stdin,
/// which stops it.
pub struct LocalProcess {
    pub name: &'static str,
    pub port: u16,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    /// Set once the process is asked to stop: its exit is then no outage.
    stopping: Arc<AtomicBool>,
    /// Receives once the process has exited, if it was asked to.
    exited: Mutex<mpsc::Receiver<()>>,
}

impl LocalProcess {
    /// Stops the broker as the binary's end does (its stdin closes; each launcher then stops its
    /// server) and waits up to `ceiling` for the process to exit: a broker restarted by a test
    /// between two deliveries.
    pub fn stop(mut self, ceiling: Duration) -> Result<(), LocalError> {
        self.ask_to_stop();
        let exited = self.exited.lock().unwrap_or_else(|p| p.into_inner()).recv_timeout(ceiling);
        exited.map_err(|_| LocalError::NotStopped { name: self.name, ceiling })
    }

    fn ask_to_stop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        drop(self.stdin.take());
    }
}

impl Drop for LocalProcess {
    fn drop(&mut self) {
        self.ask_to_stop();
    }
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
    #[error("{name} did not report ready within {ceiling:?}; its last lines:\n{}", .last.join("\n"))]
    NotReady { name: &'static str, ceiling: Duration, last: Vec<String> },
    #[error("{name} exited ({status}) before it was ready; its last lines:\n{}", .last.join("\n"))]
    ExitedStarting { name: &'static str, status: String, last: Vec<String> },
    #[error("{name} did not exit within {ceiling:?} of being asked to stop")]
    NotStopped { name: &'static str, ceiling: Duration },
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
    let last_lines =
        |last: &Mutex<VecDeque<String>>| last.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
    let deadline = std::time::Instant::now() + ceiling;
    loop {
        match received.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok(line) if line.starts_with(ready) => break,
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(LocalError::NotReady { name, ceiling, last: last_lines(&last) });
            }
            // Its stdout closed before the ready line: it exited while starting (a port taken,
            // a bad configuration); its status and last lines say which, never a time-out.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
                return Err(LocalError::ExitedStarting { name, status, last: last_lines(&last) });
            }
        }
    }
    let stdin = child.stdin.take().expect("piped");
    let pid = child.id();
    let (stopping, (exit_sender, exited)) = (Arc::new(AtomicBool::new(false)), mpsc::channel());
    let asked = stopping.clone();
    // The broker ends with the binary (its stdin closes); ending before, unasked, it is an outage.
    std::thread::spawn(move || {
        let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
        if asked.load(Ordering::SeqCst) {
            let _ = exit_sender.send(());
            return;
        }
        std::thread::sleep(Duration::from_millis(100)); // its last lines reach the reader
        crate::broker::fatal(transport, &LocalError::Died { name, status, last: last_lines(&last) });
    });
    Ok(LocalProcess { name, port, pid, stdin: Some(stdin), stopping, exited: Mutex::new(exited) })
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
    fn picked_ports_are_distinct_and_held_with_their_neighbours_until_dropped() {
        let mut ports = FreePorts::default();
        let picked: Vec<u16> = (0..50).map(|_| ports.pick(&[])).collect();
        let mut distinct = picked.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), picked.len(), "{picked:?}");
        assert!(picked.iter().all(|p| (FreePorts::FLOOR..ephemeral_floor()).contains(p)), "{picked:?}");
        let broker = ports.pick(&[-2, 1]);
        for port in [broker - 2, broker, broker + 1] {
            assert!(TcpListener::bind(("127.0.0.1", port)).is_err(), "{port} is held");
        }
        drop(ports);
        assert!(TcpListener::bind(("127.0.0.1", broker - 2)).is_ok(), "released with the picker");
    }

    #[test]
    fn a_broker_asked_to_stop_exits_and_is_no_outage() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo ready; cat > /dev/null"]);
        let process = start("redis", "redis", command, 1, "ready", Duration::from_secs(30)).expect("starts");
        // The watcher reports the exit only where it took it as asked for (an outage stops the
        // binary instead), so an Ok here is both.
        process.stop(Duration::from_secs(30)).expect("exits once its stdin closes");
    }

    #[test]
    fn a_broker_that_exits_while_starting_says_so_with_its_status_and_last_lines() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo loading; echo bind failed; exit 3"]);
        let error = start("rocketmq", "rocketmq", command, 1, "ready", Duration::from_secs(30)).err().expect("exits");
        assert_eq!(
            error.to_string(),
            "rocketmq exited (exit status: 3) before it was ready; its last lines:\nloading\nbind failed"
        );
    }

    #[test]
    fn a_broker_that_never_says_ready_is_reported_at_the_ceiling_with_its_last_lines() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo loading; exec sleep 5"]);
        let error = start("kafka", "kafka", command, 1, "ready", Duration::from_millis(300)).err().expect("times out");
        assert_eq!(error.to_string(), "kafka did not report ready within 300ms; its last lines:\nloading");
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
