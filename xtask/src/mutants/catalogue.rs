//! The mutation catalogue (`mutants/catalogue.yaml`): contract defects as source patches, and the
//! cells each must turn red. Validated against the manifest and the workspace before anything
//! builds, so a stale patch or a typo fails naming the mutant and the valid choices.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context, Result};
use generator::Manifest;
use ledger::Behaviour;
use serde::Deserialize;

pub const CATALOGUE: &str = "mutants/catalogue.yaml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalogue {
    pub mutants: Vec<Mutant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mutant {
    pub id: String,
    pub class: String,
    pub defect: String,
    pub patches: Vec<Patch>,
    /// Transport or configuration -> behaviours (`FR-<n>`) that must turn red there.
    #[serde(default)]
    pub kills: BTreeMap<String, Vec<String>>,
    /// Transport or configuration -> why the defect cannot be caught there.
    #[serde(default)]
    pub survives: BTreeMap<String, String>,
    /// The per-cell ceiling in seconds while this mutant runs, for a defect that hangs: the
    /// default (300 s) would only make its run slow.
    #[serde(default)]
    pub cell_timeout: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Patch {
    pub file: String,
    pub find: String,
    pub replace: String,
    /// The replacement only adds what healthy code never reaches (a field, an override that
    /// restates the default), every line of `find` kept in order: the one build carries it
    /// unswitched, and a later patch of the mutant switches the defect itself.
    #[serde(default)]
    pub inert: bool,
}

impl Patch {
    /// Whether `replace` is `find` with lines added: each line of `find`, in order, is a line of it.
    pub fn only_adds(&self) -> bool {
        let mut kept = self.replace.lines();
        self.find.lines().all(|line| kept.any(|other| other == line))
    }
}

/// What a mutant expects of one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// These behaviours must turn red.
    Kills(BTreeSet<Behaviour>),
    /// It cannot be caught here, for this reason.
    Survives(String),
    /// The defect does not touch this configuration.
    NotApplicable,
}

impl Mutant {
    /// The time limits of this mutant's run.
    pub fn limits(&self) -> crate::runner::Limits {
        let mut limits = crate::runner::Limits::DEFAULT;
        if let Some(seconds) = self.cell_timeout {
            limits.cell = std::time::Duration::from_secs(seconds);
        }
        limits
    }

    /// The expectation for `configuration` of `transport`; a configuration key wins.
    pub fn expectation(&self, transport: &str, configuration: &str) -> Expectation {
        if let Some(reason) = self.survives.get(configuration) {
            return Expectation::Survives(reason.clone());
        }
        if let Some(behaviours) = self.kills.get(configuration).or_else(|| self.kills.get(transport)) {
            return Expectation::Kills(behaviours.iter().map(|b| b.parse().expect("validated at load")).collect());
        }
        match self.survives.get(transport) {
            Some(reason) => Expectation::Survives(reason.clone()),
            None => Expectation::NotApplicable,
        }
    }

    /// Applies the patches to the sources under `from`, returning the changed files' new text.
    pub fn patched(&self, from: &Path) -> Result<BTreeMap<String, String>> {
        let mut files: BTreeMap<String, String> = BTreeMap::new();
        for patch in &self.patches {
            let text = match files.get(&patch.file) {
                Some(text) => text.clone(),
                None => std::fs::read_to_string(from.join(&patch.file))
                    .with_context(|| format!("{CATALOGUE}: mutant {}: cannot read {}", self.id, patch.file))?,
            };
            let found = text.matches(&patch.find).count();
            if found != 1 {
                bail!(
                    "{CATALOGUE}: mutant {}: the text to find occurs {found} times in {} (it must occur once; \
                     the source changed, so update the patch):\n{}",
                    self.id,
                    patch.file,
                    patch.find
                );
            }
            files.insert(patch.file.clone(), text.replacen(&patch.find, &patch.replace, 1));
        }
        Ok(files)
    }
}

impl Catalogue {
    pub fn load(root: &Path, manifest: &Manifest) -> Result<Catalogue> {
        let path = root.join(CATALOGUE);
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let catalogue: Catalogue = serde_yaml::from_str(&text).map_err(|error| {
            let line = error.location().map_or(1, |l| l.line());
            anyhow::anyhow!("{CATALOGUE}:{line}: {error}")
        })?;
        catalogue.validate(root, manifest)?;
        Ok(catalogue)
    }

