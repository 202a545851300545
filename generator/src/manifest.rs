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
    /// The canonical column, `FR-<n>`.
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
}

impl BehaviourEntry {
    /// The FR number, validated at load.
    pub fn number(&self) -> u32 {
        self.id.parse::<ledger::Behaviour>().map(|b| b.0).expect("validated at load")
    }

    /// The module that holds this behaviour's test: `fr_<n>`.
    pub fn module(&self) -> String {
        format!("fr_{}", self.number())
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
        }
        Ok(())
    }

    pub fn configuration_names(&self) -> Vec<&str> {
        self.configurations.iter().map(|c| c.name.as_str()).collect()
    }

    pub fn behaviour_ids(&self) -> Vec<ledger::Behaviour> {
        self.behaviours.iter().map(|b| ledger::Behaviour(b.number())).collect()
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
        let twice =
            format!("{VALID}  - name: sqs-fifo\n    transport: sqs\n    feature: sqs\n    provider: sqs_fifo\n");
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
}
