//! Which implementation of a transport's wire protocol a local broker runs. SQS has two: moto,
//! the reference implementation the main ledger is recorded against, and ElasticMQ, run for the
//! fidelity table (`ledger/FIDELITY.md`). RocketMQ has two: Apache RocketMQ (the reference) and
//! rocketmq-rust, the Rust name server and broker of the project whose client the gateway uses.
//! A Pass against one implementation says what that implementation does; running the same cells
//! against a second one shows where the verdict depends on it.
//!
//! `CONFORMANCE_SQS_IMPL` and `CONFORMANCE_ROCKETMQ_IMPL` (set by `cargo xtask conformance
//! --impl`, or by hand) pick them; unset or empty means the reference implementation. Not
//! feature-gated: the choice is validated (and tested) without building the transports' clients.

/// The variable that picks the SQS implementation.
pub const SQS_VARIABLE: &str = "CONFORMANCE_SQS_IMPL";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqsImplementation {
    /// moto's server (SQS and SNS), in a project virtualenv: the reference implementation.
    Moto,
    /// ElasticMQ's server (SQS only), in a JVM: the fidelity check.
    ElasticMq,
}

/// A value of [`SQS_VARIABLE`] that names no implementation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}={value:?} is not an SQS implementation; valid choices: {}", SQS_VARIABLE, SqsImplementation::NAMES.join(", "))]
pub struct UnknownImplementation {
    pub value: String,
}

impl SqsImplementation {
    pub const NAMES: [&'static str; 2] = ["moto", "elasticmq"];

    pub fn parse(value: &str) -> Result<SqsImplementation, UnknownImplementation> {
        match value {
            "" | "moto" => Ok(SqsImplementation::Moto),
            "elasticmq" => Ok(SqsImplementation::ElasticMq),
            other => Err(UnknownImplementation { value: other.to_owned() }),
        }
    }

    /// The name in the source line (`sqs: broker from local (elasticmq on …)`), which `xtask`
    /// records as the run's implementation.
    pub fn name(self) -> &'static str {
        match self {
            SqsImplementation::Moto => "moto",
            SqsImplementation::ElasticMq => "elasticmq",
        }
    }

    /// Whether it serves SNS as well as SQS (ElasticMQ has no SNS API).
    pub fn serves_sns(self) -> bool {
        self == SqsImplementation::Moto
    }

    /// The command that installs it.
    pub fn install_command(self) -> &'static str {
        match self {
            SqsImplementation::Moto => "cargo xtask brokers install sqs",
            SqsImplementation::ElasticMq => "cargo xtask brokers install sqs --impl elasticmq",
        }
    }

    /// The choice in the environment; an unknown value stops the binary naming the valid choices
    /// (a typo must not silently record moto's verdicts as another implementation's).
    pub fn from_environment() -> SqsImplementation {
        let value = std::env::var(SQS_VARIABLE).unwrap_or_default();
        SqsImplementation::parse(&value).unwrap_or_else(|error| crate::broker::fatal("sqs", &error))
    }
}

/// The variable that picks the RocketMQ implementation.
pub const ROCKETMQ_VARIABLE: &str = "CONFORMANCE_ROCKETMQ_IMPL";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RocketMqImplementation {
    /// Apache RocketMQ's name server and broker in one JVM: the reference implementation.
    Apache,
    /// The Rust name server and broker (crates `rocketmq-namesrv`, `rocketmq-broker`): the
    /// fidelity check.
    RocketMqRust,
}

/// A value of [`ROCKETMQ_VARIABLE`] that names no implementation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}={value:?} is not a RocketMQ implementation; valid choices: {}",
    ROCKETMQ_VARIABLE,
    RocketMqImplementation::NAMES.join(", ")
)]
pub struct UnknownRocketMqImplementation {
    pub value: String,
}

impl RocketMqImplementation {
    pub const NAMES: [&'static str; 2] = ["apache", "rocketmq-rust"];

    pub fn parse(value: &str) -> Result<RocketMqImplementation, UnknownRocketMqImplementation> {
        match value {
            "" | "apache" => Ok(RocketMqImplementation::Apache),
            "rocketmq-rust" => Ok(RocketMqImplementation::RocketMqRust),
            other => Err(UnknownRocketMqImplementation { value: other.to_owned() }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RocketMqImplementation::Apache => "apache",
            RocketMqImplementation::RocketMqRust => "rocketmq-rust",
        }
    }

    /// The command that installs it.
    pub fn install_command(self) -> &'static str {
        match self {
            RocketMqImplementation::Apache => "cargo xtask brokers install rocketmq",
            RocketMqImplementation::RocketMqRust => "cargo xtask brokers install rocketmq --impl rocketmq-rust",
        }
    }

    /// The choice in the environment; an unknown value stops the binary naming the valid choices.
    pub fn from_environment() -> RocketMqImplementation {
        let value = std::env::var(ROCKETMQ_VARIABLE).unwrap_or_default();
        RocketMqImplementation::parse(&value).unwrap_or_else(|error| crate::broker::fatal("rocketmq", &error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implementations_parse_and_a_bad_one_names_the_valid_choices() {
        assert_eq!(SqsImplementation::parse(""), Ok(SqsImplementation::Moto));
        assert_eq!(SqsImplementation::parse("moto"), Ok(SqsImplementation::Moto));
        assert_eq!(SqsImplementation::parse("elasticmq"), Ok(SqsImplementation::ElasticMq));
        let error = SqsImplementation::parse("ElasticMQ").unwrap_err();
        assert_eq!(
            error.to_string(),
            "CONFORMANCE_SQS_IMPL=\"ElasticMQ\" is not an SQS implementation; valid choices: moto, elasticmq"
        );
    }

    #[test]
    fn every_name_parses_back_to_itself() {
        for name in SqsImplementation::NAMES {
            assert_eq!(SqsImplementation::parse(name).map(SqsImplementation::name), Ok(name));
        }
    }

    #[test]
    fn rocketmq_implementations_parse_and_a_bad_one_names_the_valid_choices() {
        assert_eq!(RocketMqImplementation::parse(""), Ok(RocketMqImplementation::Apache));
        assert_eq!(RocketMqImplementation::parse("apache"), Ok(RocketMqImplementation::Apache));
        assert_eq!(RocketMqImplementation::parse("rocketmq-rust"), Ok(RocketMqImplementation::RocketMqRust));
        let error = RocketMqImplementation::parse("rust").unwrap_err();
        assert_eq!(
            error.to_string(),
            "CONFORMANCE_ROCKETMQ_IMPL=\"rust\" is not a RocketMQ implementation; valid choices: apache, rocketmq-rust"
        );
        for name in RocketMqImplementation::NAMES {
            assert_eq!(RocketMqImplementation::parse(name).map(RocketMqImplementation::name), Ok(name));
        }
    }
}
