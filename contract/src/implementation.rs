//! Which implementation of a transport's wire protocol a local broker runs. SQS has two: moto,
//! the reference implementation the main ledger is recorded against, and ElasticMQ, run for the
//! fidelity table (`ledger/FIDELITY.md`). RocketMQ has two: Apache RocketMQ (the reference) and
//! rocketmq-rust, the Rust name server and broker of the project whose client the gateway uses.
//! `cargo xtask conformance --impl` sets each transport's [`Implementation::variable`]; unset or
//! empty means the reference.

/// A broker implementation, named as `--impl` and the variables name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Implementation {
    /// moto: SQS and SNS; sqs's reference implementation, whose verdicts the main ledger records
    Moto,
    /// ElasticMQ: SQS only; recorded in the fidelity table
    #[cfg_attr(feature = "clap", value(name = "elasticmq"))]
    ElasticMq,
    /// Apache RocketMQ: rocketmq's reference implementation
    Apache,
    /// The Rust name server and broker (rocketmq-namesrv, rocketmq-broker); recorded in the
    /// fidelity table
    #[cfg_attr(feature = "clap", value(name = "rocketmq-rust"))]
    RocketMqRust,
    /// RabbitMQ 3.10.8, Debian 12's: rabbitmq's reference implementation
    #[cfg_attr(feature = "clap", value(name = "rabbitmq"))]
    RabbitMq,
    /// RabbitMQ 4.0.5, Debian 13's, in a trixie root file system of its own; recorded in the
    /// fidelity table (a broker version as a second implementation, #29)
    #[cfg_attr(feature = "clap", value(name = "rabbitmq-4.0.5"))]
    RabbitMq4,
    /// redis-server 7.0.15, Debian 12's: redis's reference implementation
    #[cfg_attr(feature = "clap", value(name = "redis"))]
    Redis,
    /// redis-server 8.0.2, Debian 13's, in the trixie root; recorded in the fidelity table
    #[cfg_attr(feature = "clap", value(name = "redis-8.0.2"))]
    Redis8,
    /// mosquitto 2.0.11, Debian 12's: mqtt's reference implementation
    #[cfg_attr(feature = "clap", value(name = "mosquitto"))]
    Mosquitto,
    /// mosquitto 2.0.21, Debian 13's, in the trixie root; recorded in the fidelity table
    #[cfg_attr(feature = "clap", value(name = "mosquitto-2.0.21"))]
    Mosquitto2,
    /// PostgreSQL 15, Debian 12's: postgres's reference implementation
    #[cfg_attr(feature = "clap", value(name = "postgres"))]
    Postgres,
    /// PostgreSQL 17, Debian 13's, in the trixie root; recorded in the fidelity table
    #[cfg_attr(feature = "clap", value(name = "postgres-17"))]
    Postgres17,
    /// Apache Kafka 3.9.0: kafka's reference implementation
    #[cfg_attr(feature = "clap", value(name = "kafka"))]
    Kafka,
    /// Apache Kafka 4.4.0, behind the same launcher; recorded in the fidelity table
    #[cfg_attr(feature = "clap", value(name = "kafka-4.4.0"))]
    Kafka4,
}

/// A value of a transport's implementation variable that names none of its implementations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not a {transport} implementation; valid choices: {}", choices.join(", "))]
pub struct UnknownImplementation {
    pub variable: &'static str,
    pub transport: &'static str,
    pub value: String,
    pub choices: Vec<&'static str>,
}

