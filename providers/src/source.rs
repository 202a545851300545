//! Where a transport's broker comes from. The one place the choice is made: every transport's
//! `broker()` describes its broker as a [`Definition`] and calls [`start`].
//!
//! `CONFORMANCE_BROKERS` (set by `cargo xtask conformance --brokers` and `cargo xtask test`, or by
//! hand for plain `cargo test`) picks the source:
//! - `env`: the endpoint in the transport's variable (`AWS_ENDPOINT_URL`, `PUBSUB_EMULATOR_HOST`,
//!   `NAMESRV_ADDR`, `REDIS_URL`); the run stops when it is unset.
//! - `containers`: the transport's image through testcontainers (feature `containers`), pulled by
//!   the engine when missing; the run stops when no daemon answers or the container fails.
//! - `local`: a local process installed by `cargo xtask brokers install <transport>`.
//! - `auto` (unset or empty): `env` when the variable is set; else `containers` when the feature
//!   is built, a daemon answers and the image is already present in the engine (auto never
//!   pulls, so a machine with Docker but without the image behaves as before); else `local`.
//!
//! A source that cannot give a broker stops the test binary at once (see [`fatal`](crate::broker::fatal)): it then ends
//! without libtest's summary, and `cargo xtask conformance` refuses to touch the ledger.

use std::time::{Duration, Instant};

use contract::{BrokerLine, BrokerSource};

#[cfg(feature = "containers")]
use crate::broker::BrokerContainer;
use crate::broker::{announce, fatal, ImageRef};
#[cfg(feature = "containers")]
use crate::containers::{ContainerError, Unusable};
use crate::fault::Fault;
use crate::local::{LocalError, LocalProcess};

/// The variable that picks the source (the contract's).
pub const VARIABLE: &str = BrokerSource::VARIABLE;

