//! The facts about each transport's broker, written once as data beside its launcher
//! (`providers/brokers/<folder>/broker.toml`) and read by both sides: the test binaries take the
//! endpoint variable and the image from here, xtask the install recipe, the stand-in's build
//! (with the Dockerfile beside the file), the version run records name, and docs/BROKERS.md's
//! table. A new transport adds its folder and one line to [`SOURCES`].

use std::sync::OnceLock;

use serde::Deserialize;

/// Each broker's facts, as `(folder under providers/brokers, the file's text)`.
const SOURCES: [(&str, &str); 10] = [
    ("sqs", include_str!("../../providers/brokers/sqs/broker.toml")),
    ("gcp", include_str!("../../providers/brokers/gcp/broker.toml")),
    ("rocketmq", include_str!("../../providers/brokers/rocketmq/broker.toml")),
    ("postgres", include_str!("../../providers/brokers/postgres/broker.toml")),
    ("mqtt", include_str!("../../providers/brokers/mqtt/broker.toml")),
    ("redis", include_str!("../../providers/brokers/redis/broker.toml")),
    ("rabbitmq", include_str!("../../providers/brokers/rabbitmq/broker.toml")),
    ("kafka", include_str!("../../providers/brokers/kafka/broker.toml")),
    ("nats", include_str!("../../providers/brokers/nats/broker.toml")),
    ("azure", include_str!("../../providers/brokers/azure/broker.toml")),
];

/// One transport's broker.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Broker {
    /// Its folder under `providers/brokers` (where the file and the Dockerfile are).
    #[serde(skip)]
    pub folder: &'static str,
    pub transport: String,
    /// The reference broker at the version the ledger holds for, as run records name it.
    pub version: String,
    /// The line of a file under `providers/brokers` that pins [`Broker::version`] for the tool
    /// that fetches it (a pom, a go.mod, a requirements file); none where Debian's package is the pin.
    pub pin: Option<Pin>,
    /// Where `--brokers env` finds a broker that is already running.
    pub endpoint_variable: String,
    /// What docs/BROKERS.md says of it.
    pub about: About,
    pub install: Install,
    pub image: Image,
    /// Other implementations fidelity runs compare with the reference (`--impl`).
    #[serde(default)]
    pub implementations: Vec<OtherImplementation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    pub file: String,
    pub line: String,
}

/// The three columns of docs/BROKERS.md's table after the transport.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct About {
    pub configurations: String,
    pub local: String,
    pub container: String,
}

/// How `cargo xtask brokers install` puts the local broker under `.brokers/`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Install {
    /// moto in a project-owned virtualenv, from `providers/brokers/sqs/requirements.txt`.
    Moto,
    /// The Pub/Sub fake behind the project's Go launcher (`providers/brokers/pstest`).
    Pstest,
    /// Debian's `package`, of which `binary` is all the launcher uses; `system_user` is made
    /// when missing (a server that refuses to run as root runs as it).
    Debian { package: String, binary: String, system_user: Option<String> },
    /// The jars `source`/pom.xml pins and the launcher class compiled against them, into `into`.
    Maven { name: String, source: String, into: String, launcher: String },
    /// `module`'s command at `version`, built static by `go install` from the Go module proxy
    /// into `into` (the recipe is the pin).
    Go { module: String, version: String, into: String },
    /// The npm packages `source`/package-lock.json pins, installed by `npm ci` into `into`.
    Npm { source: String, into: String },
}

/// The broker's container image and the stand-in `cargo xtask brokers images` builds for it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Image {
    /// The image the container source starts unless [`Image::variable`] names another (`name:tag`).
    pub default: String,
    pub variable: String,
    /// A `localhost/` name, so no engine ever pulls a look-alike from a public registry.
    pub stand_in: String,
    pub build: StandInBuild,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandInBuild {
    /// `debian` (the project's debootstrapped base) or `scratch`.
    pub base: Base,
    /// Whether the local broker is installed first (the context takes files it installs).
    #[serde(default)]
    pub install_first: bool,
    /// What the build context holds, as paths from the workspace root (copied by name).
    pub context: Vec<String>,
    /// Whether the host's CA bundle goes in as `host-ca.crt` (pip in the build trusts it).
    #[serde(default)]
    pub host_ca: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Base {
    Debian,
    Scratch,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtherImplementation {
    pub name: String,
    pub version: String,
    pub pin: Option<Pin>,
}

/// Every broker's facts, in the order of [`SOURCES`]; a file that does not parse stops at once,
/// naming it (it is part of the source tree: the facts tests catch it first).
pub fn all() -> &'static [Broker] {
    static BROKERS: OnceLock<Vec<Broker>> = OnceLock::new();
    BROKERS.get_or_init(|| {
        SOURCES
            .iter()
            .map(|(folder, text)| {
                let mut broker: Broker =
                    toml::from_str(text).unwrap_or_else(|e| panic!("providers/brokers/{folder}/broker.toml: {e}"));
                broker.folder = folder;
                broker
            })
            .collect()
    })
}

/// `transport`'s broker; none for a transport without one (memory).
pub fn of(transport: &str) -> Option<&'static Broker> {
    all().iter().find(|broker| broker.transport == transport)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_parses_and_names_a_transport_once() {
        let transports: Vec<&str> = all().iter().map(|b| b.transport.as_str()).collect();
        let mut unique = transports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), transports.len(), "{transports:?}");
        assert!(of("postgres").is_some_and(|b| b.endpoint_variable == "DATABASE_URL"));
        assert!(of("memory").is_none());
    }

    #[test]
    fn every_stand_in_is_a_localhost_image() {
        for broker in all() {
            assert!(broker.image.stand_in.starts_with("localhost/conformance-"), "{}", broker.transport);
        }
    }
}
