//! The behaviour manifest: behaviours, configurations and pump variants. Every value that
//! reaches generated Rust is validated here, and every error names the file and line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::GenerateError;

pub const VARIANTS: [&str; 2] = ["reactor", "proactor"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub variants: Vec<String>,
    pub behaviours: Vec<BehaviourEntry>,
    pub configurations: Vec<ConfigurationEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BehaviourEntry {
    /// The canonical column, `FR-<n>` (the original library's) or `DC-<n>` (this project's).
    pub id: String,
    /// The generated test function's name.
    pub name: String,
    /// The template's file stem under `templates/<variant>/`.
    pub template: String,
    pub summary: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigurationEntry {
    pub name: String,
    /// Groups configurations into one test binary.
    pub transport: String,
    /// The cargo feature of `generated` and `providers` that compiles the transport.
    pub feature: String,
    /// The function in `providers` that returns this configuration's provider.
    pub provider: String,
    /// What the delivery counter of this configuration is, as measured (the seed's AC-34 table).
    pub counter: CounterKind,
    /// The soonest a delivered, unsettled message can come back by itself (the cells' lease:
    /// visibility timeout, ack deadline, invisible time), in ms. Absent: nothing is held in flight
    /// (a republishing transport), so nothing ever lapses.
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// The latest an unsettled message comes back by itself, where it differs from `lease_ms`
    /// (a streaming client that extends leases for a while), in ms.
    #[serde(default)]
    pub latest_lapse_ms: Option<u64>,
    /// The broker settles by one committed position per partition (Kafka's offsets): a message
    /// acknowledged above an unsettled one is delivered again after the consumer restarts, as
    /// the broker documents (at least once). DC-5 then accepts that one redelivery.
    #[serde(default)]
    pub cumulative_commit: bool,
    /// The transport gives a subscription one consumer at a time and refuses a second while the
    /// first is open (MQTT 3.1.1's one connection per session). DC-3 then proves the refusal and
    /// the one consumer's budget instead of two pumps sharing it.
    #[serde(default)]
    pub single_consumer: bool,
    /// The slowest measured time from a nack or a zero-delay requeue to the redelivery's arrival
    /// through a cell, in ms (BENCHMARKS.md, "Redelivery latency").
    pub redelivery_ms: u64,
}

/// How a configuration's handled count grows across redeliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterKind {
    /// The broker counts every delivery, first = 1: the budget fires on delivery R exactly.
    Exact,
    /// The broker counts at least every delivery (b(n) >= n): the budget fires on or before R.
    Approximate,
    /// No broker counter: the transport carries the count the channel was given in the message.
    Republished,
}

impl CounterKind {
    pub fn name(self) -> &'static str {
        match self {
            CounterKind::Exact => "exact",
            CounterKind::Approximate => "approximate",
            CounterKind::Republished => "republished",
        }
    }
}

/// The time bounds a configuration's cells assert, derived from its manifest entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Bounds {
    /// A zero-delay requeue or a nack must be redelivered within this of the call.
    pub at_once_ms: u64,
    /// A settled source must stay empty this long: past the latest lapse, plus a redelivery.
    pub settle_ms: u64,
    /// FR-2's requeue delay: longer than the slowest at-once redelivery, so a requeue that
    /// ignores its delay is seen early; its redelivery must arrive within `delay_ms + at_once_ms`.
    pub delay_ms: u64,
}

/// The measured latency is multiplied by this and padded by `LOAD_MARGIN_MS`: a loaded 2-core
/// machine (a whole matrix building beside the run) was measured at up to twice the idle figure.
pub const LATENCY_FACTOR: u64 = 2;
pub const LOAD_MARGIN_MS: u64 = 1_500;
/// The most a cell's lease can have run before the test calls requeue or nack (the broker
/// starts it before the client sees the message).
pub const LEASE_SKEW_MS: u64 = 1_000;
/// The longest timing the manifest accepts, a day: longer is a typo, and the bounds' arithmetic
/// stays far from overflowing.
pub const MAX_TIMING_MS: u64 = 86_400_000;
/// FR-2's requeue delay exceeds the at-once bound by at least this, in whole seconds (brokers
/// count delays in seconds).
pub const DELAY_MARGIN_MS: u64 = 500;

