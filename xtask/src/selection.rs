//! What a conformance run covers: the transports, configurations, behaviours and pump variants
//! chosen on the command line, checked against the manifest (an unknown name lists the valid
//! choices), and the tests that must report a result for the run to count.

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use generator::manifest::ConfigurationEntry;
use generator::Manifest;
use ledger::Behaviour;

use crate::test_names::{TestCell, TestNames};

/// The command line's choices, as given.
#[derive(Debug, Default, Clone)]
pub struct Asked {
    pub transports: Vec<String>,
    pub configurations: Vec<String>,
    pub behaviours: Vec<String>,
    pub variants: Vec<String>,
}

/// The cells a run covers.
#[derive(Debug)]
pub struct Selection<'m> {
    /// (transport, cargo feature), in manifest order.
    pub transports: Vec<(&'m str, &'m str)>,
    pub configurations: Vec<&'m ConfigurationEntry>,
    pub behaviours: Vec<Behaviour>,
    pub variants: Vec<&'m str>,
}

fn unknown(flag: &str, value: &str, choices: &[&str]) -> anyhow::Error {
    anyhow::anyhow!("{flag} {value}: not in {}; valid choices: {}", generator::MANIFEST, choices.join(", "))
}

impl<'m> Selection<'m> {
    pub fn new(manifest: &'m Manifest, asked: &Asked) -> Result<Selection<'m>> {
        let known = manifest.transports();
        let transport_names: Vec<&str> = known.iter().map(|(t, _)| *t).collect();
        let configuration_names = manifest.configuration_names();

        let mut configurations = Vec::new();
        for name in &asked.configurations {
            let entry = manifest
                .configurations
                .iter()
                .find(|c| c.name == *name)
                .ok_or_else(|| unknown("--configuration", name, &configuration_names))?;
            configurations.push(entry);
        }

        let mut wanted: BTreeSet<&str> = BTreeSet::new();
        for name in &asked.transports {
            if name == "all" {
                wanted.extend(&transport_names);
            } else if transport_names.contains(&name.as_str()) {
                wanted.insert(name);
            } else {
                let mut choices = transport_names.clone();
                choices.push("all");
                return Err(unknown("--transport", name, &choices));
            }
        }
        if wanted.is_empty() {
            if configurations.is_empty() {
                wanted.insert("memory");
            } else {
                wanted.extend(configurations.iter().map(|c| c.transport.as_str()));
            }
        }
        for configuration in &configurations {
            if !wanted.contains(configuration.transport.as_str()) {
                bail!(
                    "--configuration {} belongs to transport {}, which this run does not select",
                    configuration.name,
                    configuration.transport
                );
            }
        }
        if configurations.is_empty() {
            configurations = manifest.configurations.iter().filter(|c| wanted.contains(c.transport.as_str())).collect();
        }

        let all_behaviours = manifest.behaviour_ids();
        let behaviours = if asked.behaviours.is_empty() {
            all_behaviours.clone()
        } else {
            let choices: Vec<String> = all_behaviours.iter().map(ToString::to_string).collect();
            let choices: Vec<&str> = choices.iter().map(String::as_str).collect();
            let mut chosen = Vec::new();
            for text in &asked.behaviours {
                match text.parse::<Behaviour>() {
                    Ok(behaviour) if all_behaviours.contains(&behaviour) => chosen.push(behaviour),
                    _ => return Err(unknown("--behaviour", text, &choices)),
                }
            }
            chosen
        };

        let variant_names: Vec<&str> = manifest.variants.iter().map(String::as_str).collect();
        let variants = if asked.variants.is_empty() {
            variant_names.clone()
        } else {
            let mut chosen = Vec::new();
            for name in &asked.variants {
                let found = variant_names
                    .iter()
                    .find(|v| **v == name)
                    .ok_or_else(|| unknown("--variant", name, &variant_names))?;
                chosen.push(*found);
            }
            chosen
        };

        let transports = known.into_iter().filter(|(t, _)| wanted.contains(t)).collect();
        Ok(Selection { transports, configurations, behaviours, variants })
    }

    /// Whether every pump variant runs: only then can a cell change status.
    pub fn every_variant(&self, manifest: &Manifest) -> bool {
        manifest.variants.iter().all(|v| self.variants.contains(&v.as_str()))
    }

    /// The configurations of `transport` this run covers.
    pub fn configurations_of(&self, transport: &str) -> Vec<&'m ConfigurationEntry> {
        self.configurations.iter().copied().filter(|c| c.transport == transport).collect()
    }