impl Implementation {
    pub const ALL: [Implementation; 14] = [
        Implementation::Moto,
        Implementation::ElasticMq,
        Implementation::Apache,
        Implementation::RocketMqRust,
        Implementation::RabbitMq,
        Implementation::RabbitMq4,
        Implementation::Redis,
        Implementation::Redis8,
        Implementation::Mosquitto,
        Implementation::Mosquitto2,
        Implementation::Postgres,
        Implementation::Postgres17,
        Implementation::Kafka,
        Implementation::Kafka4,
    ];
    /// Each transport's reference implementation, whose variable every test binary is given.
    pub const REFERENCES: [Implementation; 7] = [
        Implementation::Moto,
        Implementation::Apache,
        Implementation::RabbitMq,
        Implementation::Redis,
        Implementation::Mosquitto,
        Implementation::Postgres,
        Implementation::Kafka,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Implementation::Moto => "moto",
            Implementation::ElasticMq => "elasticmq",
            Implementation::Apache => "apache",
            Implementation::RocketMqRust => "rocketmq-rust",
            Implementation::RabbitMq => "rabbitmq",
            Implementation::RabbitMq4 => "rabbitmq-4.0.5",
            Implementation::Redis => "redis",
            Implementation::Redis8 => "redis-8.0.2",
            Implementation::Mosquitto => "mosquitto",
            Implementation::Mosquitto2 => "mosquitto-2.0.21",
            Implementation::Postgres => "postgres",
            Implementation::Postgres17 => "postgres-17",
            Implementation::Kafka => "kafka",
            Implementation::Kafka4 => "kafka-4.4.0",
        }
    }

    /// The implementation named `name` (as [`Implementation::name`] gives it), if any.
    pub fn named(name: &str) -> Option<Implementation> {
        Implementation::ALL.into_iter().find(|implementation| implementation.name() == name)
    }

    /// The transport it implements.
    pub fn transport(self) -> &'static str {
        match self {
            Implementation::Moto | Implementation::ElasticMq => "sqs",
            Implementation::Apache | Implementation::RocketMqRust => "rocketmq",
            Implementation::RabbitMq | Implementation::RabbitMq4 => "rabbitmq",
            Implementation::Redis | Implementation::Redis8 => "redis",
            Implementation::Mosquitto | Implementation::Mosquitto2 => "mqtt",
            Implementation::Postgres | Implementation::Postgres17 => "postgres",
            Implementation::Kafka | Implementation::Kafka4 => "kafka",
        }
    }

    /// The variable that tells a test binary which implementation of its transport to start.
    pub fn variable(self) -> &'static str {
        match self.transport() {
            "sqs" => "CONFORMANCE_SQS_IMPL",
            "rabbitmq" => "CONFORMANCE_RABBITMQ_IMPL",
            "redis" => "CONFORMANCE_REDIS_IMPL",
            "mqtt" => "CONFORMANCE_MQTT_IMPL",
            "postgres" => "CONFORMANCE_POSTGRES_IMPL",
            "kafka" => "CONFORMANCE_KAFKA_IMPL",
            _ => "CONFORMANCE_ROCKETMQ_IMPL",
        }
    }

    /// Its transport's reference implementation.
    pub fn reference(self) -> Implementation {
        match self.transport() {
            "sqs" => Implementation::Moto,
            "rabbitmq" => Implementation::RabbitMq,
            "redis" => Implementation::Redis,
            "mqtt" => Implementation::Mosquitto,
            "postgres" => Implementation::Postgres,
            "kafka" => Implementation::Kafka,
            _ => Implementation::Apache,
        }
    }

    /// Whether it is its transport's reference implementation, whose verdicts the main ledger records.
    pub fn is_reference(self) -> bool {
        self == self.reference()
    }

    /// Whether it can carry `configuration` of its transport (ElasticMQ has no SNS API).
    pub fn serves(self, configuration: &str) -> bool {
        self != Implementation::ElasticMq || !configuration.starts_with("sns")
    }

    /// The command that installs it.
    pub fn install_command(self) -> &'static str {
        match self {
            Implementation::Moto => "cargo xtask brokers install sqs",
            Implementation::ElasticMq => "cargo xtask brokers install sqs --impl elasticmq",
            Implementation::Apache => "cargo xtask brokers install rocketmq",
            Implementation::RocketMqRust => "cargo xtask brokers install rocketmq --impl rocketmq-rust",
            Implementation::RabbitMq => "cargo xtask brokers install rabbitmq",
            Implementation::RabbitMq4 => "cargo xtask brokers install rabbitmq --impl rabbitmq-4.0.5",
            Implementation::Redis => "cargo xtask brokers install redis",
            Implementation::Redis8 => "cargo xtask brokers install redis --impl redis-8.0.2",
            Implementation::Mosquitto => "cargo xtask brokers install mqtt",
            Implementation::Mosquitto2 => "cargo xtask brokers install mqtt --impl mosquitto-2.0.21",
            Implementation::Postgres => "cargo xtask brokers install postgres",
            Implementation::Postgres17 => "cargo xtask brokers install postgres --impl postgres-17",
            Implementation::Kafka => "cargo xtask brokers install kafka",
            Implementation::Kafka4 => "cargo xtask brokers install kafka --impl kafka-4.4.0",
        }
    }

    /// `reference`'s transport's implementation named by `value` (empty: the reference); one
    /// of another transport, or none, is an error naming this transport's choices.
    pub fn parse_for(reference: Implementation, value: &str) -> Result<Implementation, UnknownImplementation> {
        let reference = reference.reference();
        let mine = Implementation::ALL.into_iter().filter(|i| i.transport() == reference.transport());
        match value {
            "" => Ok(reference),
            name => mine.clone().find(|i| i.name() == name).ok_or_else(|| UnknownImplementation {
                variable: reference.variable(),
                transport: reference.transport(),
                value: name.to_owned(),
                choices: mine.map(Implementation::name).collect(),
            }),
        }
    }

    /// The implementation of `reference`'s transport that its variable picks in the environment.
    pub fn from_environment(reference: Implementation) -> Result<Implementation, UnknownImplementation> {
        Implementation::parse_for(reference, &std::env::var(reference.variable()).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_takes_only_its_own_implementations_and_names_them() {
        assert_eq!(Implementation::parse_for(Implementation::Moto, ""), Ok(Implementation::Moto));
        assert_eq!(Implementation::parse_for(Implementation::Moto, "elasticmq"), Ok(Implementation::ElasticMq));
        assert_eq!(
            Implementation::parse_for(Implementation::Apache, "rocketmq-rust"),
            Ok(Implementation::RocketMqRust)
        );
        assert_eq!(
            Implementation::parse_for(Implementation::Moto, "ElasticMQ").unwrap_err().to_string(),
            "CONFORMANCE_SQS_IMPL=\"ElasticMQ\" is not a sqs implementation; valid choices: moto, elasticmq"
        );
        let error = Implementation::parse_for(Implementation::Apache, "moto").unwrap_err().to_string();
        assert!(error.contains("valid choices: apache, rocketmq-rust"), "{error}");
        assert_eq!(
            Implementation::parse_for(Implementation::RabbitMq, "rabbitmq-4.0.5"),
            Ok(Implementation::RabbitMq4)
        );
        let error = Implementation::parse_for(Implementation::RabbitMq, "4.0.5").unwrap_err().to_string();
        assert!(error.starts_with("CONFORMANCE_RABBITMQ_IMPL=\"4.0.5\""), "{error}");
        assert!(error.contains("valid choices: rabbitmq, rabbitmq-4.0.5"), "{error}");
    }

    #[test]
    fn every_name_is_found_again() {
        for implementation in Implementation::ALL {
            assert_eq!(Implementation::named(implementation.name()), Some(implementation));
        }
        assert_eq!(Implementation::named("localstack"), None);
    }
}