impl ConfigurationEntry {
    /// The bounds of this configuration's cells. A lease too short to tell a requeue from a lapse
    /// is an error: a cell whose "at once" reaches past the lease proves nothing.
    pub fn bounds(&self) -> Result<Bounds, String> {
        let timings = [
            ("redelivery_ms", Some(self.redelivery_ms)),
            ("lease_ms", self.lease_ms),
            ("latest_lapse_ms", self.latest_lapse_ms),
        ];
        if let Some((field, Some(value))) =
            timings.into_iter().find(|(_, value)| value.is_some_and(|v| v > MAX_TIMING_MS))
        {
            return Err(format!(
                "configuration {:?}: {field} {value} is over a day ({MAX_TIMING_MS} ms), no broker's timing; a typo?",
                self.name
            ));
        }
        let at_once_ms = self.redelivery_ms * LATENCY_FACTOR + LOAD_MARGIN_MS;
        let latest_lapse = self.latest_lapse_ms.or(self.lease_ms).unwrap_or(0);
        let delay_ms = (at_once_ms + DELAY_MARGIN_MS).div_ceil(1_000) * 1_000;
        let bounds = Bounds { at_once_ms, settle_ms: latest_lapse + at_once_ms, delay_ms };
        if let Some(lease) = self.lease_ms {
            let slowest = delay_ms + at_once_ms + LEASE_SKEW_MS;
            if slowest > lease {
                return Err(format!(
                    "configuration {:?}: a requeue must be seen within {} ms (delay {delay_ms} + at once \
                     {at_once_ms} + skew {LEASE_SKEW_MS}), which does not fit in its lease_ms {lease}: a lapse would \
                     pass for a requeue; lengthen the lease or measure redelivery_ms again",
                    self.name, slowest
                ));
            }
            if self.latest_lapse_ms.is_some_and(|latest| latest < lease) {
                return Err(format!("configuration {:?}: latest_lapse_ms is below lease_ms {lease}", self.name));
            }
        }
        Ok(bounds)
    }
}

impl BehaviourEntry {
    /// The behaviour's id, validated at load.
    pub fn behaviour(&self) -> ledger::Behaviour {
        self.id.parse().expect("validated at load")
    }

    /// The module that holds this behaviour's test: `fr_<n>` or `dc_<n>`.
    pub fn module(&self) -> String {
        self.behaviour().module()
    }
}

impl ConfigurationEntry {
    /// The Rust module of the configuration: its name with `-` as `_`.
    pub fn module(&self) -> String {
        self.name.replace('-', "_")
    }
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "static", "struct", "super", "trait", "true", "try", "type", "unsafe", "use", "where", "while", "yield",
];

/// A lowercase Rust identifier (`[a-z][a-z0-9_]*`, not a keyword).
fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !KEYWORDS.contains(&text)
}

struct Checker<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Checker<'_> {
    /// The 1-based line of the first `key: value` entry, so errors point where to look.
    fn line_of(&self, key: &str, value: &str) -> usize {
        self.text
            .lines()
            .position(|line| {
                let line = line.trim_start().trim_start_matches("- ");
                line.strip_prefix(key)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .is_some_and(|rest| rest.trim().trim_matches(['"', '\'']) == value)
            })
            .map_or(1, |index| index + 1)
    }

    fn fail(&self, key: &str, value: &str, problem: String) -> GenerateError {
        GenerateError::Manifest { path: self.path.to_path_buf(), line: self.line_of(key, value), problem }
    }

    fn identifier(&self, key: &str, value: &str, what: &str) -> Result<(), GenerateError> {
        if is_identifier(value) {
            return Ok(());
        }
        Err(self.fail(
            key,
            value,
            format!("{what} {value:?} is not a lowercase Rust identifier ([a-z][a-z0-9_]*, not a keyword)"),
        ))
    }

    fn unique<'v>(&self, seen: &mut BTreeSet<&'v str>, key: &str, value: &'v str) -> Result<(), GenerateError> {
        if seen.insert(value) {
            return Ok(());
        }
        Err(self.fail(key, value, format!("{key} {value:?} appears twice")))
    }
}

impl Manifest {
    /// Reads and validates the manifest; `templates` is the folder its template stems name.
    pub fn load(path: &Path, templates: &Path) -> Result<Manifest, GenerateError> {
        let text = std::fs::read_to_string(path).map_err(|error| GenerateError::Io { path: path.into(), error })?;
        Manifest::parse(&text, path, templates)
    }