    /// Every test of `transport` that must report a result.
    pub fn expected(&self, transport: &str) -> Vec<TestCell> {
        let mut expected = Vec::new();
        for configuration in self.configurations_of(transport) {
            for variant in &self.variants {
                for behaviour in &self.behaviours {
                    expected.push(TestCell::new(&configuration.name, *behaviour, variant));
                }
            }
        }
        expected.sort();
        expected
    }

    /// libtest filters selecting exactly the expected tests of `transport`, or none (run every
    /// test) when the run is not narrowed within the transport.
    pub fn filters(&self, manifest: &Manifest, names: &TestNames, transport: &str) -> Vec<String> {
        let whole = self.configurations_of(transport).len()
            == manifest.configurations.iter().filter(|c| c.transport == transport).count()
            && self.behaviours.len() == manifest.behaviours.len()
            && self.every_variant(manifest);
        if whole {
            return Vec::new();
        }
        self.expected(transport).iter().map(|test| names.filter(test)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let root = crate::root();
        Manifest::load(&root.join(generator::MANIFEST), &root.join("templates")).unwrap()
    }

    fn asked(transports: &[&str], configurations: &[&str], behaviours: &[&str], variants: &[&str]) -> Asked {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        Asked {
            transports: owned(transports),
            configurations: owned(configurations),
            behaviours: owned(behaviours),
            variants: owned(variants),
        }
    }

    #[test]
    fn one_cell_in_one_variant_is_one_filter_and_one_expected_test() {
        let manifest = manifest();
        let selection = Selection::new(&manifest, &asked(&[], &["memory"], &["FR-23"], &["proactor"])).unwrap();
        assert_eq!(selection.transports.iter().map(|t| t.0).collect::<Vec<_>>(), ["memory"]);
        assert_eq!(selection.filters(&manifest, &TestNames::new(&manifest), "memory"), ["memory::proactor::fr_23::"]);
        assert_eq!(selection.expected("memory"), [TestCell::new("memory", Behaviour::fr(23), "proactor")]);
        assert!(!selection.every_variant(&manifest));
    }

    #[test]
    fn a_whole_transport_needs_no_filter_and_expects_every_cell_in_both_variants() {
        let manifest = manifest();
        let selection = Selection::new(&manifest, &asked(&["memory"], &[], &[], &[])).unwrap();
        assert!(selection.filters(&manifest, &TestNames::new(&manifest), "memory").is_empty());
        assert_eq!(selection.expected("memory").len(), manifest.behaviours.len() * 2);
        let all = Selection::new(&manifest, &asked(&["all"], &[], &[], &[])).unwrap();
        assert_eq!(all.configurations.len(), manifest.configurations.len());
    }

    #[test]
    fn unknown_names_list_the_valid_choices() {
        let manifest = manifest();
        let error = |a: Asked| Selection::new(&manifest, &a).unwrap_err().to_string();
        assert!(error(asked(&[], &["nope"], &[], &[]))
            .contains("--configuration nope: not in templates/manifest.yaml; valid choices: memory,"));
        assert!(error(asked(&[], &[], &["FR-99"], &[])).contains("--behaviour FR-99"));
        assert!(error(asked(&[], &[], &[], &["both"])).contains("valid choices: reactor, proactor"));
        assert!(error(asked(&["pulsar"], &[], &[], &[])).contains(", all"));
        assert!(error(asked(&["memory"], &["sqs"], &[], &[])).contains("belongs to transport sqs"));
    }
}
