//! Brokers in containers through testcontainers (feature `containers`): what every transport's
//! container definition (its `container` function, in the transport's own module) starts
//! through ([`start`]), the loopback-only port mapping, the check `auto` makes, a watchdog that
//! stops the test binary when its broker container dies, and the exit hook that removes every
//! container this binary started.
//!
//! Why not testcontainers' own drop: a provider's broker lives in a static for the binary's life,
//! and a static is never dropped; so each container is handed to [`exit_hook`], which removes it
//! by id when the process exits (normally, or through `std::process::exit`). A binary killed with
//! SIGKILL cannot run it: its container stays, labelled `org.testcontainers.managed-by=testcontainers`
//! (`.ci/run` fails when one is left).
//!
//! Every container call runs on the gateway's runtime, which lives as long as the process; the
//! exit hook alone uses a fresh client on a fresh thread, because it may run on any thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use futures_util::StreamExt;
use testcontainers_modules::testcontainers::bollard::errors::Error as BollardError;
use testcontainers_modules::testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers_modules::testcontainers::bollard::query_parameters::{
    KillContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers_modules::testcontainers::bollard::Docker;
use testcontainers_modules::testcontainers::core::client::docker_client_instance;
use testcontainers_modules::testcontainers::core::error::{ClientError, TestcontainersError};
use testcontainers_modules::testcontainers::core::ContainerPort;
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::{ContainerAsync, Image, ImageExt};

use crate::broker::{announce, fatal, BrokerContainer, ImageRef};
use crate::fault::Fault;

/// How long `auto` waits for a daemon to answer before it falls back to a local process.
const DAEMON_CEILING: Duration = Duration::from_secs(3);
/// How long a broker container may take from create to its ready line.
const STARTUP_CEILING: Duration = Duration::from_secs(120);

/// Why `auto` may not use containers, said in the run's source line.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("no Docker client: {0}")]
    NoClient(ClientError),
    #[error("no Docker daemon answered ({0})")]
    NoDaemon(BollardError),
    #[error("no Docker daemon answered within {0:?}")]
    NoAnswer(Duration),
    #[error("image {image} is not in the engine ({})", pull_hint(.image, .stand_in))]
    ImageMissing { image: ImageRef, stand_in: Option<&'static str> },
}

/// Why a broker container gives no broker; each names the container and its image or id.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error(
        "the {name} (image {image}) did not start: {error}; is a Docker daemon running, and is the image \
         present or pullable? Set {} to a mirror{}",
        .image.variable,
        start_hint(.image, .stand_in)
    )]
    DidNotStart { name: &'static str, image: ImageRef, stand_in: Option<&'static str>, error: Box<TestcontainersError> },
    #[error("the {name} {id} has no port mapped for {port}: {error}")]
    NoPort { name: &'static str, id: String, port: u16, error: Box<TestcontainersError> },
    #[error("the {name} {short_id} (image {image}) died mid-run ({how}); stopping so no cell is recorded")]
    Died { name: &'static str, short_id: String, image: ImageRef, how: Death },
}

/// How a broker container stopped, as the engine tells it.
#[derive(Debug, thiserror::Error)]
pub enum Death {
    #[error("exit code {0}")]
    Exited(i64),
    #[error("the engine stopped answering: {0}")]
    EngineStopped(Box<BollardError>),
    #[error("the engine ended its wait")]
    WaitEnded,
}

/// What to do about a missing image: pull it, or build its stand-in (and name it).
fn pull_hint(image: &ImageRef, stand_in: &Option<&'static str>) -> String {
    match stand_in {
        Some(name) if image.to_string() == *name => format!("build it with {BUILD_STAND_INS}"),
        Some(name) => {
            format!("pull it, or build the stand-in {name} with {BUILD_STAND_INS} and set {} to it", image.variable)
        }
        None => "pull it".to_owned(),
    }
}

/// What else the image variable may name, after "a mirror".
fn start_hint(image: &ImageRef, stand_in: &Option<&'static str>) -> String {
    match stand_in {
        Some(name) if image.to_string() == *name => format!(", or build it with {BUILD_STAND_INS}"),
        Some(name) => format!(" or to the stand-in {name}, which {BUILD_STAND_INS} builds"),
        None => String::new(),
    }
}

/// Runs `future` on the gateway's runtime from a plain thread, so callers on or off a runtime
/// (async tests, Reactor threads) may all start a broker.
pub(crate) fn on_runtime<T: Send + 'static>(future: impl std::future::Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || gateway::blocking::runtime().block_on(future)).join().expect("a container call panicked")
}