    pub fn parse(text: &str, path: &Path, templates: &Path) -> Result<Manifest, GenerateError> {
        let manifest: Manifest = serde_yaml::from_str(text).map_err(|error| GenerateError::Manifest {
            path: PathBuf::from(path),
            line: error.location().map_or(1, |location| location.line()),
            problem: error.to_string(),
        })?;
        manifest.validate(&Checker { path, text }, templates)?;
        Ok(manifest)
    }

    fn validate(&self, check: &Checker<'_>, templates: &Path) -> Result<(), GenerateError> {
        let mut seen = BTreeSet::new();
        for variant in &self.variants {
            if !VARIANTS.contains(&variant.as_str()) {
                return Err(GenerateError::Manifest {
                    path: check.path.into(),
                    line: check.text.lines().position(|l| l.contains(variant.as_str())).map_or(1, |i| i + 1),
                    problem: format!("unknown variant {variant:?}; valid choices: {}", VARIANTS.join(", ")),
                });
            }
            check.unique(&mut seen, "variants", variant)?;
        }
        let (mut ids, mut names) = (BTreeSet::new(), BTreeSet::new());
        for behaviour in &self.behaviours {
            if let Err(error) = behaviour.id.parse::<ledger::Behaviour>() {
                return Err(check.fail("id", &behaviour.id, error.to_string()));
            }
            check.unique(&mut ids, "id", &behaviour.id)?;
            check.identifier("name", &behaviour.name, "behaviour name")?;
            check.unique(&mut names, "name", &behaviour.name)?;
            check.identifier("template", &behaviour.template, "template")?;
            for variant in &self.variants {
                let file = templates.join(variant).join(format!("{}.rs.tera", behaviour.template));
                if !file.is_file() {
                    let available = available_templates(&templates.join(variant));
                    return Err(check.fail(
                        "template",
                        &behaviour.template,
                        format!(
                            "template {:?} has no {}; templates for {variant}: {}",
                            behaviour.template,
                            file.display(),
                            available.join(", ")
                        ),
                    ));
                }
            }
        }
        let mut configurations = BTreeSet::new();
        for configuration in &self.configurations {
            if let Err(error) = ledger::validate_configuration(&configuration.name) {
                return Err(check.fail("name", &configuration.name, error.to_string()));
            }
            check.unique(&mut configurations, "name", &configuration.name)?;
            check.identifier("transport", &configuration.transport, "transport")?;
            check.identifier("feature", &configuration.feature, "feature")?;
            check.identifier("provider", &configuration.provider, "provider")?;
            if let Err(problem) = configuration.bounds() {
                return Err(check.fail("name", &configuration.name, problem));
            }
        }
        Ok(())
    }

    pub fn configuration_names(&self) -> Vec<&str> {
        self.configurations.iter().map(|c| c.name.as_str()).collect()
    }

    pub fn behaviour_ids(&self) -> Vec<ledger::Behaviour> {
        self.behaviours.iter().map(BehaviourEntry::behaviour).collect()
    }

    /// The transports, in first-appearance order, each with its feature.
    pub fn transports(&self) -> Vec<(&str, &str)> {
        let mut transports: Vec<(&str, &str)> = Vec::new();
        for configuration in &self.configurations {
            if !transports.iter().any(|(name, _)| *name == configuration.transport) {
                transports.push((&configuration.transport, &configuration.feature));
            }
        }
        transports
    }
}

fn available_templates(folder: &Path) -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.strip_suffix(".rs.tera").map(str::to_owned))
        .filter(|stem| stem != "base")
        .collect();
    stems.sort();
    stems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn templates() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates")
    }

    fn parse(text: &str) -> Result<Manifest, GenerateError> {
        Manifest::parse(text, Path::new("templates/manifest.yaml"), &templates())
    }

    const VALID: &str = "variants: [reactor, proactor]
behaviours:
  - id: FR-2
    name: requeue_redelivers
    template: fr_2
    summary: s
configurations:
  - name: sqs-fifo
    transport: sqs
    feature: sqs
    provider: sqs_fifo
    counter: exact
    lease_ms: 8000
    redelivery_ms: 500