    fn validate(&self, root: &Path, manifest: &Manifest) -> Result<()> {
        let mut places: BTreeSet<&str> = manifest.configuration_names().into_iter().collect();
        places.extend(manifest.transports().into_iter().map(|(transport, _)| transport));
        let behaviours: BTreeSet<Behaviour> = manifest.behaviour_ids().into_iter().collect();
        let mut ids = BTreeSet::new();
        for mutant in &self.mutants {
            if !ids.insert(&mutant.id) {
                bail!("{CATALOGUE}: mutant {} appears twice", mutant.id);
            }
            if mutant.cell_timeout == Some(0) {
                bail!("{CATALOGUE}: mutant {}: cell_timeout 0; valid: a whole number of seconds above 0", mutant.id);
            }
            for place in mutant.kills.keys().chain(mutant.survives.keys()) {
                if !places.contains(place.as_str()) {
                    let choices: Vec<&str> = places.iter().copied().collect();
                    bail!(
                        "{CATALOGUE}: mutant {}: {place:?} is no transport or configuration; valid choices: {}",
                        mutant.id,
                        choices.join(", ")
                    );
                }
            }
            for behaviour in mutant.kills.values().flatten() {
                if !behaviour.parse::<Behaviour>().is_ok_and(|b| behaviours.contains(&b)) {
                    bail!("{CATALOGUE}: mutant {}: {behaviour:?} is not a behaviour of the manifest", mutant.id);
                }
            }
            if mutant.patches.is_empty() {
                bail!("{CATALOGUE}: mutant {} has no patches", mutant.id);
            }
            if let Some(patch) = mutant.patches.iter().find(|patch| patch.inert && !patch.only_adds()) {
                bail!(
                    "{CATALOGUE}: mutant {}: its inert patch of {} drops or changes a line of its find; \
                     an inert patch may only add lines (else drop `inert`)",
                    mutant.id,
                    patch.file
                );
            }
            if mutant.patches.iter().all(|patch| patch.inert) {
                bail!("{CATALOGUE}: mutant {}: every patch is inert, so nothing is the defect", mutant.id);
            }
            mutant.patched(root)?;
        }
        Ok(())
    }

    /// The mutants named by `only` (all when empty); an unknown name lists the choices.
    pub fn select(&self, only: &[String]) -> Result<Vec<&Mutant>> {
        if only.is_empty() {
            return Ok(self.mutants.iter().collect());
        }
        only.iter()
            .map(|id| {
                self.mutants.iter().find(|m| &m.id == id).with_context(|| {
                    let choices: Vec<&str> = self.mutants.iter().map(|m| m.id.as_str()).collect();
                    format!("--mutant {id}: no such mutant in {CATALOGUE}; valid choices: {}", choices.join(", "))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutant(yaml: &str) -> Mutant {
        serde_yaml::from_str(yaml).unwrap()
    }

    const NACK: &str = "id: nack
class: c
defect: d
patches: [{ file: a.rs, find: nack(), replace: 'Ok(())' }]
kills: { sqs: [FR-16], sqs-fifo: [FR-16, FR-2] }
survives: { memory: why not, sns-fifo: dedup }
";

    /// Every patch still finds its text in the tree: a source change that moves a patched line
    /// fails here, in the README's test command, not first in a mutation run.
    #[test]
    fn the_project_catalogue_matches_the_sources() {
        let root = crate::root();
        let manifest = Manifest::load(&root.join(generator::MANIFEST), &root.join("templates")).unwrap();
        if let Err(error) = Catalogue::load(&root, &manifest) {
            panic!("{error:#}");
        }
    }

    #[test]
    fn a_configuration_key_wins_over_its_transport() {
        let m = mutant(NACK);
        assert_eq!(m.expectation("sqs", "sqs"), Expectation::Kills([Behaviour::fr(16)].into()));
        assert_eq!(m.expectation("sqs", "sqs-fifo"), Expectation::Kills([Behaviour::fr(2), Behaviour::fr(16)].into()));
        assert_eq!(m.expectation("sqs", "sns-fifo"), Expectation::Survives("dedup".into()));
        assert_eq!(m.expectation("memory", "memory"), Expectation::Survives("why not".into()));
        assert_eq!(m.expectation("gcp", "gcp-pull"), Expectation::NotApplicable);
    }

    #[test]
    fn an_inert_patch_may_only_add_lines() {
        let patch = |find: &str, replace: &str| Patch {
            file: "a.rs".into(),
            find: find.into(),
            replace: replace.into(),
            inert: true,
        };
        assert!(patch("struct S {\n    a: u8,\n", "struct S {\n    seen: u8,\n    a: u8,\n").only_adds());
        assert!(patch("type C = ();\n", "type C = ();\n\nfn lease() {}\n").only_adds());
        assert!(!patch("struct S {\n    a: u8,\n", "struct S {\n    a: u16,\n").only_adds());
        assert!(!patch("a;\nb;\n", "b;\na;\n").only_adds());
    }

    #[test]
    fn a_patch_must_find_its_text_exactly_once() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("a.rs"), "fn f() { nack() }").unwrap();
        assert_eq!(mutant(NACK).patched(folder.path()).unwrap()["a.rs"], "fn f() { Ok(()) }");
        std::fs::write(folder.path().join("a.rs"), "fn f() { nack(); nack() }").unwrap();
        let error = mutant(NACK).patched(folder.path()).unwrap_err().to_string();
        assert!(
            error.starts_with("mutants/catalogue.yaml: mutant nack: the text to find occurs 2 times in a.rs"),
            "{error}"
        );
    }
}
