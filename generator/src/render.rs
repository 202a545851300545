//! Renders every output file in memory: the generated crate's manifest, its test binaries, one
//! test module per configuration x variant x behaviour, and the ledger's Markdown matrix.

use std::collections::BTreeMap;
use std::error::Error as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ledger::{CellId, Ledger, Status};
use serde::Serialize;
use tera::{Context, Tera};

use crate::manifest::{BehaviourEntry, ConfigurationEntry, Manifest};
use crate::{GenerateError, COMMAND, GENERATED, LEDGER_DIR};

#[derive(Serialize)]
struct TransportView<'a> {
    name: &'a str,
    feature: &'a str,
}

#[derive(Serialize)]
struct ConfigurationView {
    module: String,
}

#[derive(Serialize)]
struct BehaviourView<'a> {
    id: &'a str,
    name: &'a str,
    summary: &'a str,
    module: String,
}

fn behaviour_view(behaviour: &BehaviourEntry) -> BehaviourView<'_> {
    BehaviourView { id: &behaviour.id, name: &behaviour.name, summary: &behaviour.summary, module: behaviour.module() }
}

/// The full cause chain: Tera's own message names the template, its sources say what failed.
fn chain(error: &tera::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn render(tera: &Tera, template: &str, context: &Context) -> Result<String, GenerateError> {
    tera.render(template, context)
        .map_err(|error| GenerateError::Template { template: format!("templates/{template}"), chain: chain(&error) })
}

/// Formats one source through rustfmt's stdin: for a file that declares out-of-line modules,
/// which rustfmt would otherwise go looking for.
fn rustfmt_one(root: &Path, template: &str, source: &str) -> Result<String, GenerateError> {
    let failed = |detail: String| GenerateError::Rustfmt { template: format!("templates/{template}"), detail };
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2021", "--emit", "stdout", "--config-path"])
        .arg(root.join("rustfmt.toml"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| failed(format!("cannot start rustfmt: {error}")))?;
    child.stdin.take().expect("piped").write_all(source.as_bytes()).map_err(|e| failed(e.to_string()))?;
    let output = child.wait_with_output().map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        return Err(failed(String::from_utf8_lossy(&output.stderr).into_owned()));
    }
    String::from_utf8(output.stdout).map_err(|e| failed(e.to_string()))
}

/// Rust sources without module declarations waiting for rustfmt: formatted together by one
/// rustfmt process (one process per file made generation scale with the matrix), each
/// remembering its template for errors.
#[derive(Default)]
struct Unformatted {
    sources: Vec<(PathBuf, String, String)>,
}

impl Unformatted {
    fn add(&mut self, output: PathBuf, template: &str, source: String) {
        self.sources.push((output, format!("templates/{template}"), source));
    }

    fn format_into(self, root: &Path, outputs: &mut BTreeMap<PathBuf, String>) -> Result<(), GenerateError> {
        let failed = |template: &str, detail: String| GenerateError::Rustfmt { template: template.to_owned(), detail };
        let scratch = tempfile::tempdir().map_err(|e| failed("templates/", e.to_string()))?;
        let files: Vec<PathBuf> = (0..self.sources.len()).map(|i| scratch.path().join(format!("{i}.rs"))).collect();
        for (file, (_, template, source)) in files.iter().zip(&self.sources) {
            std::fs::write(file, source).map_err(|e| failed(template, e.to_string()))?;
        }
        let output = Command::new("rustfmt")
            .args(["--edition", "2021", "--config-path"])
            .arg(root.join("rustfmt.toml"))
            .args(&files)
            .output()
            .map_err(|error| failed("templates/", format!("cannot start rustfmt: {error}")))?;
        if !output.status.success() {
            // rustfmt names the scratch file; name the template that produced it instead.
            let stderr = String::from_utf8_lossy(&output.stderr);
            let culprit = files.iter().zip(&self.sources).find(|(file, _)| stderr.contains(&*file.to_string_lossy()));
            let template = culprit.map_or("templates/", |(_, (_, template, _))| template.as_str());
            return Err(failed(template, stderr.into_owned()));
        }
        for (file, (path, template, _)) in files.iter().zip(self.sources) {
            let formatted = std::fs::read_to_string(file).map_err(|e| failed(&template, e.to_string()))?;
            outputs.insert(path, formatted);
        }
        Ok(())
    }
}

/// The `#[ignore = "..."]` literal of a Deferred cell, as Rust source.
fn ignore_literal(status: Option<&Status>) -> Option<String> {
    match status {
        Some(deferred @ Status::Deferred { .. }) => Some(format!("{:?}", deferred.to_string())),
        _ => None,
    }
}

fn test_context(
    manifest: &Manifest,
    configuration: &ConfigurationEntry,
    variant: &str,
    behaviour: &BehaviourEntry,
    ledger: &Ledger,
) -> Context {
    let cell = CellId::new(configuration.name.clone(), behaviour.behaviour());
    let proactor = variant == "proactor";
    let mut context = Context::new();
    context.insert("command", COMMAND);
    context.insert("configuration", &configuration.name);
    context.insert("provider", &configuration.provider);
    context.insert("behaviour", &behaviour_view(behaviour));
    context.insert("variant", variant);
    context.insert("variant_type", if proactor { "Proactor" } else { "Reactor" });
    context.insert("cell_fn", if proactor { "cell" } else { "blocking_cell" });
    context.insert("aw", if proactor { ".await" } else { "" });
    context.insert("ignore", &ignore_literal(ledger.get(&cell)));
    context.insert("counter", configuration.counter.name());
    context.insert("lease_ms", &configuration.lease_ms);
    // The lease the manifest gives, as the cell declares it to its provider (which must agree).
    let lease = match configuration.lease_ms {
        Some(ms) => format!("Some(std::time::Duration::from_millis({ms}))"),
        None => "None".to_owned(),
    };
    context.insert("lease", &lease);
    context.insert("cumulative_commit", &configuration.cumulative_commit);
    context.insert("single_consumer", &configuration.single_consumer);
    context.insert("bounds", &configuration.bounds().expect("validated at load"));
    debug_assert!(manifest.variants.iter().any(|v| v == variant));
    context
}

pub(crate) fn render_all(
    root: &Path,
    manifest: &Manifest,
    ledger: &Ledger,
    runs: &[ledger::RunRecord],
) -> Result<BTreeMap<PathBuf, String>, GenerateError> {
    let mut tera = Tera::new(&format!("{}/templates/**/*.tera", root.display()))
        .map_err(|error| GenerateError::Template { template: "templates/".into(), chain: chain(&error) })?;
    tera.autoescape_on(vec![]);
    let generated = Path::new(GENERATED);
    let mut outputs = BTreeMap::new();
    let mut unformatted = Unformatted::default();

    let transports: Vec<TransportView> =
        manifest.transports().into_iter().map(|(name, feature)| TransportView { name, feature }).collect();
    let behaviours: Vec<BehaviourView> = manifest.behaviours.iter().map(behaviour_view).collect();
    let mut crate_context = Context::new();
    crate_context.insert("command", COMMAND);
    crate_context.insert("transports", &transports);
    crate_context.insert("variants", &manifest.variants);
    crate_context.insert("behaviours", &behaviours);

    let (page, text) = crate::brokers_page::render(root)?;
    outputs.insert(page, text);

    crate_context.insert("template", "templates/crate/Cargo.toml.tera");
    outputs.insert(generated.join("Cargo.toml"), render(&tera, "crate/Cargo.toml.tera", &crate_context)?);
    crate_context.insert("template", "templates/crate/lib.rs.tera");
    let lib = render(&tera, "crate/lib.rs.tera", &crate_context)?;
    unformatted.add(generated.join("src/lib.rs"), "crate/lib.rs.tera", lib);

    for transport in &transports {
        let configurations: Vec<&ConfigurationEntry> =
            manifest.configurations.iter().filter(|c| c.transport == transport.name).collect();
        let views: Vec<ConfigurationView> =
            configurations.iter().map(|c| ConfigurationView { module: c.module() }).collect();
        let mut context = crate_context.clone();
        context.insert("template", "templates/crate/main.rs.tera");
        context.insert("transport", transport.name);
        context.insert("configurations", &views);
        let main = render(&tera, "crate/main.rs.tera", &context)?;
        let tests = generated.join("tests").join(transport.name);
        outputs.insert(tests.join("main.rs"), rustfmt_one(root, "crate/main.rs.tera", &main)?);

        for configuration in configurations {
            for variant in &manifest.variants {
                for behaviour in &manifest.behaviours {
                    let template = format!("{variant}/{}.rs.tera", behaviour.template);
                    let mut context = test_context(manifest, configuration, variant, behaviour, ledger);
                    context.insert("template", &format!("templates/{template}"));
                    let source = render(&tera, &template, &context)?;
                    let path =
                        tests.join(configuration.module()).join(variant).join(format!("{}.rs", behaviour.module()));
                    unformatted.add(path, &template, source);
                }
            }
        }
    }

    unformatted.format_into(root, &mut outputs)?;
    let rows: Vec<(&str, &str)> =
        manifest.configurations.iter().map(|c| (c.name.as_str(), c.transport.as_str())).collect();
    for (name, page) in ledger.render_pages(&rows, &manifest.behaviour_ids(), runs) {
        outputs.insert(Path::new(LEDGER_DIR).join(name), page);
    }
    Ok(outputs)
}