";

    #[test]
    fn the_repository_manifest_is_valid() {
        Manifest::load(&templates().join("manifest.yaml"), &templates()).unwrap();
    }

    #[test]
    fn a_valid_manifest_parses_and_derives_modules() {
        let manifest = parse(VALID).unwrap();
        assert_eq!(manifest.behaviours[0].module(), "fr_2");
        assert_eq!(manifest.configurations[0].module(), "sqs_fifo");
        assert_eq!(manifest.transports(), [("sqs", "sqs")]);
    }

    fn error_of(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn an_unknown_variant_names_the_line_and_the_choices() {
        let error = error_of(&VALID.replace("[reactor, proactor]", "[reactor, actor]"));
        assert_eq!(error, "templates/manifest.yaml:1: unknown variant \"actor\"; valid choices: reactor, proactor");
    }

    #[test]
    fn a_name_that_is_not_an_identifier_is_refused_before_rendering() {
        let error = error_of(&VALID.replace("provider: sqs_fifo", "provider: \"sqs(); evil()\""));
        assert!(
            error.starts_with(
                "templates/manifest.yaml:11: provider \"sqs(); evil()\" is not a lowercase Rust identifier"
            ),
            "{error}"
        );
        let error = error_of(&VALID.replace("name: requeue_redelivers", "name: fn"));
        assert!(error.starts_with("templates/manifest.yaml:4: behaviour name \"fn\""), "{error}");
    }

    #[test]
    fn a_missing_template_lists_the_available_ones() {
        let error = error_of(&VALID.replace("template: fr_2", "template: fr_99"));
        assert!(error.starts_with("templates/manifest.yaml:5: template \"fr_99\" has no"), "{error}");
        assert!(error.contains("fr_2, fr_22, fr_23"), "{error}");
    }

    #[test]
    fn a_bad_behaviour_id_and_a_duplicate_configuration_are_located() {
        let error = error_of(&VALID.replace("id: FR-2", "id: FR2"));
        assert!(error.starts_with("templates/manifest.yaml:3: "), "{error}");
        let entry = &VALID[VALID.find("  - name: sqs-fifo").unwrap()..];
        let twice = format!("{VALID}{entry}");
        assert!(error_of(&twice).contains("name \"sqs-fifo\" appears twice"));
    }

    #[test]
    fn yaml_errors_and_unknown_fields_carry_a_line() {
        let error = error_of(&VALID.replace("    summary: s\n", "    summary: s\n    sumary: t\n"));
        assert!(
            error.starts_with("templates/manifest.yaml:7: behaviours[0]: unknown field `sumary`, expected one of"),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_counter_kind_names_the_choices() {
        let error = error_of(&VALID.replace("counter: exact", "counter: precise"));
        assert!(
            error.contains("unknown variant `precise`, expected one of `exact`, `approximate`, `republished`"),
            "{error}"
        );
    }

    #[test]
    fn bounds_derive_from_the_measured_latency_and_the_lease() {
        let manifest = parse(VALID).unwrap();
        let bounds = manifest.configurations[0].bounds().unwrap();
        assert_eq!(bounds, Bounds { at_once_ms: 2_500, settle_ms: 10_500, delay_ms: 3_000 });
    }

    #[test]
    fn an_absurd_timing_is_an_error_naming_its_line_never_a_panic() {
        let error = error_of(&VALID.replace("lease_ms: 8000", "lease_ms: 18446744073709551615"));
        assert!(
            error.starts_with(
                "templates/manifest.yaml:8: configuration \"sqs-fifo\": lease_ms 18446744073709551615 is over a day"
            ),
            "{error}"
        );
        let error = error_of(&VALID.replace("redelivery_ms: ", "redelivery_ms: 9999999999999999999 #"));
        assert!(error.contains("redelivery_ms 9999999999999999999 is over a day"), "{error}");
    }

    #[test]
    fn a_lease_too_short_to_tell_a_requeue_from_a_lapse_is_refused() {
        let error = error_of(&VALID.replace("lease_ms: 8000", "lease_ms: 6000"));
        assert!(
            error.starts_with(
                "templates/manifest.yaml:8: configuration \"sqs-fifo\": a requeue must be seen within 6500 ms"
            ),
            "{error}"
        );
    }

    #[test]
    fn without_a_lease_nothing_lapses_and_settlement_waits_one_redelivery() {
        let manifest = parse(&VALID.replace("    lease_ms: 8000\n", "")).unwrap();
        assert_eq!(manifest.configurations[0].bounds().unwrap().settle_ms, 2_500);
    }
}