/// Why the chosen source gives no broker: [`start`] stops the binary with it.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(
        "{}=env but {variable} is unset; set it to the broker's endpoint, or choose another source (valid choices: {})",
        VARIABLE,
        BrokerSource::NAMES.join(", ")
    )]
    EnvUnset { variable: &'static str },
    #[error("{}=containers but {transport} has no container definition; choose env or local", VARIABLE)]
    NoContainerDefinition { transport: &'static str },
    #[error(
        "{}=containers but providers was built without its feature `containers`; build with --features providers/containers, or choose env or local",
        VARIABLE
    )]
    ContainersNotBuilt,
    #[cfg(feature = "containers")]
    #[error(transparent)]
    Container(#[from] ContainerError),
    #[error(
        "CONFORMANCE_FAULT=kill-broker needs a broker this binary started (containers or local), not one from env"
    )]
    KillBrokerNeedsItsOwnBroker,
    #[error(transparent)]
    Local(#[from] LocalError),
    #[error("the broker from {from} at {endpoint} does not answer: {cause}")]
    Unreachable { from: &'static str, endpoint: String, cause: String },
}

/// Why `auto` did not use containers, said in the run's source line (then a local process runs).
#[derive(Debug, thiserror::Error)]
pub enum AutoDeclined {
    #[error("{transport} has no container definition")]
    NoContainerDefinition { transport: &'static str },
    #[error("providers was built without feature `containers`")]
    NotBuilt,
    #[cfg(feature = "containers")]
    #[error(transparent)]
    Unusable(#[from] Unusable),
}

/// Starts a transport's broker container from its image.
#[cfg(feature = "containers")]
pub type StartContainer = fn(&ImageRef) -> Result<BrokerContainer, ContainerError>;

/// One transport's broker, in each of the three sources.
pub struct Definition {
    pub transport: &'static str,
    /// The variable holding an endpoint from the environment.
    pub endpoint_variable: &'static str,
    /// The container image (pinned, overridable).
    pub image: ImageRef,
    /// Starts the container (`None`: the transport has no container definition); only built
    /// with feature `containers`.
    #[cfg(feature = "containers")]
    pub container: Option<StartContainer>,
    /// Starts the local process.
    pub local: fn() -> Result<LocalProcess, LocalError>,
}

/// `transport`'s endpoint variable and its image (the default, or what its variable names), from
/// its facts (`providers/brokers/<folder>/broker.toml`, read through `contract::brokers`).
pub fn facts(transport: &'static str) -> (&'static str, ImageRef) {
    let broker = contract::brokers::of(transport)
        .unwrap_or_else(|| panic!("no providers/brokers/*/broker.toml names the transport {transport}"));
    let image = ImageRef::from_environment(transport, &broker.image.variable, &broker.image.default);
    (&broker.endpoint_variable, image)
}

/// A broker that is up: where it is, and what keeps it alive for the binary's life.
pub enum Running {
    /// The value of the endpoint variable, as given.
    Env(String),
    #[cfg(feature = "containers")]
    Container(BrokerContainer),
    Local(LocalProcess),
}

impl Running {
    /// The source it came from: env, containers or local.
    pub fn source(&self) -> &'static str {
        match self {
            Running::Env(_) => "env",
            #[cfg(feature = "containers")]
            Running::Container(_) => "containers",
            Running::Local(_) => "local",
        }
    }

    /// `host:port` of a broker this binary started (none for `Env`).
    pub fn loopback_address(&self) -> Option<String> {
        match self {
            Running::Env(_) => None,
            #[cfg(feature = "containers")]
            Running::Container(container) => Some(format!("127.0.0.1:{}", container.port)),
            Running::Local(process) => Some(format!("127.0.0.1:{}", process.port)),
        }
    }

    /// Where clients reach the broker: the endpoint variable's value as given, or `client_url`
    /// of the loopback address of a broker this binary started.
    pub fn endpoint(&self, client_url: impl FnOnce(&str) -> String) -> String {
        match (self, self.loopback_address()) {
            (Running::Env(value), _) => value.clone(),
            (_, Some(address)) => client_url(&address),
            (_, None) => unreachable!("a started broker has a loopback address"),
        }
    }
}

/// Stops the binary if the environment names an implementation of `reference`'s transport other
/// than the reference and the broker did not come from the local source: only the local source
/// runs the chosen implementation, and a verdict from another source must not be recorded under
/// its name.
pub fn refuse_another_implementation_unless_local(running: &Running, reference: contract::Implementation) {
    let implementation = crate::broker::implementation(reference);
    if implementation != reference && running.source() != "local" {
        let why = format!(
            "{}={} needs the local source (CONFORMANCE_BROKERS=local), but the broker came from {}",
            reference.variable(),
            implementation.name(),
            running.source()
        );
        fatal(reference.transport(), &why);
    }
}

/// Resolves the source for `definition`, starts the broker and says on stderr which source it
/// came from (one line per transport and binary, e.g. `gcp: broker from local (pstest …)`).
/// A source that gives no broker stops the binary (a [`SourceError`] in a [`fatal`] line).
pub fn start(definition: &Definition) -> Running {
    let transport = definition.transport;
    let endpoint = std::env::var(definition.endpoint_variable).ok().filter(|v| !v.is_empty());
    let choice = BrokerSource::from_environment().unwrap_or_else(|error| fatal(transport, &error));
    crate::peer::record_variable(transport, definition.endpoint_variable);
    let started = Instant::now();
    let (running, served) = resolve(definition, choice, endpoint).unwrap_or_else(|error| fatal(transport, &error));
    let source = running.source();
    if Fault::from_environment() == Some(Fault::KillBroker) {
        match &running {
            Running::Env(_) => fatal(transport, &SourceError::KillBrokerNeedsItsOwnBroker),
            // A local broker is killed here; a container by `containers`, which started it.
            Running::Local(process) => kill_soon(process.pid),
            #[cfg(feature = "containers")]
            Running::Container(_) => {}
        }
    }
    let line = BrokerLine {
        transport: transport.to_owned(),
        source: source.to_owned(),
        implementation: served.implementation,
        endpoint: served.endpoint,
        ready_seconds: started.elapsed().as_secs_f64(),
        note: served.note,
    };
    announce(&line.sentence());
    announce(&line.line());
    running
}

/// What served, for the run's [`BrokerLine`].
struct Served {
    implementation: String,
    endpoint: String,
    note: Option<String>,
}

/// The broker from the chosen source, and what served.
fn resolve(
    definition: &Definition,
    choice: BrokerSource,
    endpoint: Option<String>,
) -> Result<(Running, Served), SourceError> {
    match (choice, endpoint) {
        (BrokerSource::Env | BrokerSource::Auto, Some(endpoint)) => {
            // Named by its variable only: the value may carry credentials.
            let variable = definition.endpoint_variable.to_owned();
            let served = Served { implementation: variable.clone(), endpoint: variable, note: None };
            Ok((Running::Env(endpoint), served))
        }
        (BrokerSource::Env, None) => Err(SourceError::EnvUnset { variable: definition.endpoint_variable }),
        (BrokerSource::Containers, _) => start_container(definition),
        (BrokerSource::Local, _) => start_local(definition, None),
        (BrokerSource::Auto, None) => match containers_usable(definition) {
            Ok(()) => start_container(definition),
            Err(why) => start_local(definition, Some(why)),
        },
    }
}

/// How many times a local broker that exits while starting is started, each on fresh ports.
const LOCAL_STARTS: u32 = 3;

/// A local process that does not come up panics (naming it and the install command). One that
/// exits while starting is started again on fresh ports, up to [`LOCAL_STARTS`] times: its ports
/// are picked free, but another process may bind one before it does (it then says so on stderr,
/// as the `Address already in use` of its bind), and each retry is printed.
fn start_local(definition: &Definition, auto_declined: Option<AutoDeclined>) -> Result<(Running, Served), SourceError> {
    let mut attempt = 1;
    let process = loop {
        match (definition.local)() {
            Err(error @ crate::local::LocalError::ExitedStarting { .. }) if attempt < LOCAL_STARTS => {
                eprintln!(
                    "{}: {error}\nstarting it again on other ports ({} of {LOCAL_STARTS})",
                    definition.transport,
                    attempt + 1
                );
                attempt += 1;
            }
            result => break result?,
        }
    };
    let served = Served {
        implementation: process.name.to_string(),
        endpoint: format!("127.0.0.1:{}", process.port),
        note: auto_declined.map(|why| format!("auto did not use containers: {why}")),
    };
    Ok((Running::Local(process), served))
}

/// The `kill-broker` fault on a local broker: SIGKILL 250 ms after it is up, while cells run.
fn kill_soon(pid: u32) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(250));
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    });
}