/// Whether `auto` may use containers: a daemon answers within 3 s and `image` is present in the
/// engine (auto never pulls). The error says why not, for the run's source line.
pub fn usable(image: &ImageRef) -> Result<(), Unusable> {
    let image = image.clone();
    on_runtime(async move {
        let check = async {
            let docker = docker_client_instance().await.map_err(Unusable::NoClient)?;
            docker.ping().await.map_err(Unusable::NoDaemon)?;
            match docker.inspect_image(&image.to_string()).await {
                Ok(_) => Ok(()),
                Err(_) => Err(Unusable::ImageMissing { stand_in: stand_in(&image), image }),
            }
        };
        tokio::time::timeout(DAEMON_CEILING, check).await.unwrap_or(Err(Unusable::NoAnswer(DAEMON_CEILING)))
    })
}

/// The command that builds every stand-in.
const BUILD_STAND_INS: &str = "`cargo xtask brokers images`";

/// The stand-in for `image`: every transport's broker has one (its facts' `stand_in`, the image
/// `cargo xtask brokers images` builds). By the variable, not the image: whatever it names (the
/// upstream image, a mirror), its stand-in is the one `brokers images` builds.
fn stand_in(image: &ImageRef) -> Option<&'static str> {
    contract::brokers::all().iter().find(|b| b.image.variable == image.variable).map(|b| b.image.stand_in.as_str())
}

/// Publishes `ports` on 127.0.0.1 only, on ports the engine picks: like a local process, a broker
/// container is never reachable from outside the machine (testcontainers alone binds every interface).
fn loopback_only(ports: &'static [u16]) -> impl Fn(&mut HostConfig) + Send + Sync + 'static {
    move |host_config: &mut HostConfig| {
        let loopback = || Some(vec![PortBinding { host_ip: Some("127.0.0.1".into()), host_port: Some(String::new()) }]);
        host_config.publish_all_ports = Some(false);
        host_config.port_bindings =
            Some(ports.iter().map(|port| (format!("{port}/tcp"), loopback())).collect::<HashMap<_, _>>());
    }
}

/// How a broker container's port reaches the test binary.
pub(crate) enum Reach {
    /// Published on 127.0.0.1, on host ports the engine picks; the first is the broker's address.
    Published(&'static [u16]),
    /// The container shares the host's network and binds this loopback port itself (RocketMQ's).
    #[cfg_attr(not(feature = "rocketmq"), allow(dead_code))]
    HostNetwork(u16),
}

/// Starts `image` (already named and tagged), waits for its ready condition, and hands it to the
/// exit hook and the watchdog.
pub(crate) async fn start<I: Image + 'static>(
    transport: &'static str,
    name: &'static str,
    request: impl Into<testcontainers_modules::testcontainers::ContainerRequest<I>>,
    reference: &ImageRef,
    reach: Reach,
) -> Result<BrokerContainer, ContainerError> {
    let request = match reach {
        Reach::Published(ports) => request.into().with_host_config_modifier(loopback_only(ports)),
        Reach::HostNetwork(_) => request.into().with_network("host"),
    };
    let request = request.with_startup_timeout(STARTUP_CEILING);
    let container: ContainerAsync<I> = request.start().await.map_err(|error| ContainerError::DidNotStart {
        name,
        image: reference.clone(),
        stand_in: stand_in(reference),
        error: Box::new(error),
    })?;
    let id = container.id().to_owned();
    exit_hook::register(&id);
    // From here the exit hook owns its removal: forgetting the handle skips testcontainers' drop,
    // which would need a runtime at a moment process exit does not offer.
    let port = match reach {
        Reach::Published(ports) => {
            container.get_host_port_ipv4(ContainerPort::Tcp(ports[0])).await.map_err(|e| (ports[0], e))
        }
        Reach::HostNetwork(port) => Ok(port),
    };
    std::mem::forget(container);
    let port = match port {
        Ok(port) => port,
        Err((port, error)) => return Err(ContainerError::NoPort { name, id, port, error: Box::new(error) }),
    };
    let broker = BrokerContainer { transport, name, id, port };
    watchdog(&broker, reference);
    if Fault::from_environment() == Some(Fault::KillBroker) {
        kill_soon(&broker);
    }
    Ok(broker)
}

/// Stops the test binary when the broker container stops while the binary still runs: every cell
/// after that would fail for the broker's sake, not the gateway's, and a binary that ends without
/// libtest's summary leaves the ledger untouched.
fn watchdog(broker: &BrokerContainer, image: &ImageRef) {
    let (id, name, transport, image) = (broker.id.clone(), broker.name, broker.transport, image.clone());
    gateway::blocking::runtime().spawn(async move {
        let Ok(docker) = docker_client_instance().await else { return };
        // Yields once, when the container stops for any reason.
        let outcome = docker.wait_container(&id, None).next().await;
        if exit_hook::exiting() {
            return;
        }
        let how = match outcome {
            Some(Ok(response)) => Death::Exited(response.status_code),
            // bollard reports a non-zero exit as an error; SIGKILL is 137.
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Death::Exited(code),
            Some(Err(error)) => Death::EngineStopped(Box::new(error)),
            None => Death::WaitEnded,
        };
        fatal(transport, &ContainerError::Died { name, short_id: id[..12].to_owned(), image, how });
    });
}

/// The `kill-broker` fault: kills the broker container 250 ms after it is up, while the first
/// cells are running.
fn kill_soon(broker: &BrokerContainer) {
    let id = broker.id.clone();
    gateway::blocking::runtime().spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        announce(&format!("fault kill-broker: killing container {}", &id[..12]));
        if let Ok(docker) = docker_client_instance().await {
            let _ =
                docker.kill_container(&id, Some(KillContainerOptionsBuilder::new().signal("SIGKILL").build())).await;
        }
    });
}

