//! What a broker source (`source`) and the container starters (`containers`) share, in a leaf
//! module that depends on neither: the pinned, overridable [`ImageRef`], a started
//! [`BrokerContainer`], and how a test binary speaks about its broker ([`announce`]) or stops
//! for it ([`fatal`], with any of the typed errors of `source`, `containers` or this module).

use std::io::Write;

/// An image reference, pinned in the code and overridable by one environment variable
/// (`name:tag`), for mirrors and for engines that cannot pull (see `cargo xtask brokers images`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    pub name: String,
    pub tag: String,
    /// The variable that overrides it, named in every message about the image.
    pub variable: &'static str,
}

impl ImageRef {
    pub fn parse(variable: &'static str, value: &str) -> Result<ImageRef, ImageRefError> {
        // The tag follows the last ':' unless that ':' is a registry's port ("host:5000/name").
        match value.rsplit_once(':') {
            Some((name, tag)) if !name.is_empty() && !tag.is_empty() && !tag.contains('/') => {
                Ok(ImageRef { name: name.to_owned(), tag: tag.to_owned(), variable })
            }
            _ => Err(ImageRefError { variable, value: value.to_owned() }),
        }
    }

    /// `default` (`name:tag`) unless `variable` is set.
    pub fn from_environment(transport: &str, variable: &'static str, default: &str) -> ImageRef {
        let value = std::env::var(variable).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned());
        ImageRef::parse(variable, &value).unwrap_or_else(|error| fatal(transport, &error))
    }
}

/// A value of an image variable that is not `name:tag`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{variable}={value:?} is not an image reference; expected name:tag, e.g. mirror.example/google/cloud-sdk:362.0.0-emulators"
)]
pub struct ImageRefError {
    pub variable: &'static str,
    pub value: String,
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)
    }
}

/// A broker container that is up (feature `containers`). Removed at exit and watched by
/// `containers`; kept alive for the binary's life in `source::Running`.
#[cfg(feature = "containers")]
pub struct BrokerContainer {
    pub transport: &'static str,
    /// The broker's name in messages, e.g. "Pub/Sub emulator container".
    pub name: &'static str,
    pub id: String,
    /// The host port, on 127.0.0.1, mapped to the broker's port.
    pub port: u16,
}

#[cfg(feature = "containers")]
impl BrokerContainer {
    pub fn short_id(&self) -> &str {
        &self.id[..self.id.len().min(12)]
    }
}

/// Writes a line to stderr past libtest's output capture (which takes only `eprint!`), so the
/// run shows it whichever test started the broker.
pub fn announce(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The implementation of `reference`'s transport its variable picks; an unknown value stops the
/// binary naming the valid choices (a typo must not record the reference's verdicts as another's).
pub fn implementation(reference: contract::Implementation) -> contract::Implementation {
    contract::Implementation::from_environment(reference).unwrap_or_else(|error| fatal(reference.transport(), &error))
}

/// Stops the test binary: without a broker no cell can be judged. `cargo xtask conformance` fails
/// before the ledger is touched both when a binary ends without libtest's summary and when it
/// sees this line (a [`contract::FatalLine`]): cells that failed for the broker's sake may finish
/// while the process exits, and must never be recorded.
pub fn fatal(transport: &str, error: &dyn std::fmt::Display) -> ! {
    announce(&contract::FatalLine { transport: transport.to_owned(), message: error.to_string() }.line());
    std::process::exit(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_reference_splits_at_the_tag_not_at_a_registry_port() {
        let image = ImageRef::parse("X", "mirror:5000/google/cloud-sdk:362.0.0-emulators").unwrap();
        assert_eq!((image.name.as_str(), image.tag.as_str()), ("mirror:5000/google/cloud-sdk", "362.0.0-emulators"));
        assert!(ImageRef::parse("X", "mirror:5000/google/cloud-sdk")
            .unwrap_err()
            .to_string()
            .contains("X=\"mirror:5000/google/cloud-sdk\""));
        assert!(ImageRef::parse("X", "cloud-sdk").is_err());
    }
}