/// How long the first call to a broker may take before it counts as unanswered.
pub const PROBE_CEILING: Duration = Duration::from_secs(15);

/// Makes `probe`, a first call to the broker just started (typically its connection), on a
/// plain thread (the caller may be on a runtime) within [`PROBE_CEILING`], and returns what it
/// made. A broker that does not answer stops the binary once (a [`fatal`] line naming the
/// transport, the source, the endpoint and the cause): an outage is never written down as a
/// regression in every cell.
pub fn require_answer<T: Send + 'static, E: std::fmt::Display>(
    transport: &str,
    running: &Running,
    endpoint: &str,
    probe: impl std::future::Future<Output = Result<T, E>> + Send + 'static,
) -> T {
    let answer = std::thread::spawn(move || {
        gateway::GatewayRuntime::shared().block_on(async {
            match tokio::time::timeout(PROBE_CEILING, probe).await {
                Ok(result) => result.map_err(|error| error.to_string()),
                Err(_) => Err(format!("no answer within {} s", PROBE_CEILING.as_secs())),
            }
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the probe panicked".to_owned()));
    let answered = answer.unwrap_or_else(|cause| {
        let endpoint = gateway::endpoint::without_credentials(endpoint);
        let error = SourceError::Unreachable { from: running.source(), endpoint, cause };
        fatal(transport, &error)
    });
    crate::peer::record_endpoint(transport, endpoint);
    answered
}

#[cfg(feature = "containers")]
fn start_container(definition: &Definition) -> Result<(Running, Served), SourceError> {
    let start = definition.container.ok_or(SourceError::NoContainerDefinition { transport: definition.transport })?;
    let container = start(&definition.image)?;
    let served = Served {
        implementation: definition.image.to_string(),
        endpoint: format!("container {} on 127.0.0.1:{}", container.short_id(), container.port),
        note: None,
    };
    Ok((Running::Container(container), served))
}

#[cfg(not(feature = "containers"))]
fn start_container(_: &Definition) -> Result<(Running, Served), SourceError> {
    Err(SourceError::ContainersNotBuilt)
}

#[cfg(feature = "containers")]
fn containers_usable(definition: &Definition) -> Result<(), AutoDeclined> {
    match definition.container {
        Some(_) => Ok(crate::containers::usable(&definition.image)?),
        None => Err(AutoDeclined::NoContainerDefinition { transport: definition.transport }),
    }
}

#[cfg(not(feature = "containers"))]
fn containers_usable(_: &Definition) -> Result<(), AutoDeclined> {
    Err(AutoDeclined::NotBuilt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker that exits while starting on its first two starts (as one whose port another
    /// process bound first), then comes up.
    fn exits_twice_then_starts() -> Result<LocalProcess, LocalError> {
        static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let mut command = std::process::Command::new("sh");
        match STARTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 | 1 => command.args(["-c", "echo java.net.BindException: Address already in use; exit 255"]),
            _ => command.args(["-c", "echo ready; exec cat >/dev/null"]),
        };
        crate::local::start("fake", "fake", command, 1, "ready", Duration::from_secs(10))
    }

    fn exits_always() -> Result<LocalProcess, LocalError> {
        let mut command = std::process::Command::new("sh");
        command.args(["-c", "echo misconfigured; exit 1"]);
        crate::local::start("fake", "fake", command, 1, "ready", Duration::from_secs(10))
    }

    fn fake(local: fn() -> Result<LocalProcess, LocalError>) -> Definition {
        Definition {
            transport: "fake",
            endpoint_variable: "FAKE_ENDPOINT",
            image: ImageRef { name: "fake".into(), tag: "1".into(), variable: "FAKE_IMAGE" },
            #[cfg(feature = "containers")]
            container: None,
            local,
        }
    }

    #[test]
    fn a_local_broker_that_exits_while_starting_is_started_again_up_to_three_times() {
        let (running, served) = start_local(&fake(exits_twice_then_starts), None).expect("up on the third start");
        assert_eq!(served.implementation, "fake");
        // Never stopped: a local broker that ends while its binary runs stops the binary (the
        // watch `local::start` keeps), and this one runs beside the other tests.
        std::mem::forget(running);
        let error = start_local(&fake(exits_always), None).err().expect("three exits are an error").to_string();
        assert!(error.contains("fake exited (exit status: 1) before it was ready"), "{error}");
    }

    #[test]
    fn a_source_error_names_the_variable_and_the_valid_choices() {
        assert_eq!(
            SourceError::EnvUnset { variable: "NAMESRV_ADDR" }.to_string(),
            "CONFORMANCE_BROKERS=env but NAMESRV_ADDR is unset; set it to the broker's endpoint, or choose another \
             source (valid choices: auto, env, containers, local)"
        );
        assert_eq!(
            SourceError::NoContainerDefinition { transport: "rocketmq" }.to_string(),
            "CONFORMANCE_BROKERS=containers but rocketmq has no container definition; choose env or local"
        );
    }
}