mod exit_hook {
    //! Removes, at process exit, every container this binary started.
    use super::*;

    static IDS: Mutex<Vec<String>> = Mutex::new(Vec::new());
    static EXITING: AtomicBool = AtomicBool::new(false);

    pub fn exiting() -> bool {
        EXITING.load(Ordering::SeqCst)
    }

    pub fn register(id: &str) {
        static INSTALL: Once = Once::new();
        // SAFETY: `remove_all` is an `extern "C" fn()` that never unwinds (it catches panics).
        INSTALL.call_once(|| unsafe {
            libc::atexit(remove_all);
        });
        IDS.lock().unwrap_or_else(|e| e.into_inner()).push(id.to_owned());
    }

    extern "C" fn remove_all() {
        EXITING.store(true, Ordering::SeqCst);
        let ids = std::mem::take(&mut *IDS.lock().unwrap_or_else(|e| e.into_inner()));
        // A fresh thread and runtime: this may run on a runtime's worker (a `process::exit` from
        // the watchdog), where blocking on a runtime would panic.
        let removal = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            let docker = Docker::connect_with_defaults().ok()?;
            runtime.block_on(async {
                for id in &ids {
                    let options = RemoveContainerOptionsBuilder::new().force(true).v(true).build();
                    if let Err(error) = docker.remove_container(id, Some(options)).await {
                        announce(&format!("could not remove container {id}: {error}"));
                    }
                }
            });
            Some(())
        });
        let _ = removal.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_says_which_stand_in_to_build_and_how_to_use_it() {
        let missing = |variable, value| {
            let image = ImageRef::parse(variable, value).unwrap();
            Unusable::ImageMissing { stand_in: stand_in(&image), image }.to_string()
        };
        assert_eq!(
            missing("CONFORMANCE_KAFKA_IMAGE", "apache/kafka:3.9.0"),
            "image apache/kafka:3.9.0 is not in the engine (pull it, or build the stand-in \
             localhost/conformance-kafka:3.9.0 with `cargo xtask brokers images` and set CONFORMANCE_KAFKA_IMAGE to it)"
        );
        assert_eq!(
            missing("CONFORMANCE_ROCKETMQ_IMAGE", "localhost/conformance-rocketmq:5.3.3"),
            "image localhost/conformance-rocketmq:5.3.3 is not in the engine (build it with `cargo xtask brokers images`)"
        );
        assert_eq!(missing("CONFORMANCE_OTHER_IMAGE", "other:1"), "image other:1 is not in the engine (pull it)");
    }

    #[test]
    fn a_container_that_does_not_start_names_the_stand_in_its_variable_may_name() {
        let image = ImageRef::parse("CONFORMANCE_REDIS_IMAGE", "redis:7.0.15").unwrap();
        let error = ContainerError::DidNotStart {
            name: "Redis container",
            stand_in: stand_in(&image),
            image,
            error: Box::new(TestcontainersError::other("no such image")),
        };
        assert!(
            error.to_string().ends_with(
                "Set CONFORMANCE_REDIS_IMAGE to a mirror or to the stand-in localhost/conformance-redis:7.0.15, which \
                 `cargo xtask brokers images` builds"
            ),
            "{error}"
        );
    }
}
