//! Where a transport's broker comes from: chosen by `cargo xtask conformance --brokers` (or by
//! hand), resolved inside each test binary by `providers::source`.

/// A broker source, as [`BrokerSource::VARIABLE`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum BrokerSource {
    /// `env` when the transport's endpoint variable is set; else `containers` when a Docker
    /// daemon answers and the image is present (never pulled); else `local`
    Auto,
    /// The endpoint in the transport's variable
    Env,
    /// The transport's image through testcontainers
    Containers,
    /// A local process the project installs (`cargo xtask brokers install`)
    Local,
}

/// A value of [`BrokerSource::VARIABLE`] that names no source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}={value:?} is not a broker source; valid choices: {}", BrokerSource::VARIABLE, BrokerSource::NAMES.join(", "))]
pub struct UnknownSource {
    pub value: String,
}

impl BrokerSource {
    /// The variable xtask sets and every test binary reads.
    pub const VARIABLE: &'static str = "CONFORMANCE_BROKERS";
    pub const NAMES: [&'static str; 4] = ["auto", "env", "containers", "local"];

    /// A value of the variable; unset or empty is `auto`.
    pub fn parse(value: &str) -> Result<BrokerSource, UnknownSource> {
        match value {
            "" | "auto" => Ok(BrokerSource::Auto),
            "env" => Ok(BrokerSource::Env),
            "containers" => Ok(BrokerSource::Containers),
            "local" => Ok(BrokerSource::Local),
            other => Err(UnknownSource { value: other.to_owned() }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BrokerSource::Auto => "auto",
            BrokerSource::Env => "env",
            BrokerSource::Containers => "containers",
            BrokerSource::Local => "local",
        }
    }

    /// The source in the environment; an unknown value is an error naming the valid choices (a
    /// typo must not silently pick another broker).
    pub fn from_environment() -> Result<BrokerSource, UnknownSource> {
        BrokerSource::parse(&std::env::var(BrokerSource::VARIABLE).unwrap_or_default())
    }

    /// Whether a binary may start containers (it then needs providers' `containers` feature).
    pub fn may_use_containers(self) -> bool {
        matches!(self, BrokerSource::Auto | BrokerSource::Containers)
    }

    /// Whether a binary may start a local process (it then needs the local broker installed).
    pub fn may_use_local(self) -> bool {
        matches!(self, BrokerSource::Auto | BrokerSource::Local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_a_bad_one_names_the_valid_choices() {
        for name in BrokerSource::NAMES {
            assert_eq!(BrokerSource::parse(name).unwrap().name(), name);
        }
        assert_eq!(BrokerSource::parse(""), Ok(BrokerSource::Auto));
        assert_eq!(
            BrokerSource::parse("docker").unwrap_err().to_string(),
            "CONFORMANCE_BROKERS=\"docker\" is not a broker source; valid choices: auto, env, containers, local"
        );
    }
}
