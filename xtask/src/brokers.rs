//! `cargo xtask brokers install <transport>`: puts what a transport's local broker needs under
//! `.brokers/<transport>/`, from the registries this machine reaches. Idempotent and quick when
//! already installed, so `conformance` and `test` call it every time. `brokers images` is in
//! `images`.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use crate::root;

#[derive(Subcommand)]
pub enum BrokersTask {
    /// Install the local broker of each transport (memory: nothing; sqs: moto in a venv, or with
    /// --impl elasticmq the ElasticMQ jars and the project's launcher; gcp: the pstest launcher;
    /// rocketmq: the Apache RocketMQ jars and the project's launcher)
    Install {
        /// Transports to install for
        #[arg(required = true, value_name = "TRANSPORT")]
        transports: Vec<String>,
        /// The SQS implementation to install (moto is the reference; elasticmq is for fidelity runs)
        #[arg(long = "impl", value_enum, value_name = "IMPLEMENTATION", default_value_t = SqsImpl::Moto)]
        implementation: SqsImpl,
    },
    /// Build local stand-in broker images for engines that cannot pull (gcp: the pstest launcher FROM scratch)
    Images,
}

/// The transports with a local broker, and the ones that need none.
pub const INSTALLABLE: [&str; 4] = ["memory", "sqs", "gcp", "rocketmq"];

/// The SQS implementations of `providers::implementation` (xtask does not link providers), as
/// CONFORMANCE_SQS_IMPL names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SqsImpl {
    /// moto: SQS and SNS; the reference implementation of the main ledger
    Moto,
    /// ElasticMQ: SQS only; recorded in the fidelity table
    #[value(name = "elasticmq")]
    ElasticMq,
}

impl SqsImpl {
    pub const VARIABLE: &'static str = "CONFORMANCE_SQS_IMPL";

    pub fn name(self) -> &'static str {
        match self {
            SqsImpl::Moto => "moto",
            SqsImpl::ElasticMq => "elasticmq",
        }
    }

    /// The reference implementation, whose verdicts the main ledger records.
    pub fn is_reference(self) -> bool {
        self == SqsImpl::Moto
    }

    /// The SQS configurations it can carry (ElasticMQ has no SNS API).
    pub fn serves(self, configuration: &str) -> bool {
        self == SqsImpl::Moto || !configuration.starts_with("sns")
    }
}

pub fn run(task: BrokersTask) -> Result<()> {
    match task {
        BrokersTask::Install { transports, implementation } => {
            if implementation != SqsImpl::Moto && transports.iter().any(|t| t != "sqs") {
                bail!("brokers install --impl {}: only sqs has a second implementation", implementation.name());
            }
            transports.iter().try_for_each(|transport| install_implementation(transport, implementation))
        }
        BrokersTask::Images => crate::images::build(),
    }
}

/// Installs `transport`'s local broker, in `implementation` for sqs.
pub fn install_implementation(transport: &str, implementation: SqsImpl) -> Result<()> {
    match (transport, implementation) {
        ("sqs", SqsImpl::ElasticMq) => install_elasticmq(),
        _ => install(transport),
    }
}

pub fn install(transport: &str) -> Result<()> {
    match transport {
        "memory" => Ok(()),
        "sqs" => install_moto(),
        "gcp" => install_pstest(),
        "rocketmq" => install_rocketmq(),
        other => bail!("brokers install {other}: no such transport; valid choices: {}", INSTALLABLE.join(", ")),
    }
}

pub(crate) fn run_quietly(command: &mut Command, what: &str) -> Result<()> {
    let output = command.output().with_context(|| format!("cannot {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// moto, pinned in providers/brokers/requirements-sqs.txt, in a project-owned virtualenv.
fn install_moto() -> Result<()> {
    let root = root();
    let venv = root.join(".brokers/sqs/venv");
    let python = venv.join("bin/python");
    let requirements = root.join("providers/brokers/requirements-sqs.txt");
    if !python.exists() {
        eprintln!("brokers: creating {}", venv.display());
        run_quietly(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "create the moto virtualenv with python3 -m venv",
        )?;
    }
    if installed(&python, &requirements)? {
        return Ok(());
    }
    eprintln!("brokers: installing moto into {}", venv.display());
    run_quietly(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements),
        "pip install moto[server]",
    )?;
    if !installed(&python, &requirements)? {
        bail!("moto is still missing from {} after pip install", venv.display());
    }
    Ok(())
}

/// Whether the pinned moto version imports in the virtualenv.
fn installed(python: &Path, requirements: &Path) -> Result<bool> {
    let pinned = std::fs::read_to_string(requirements)?
        .lines()
        .find_map(|line| line.split_once("==").map(|(_, version)| version.trim().to_owned()))
        .context("requirements-sqs.txt pins no moto version")?;
    let check = format!("import moto, moto.server, sys; sys.exit(0 if moto.__version__ == {pinned:?} else 1)");
    Ok(Command::new(python).args(["-c", &check]).output().is_ok_and(|output| output.status.success()))
}

/// Google's Pub/Sub fake behind the project's launcher (providers/brokers/pstest), built with the
/// machine's Go from the Go module proxy; rebuilt when its sources are newer than the binary.
/// Built static (CGO_ENABLED=0) so the very binary the local path runs also serves as the
/// entrypoint of the stand-in image `brokers images` builds FROM scratch.
pub(crate) fn install_pstest() -> Result<()> {
    let root = root();
    let source = root.join("providers/brokers/pstest");
    let binary = root.join(".brokers/gcp/pstest-launcher");
    if up_to_date(&binary, &source, &["main.go", "go.mod", "go.sum"]) {
        return Ok(());
    }
    eprintln!(
        "brokers: building the Pub/Sub fake launcher into {} (first build downloads modules, about 2 minutes)",
        binary.display()
    );
    run_quietly(
        Command::new("go").current_dir(&source).env("CGO_ENABLED", "0").args(["build", "-o"]).arg(&binary).arg("."),
        "go build the pstest launcher",
    )
}

/// Whether `built` exists and is newer than every one of `sources` in `folder`.
fn up_to_date(built: &Path, folder: &Path, sources: &[&str]) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let newest_source = sources.iter().filter_map(|file| modified(&folder.join(file))).max();
    matches!((modified(built), newest_source), (Some(built), Some(source)) if built >= source)
}

/// Apache RocketMQ (name server and broker) from Maven Central, pinned in
/// providers/brokers/rocketmq/pom.xml, and the project's launcher compiled against it; both run
/// with the machine's Java.
fn install_rocketmq() -> Result<()> {
    let root = root();
    let source = root.join("providers/brokers/rocketmq");
    let install = root.join(".brokers/rocketmq");
    let launcher = install.join("classes/Launcher.class");
    if up_to_date(&launcher, &source, &["pom.xml", "Launcher.java"]) {
        return Ok(());
    }
    eprintln!("brokers: fetching the RocketMQ jars from Maven Central into {}", install.join("lib").display());
    // A fresh lib folder: jars of an older pinned version must not stay on the class path.
    let lib = install.join("lib");
    if lib.exists() {
        std::fs::remove_dir_all(&lib).with_context(|| format!("cannot clear {}", lib.display()))?;
    }
    run_quietly(
        Command::new("mvn")
            .args(["--batch-mode", "--quiet", "-f"])
            .arg(source.join("pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display())),
        "fetch the RocketMQ jars with mvn dependency:copy-dependencies",
    )?;
    run_quietly(
        Command::new("javac")
            .arg("-cp")
            .arg(lib.join("*"))
            .arg("-d")
            .arg(install.join("classes"))
            .arg(source.join("Launcher.java")),
        "compile the RocketMQ launcher with javac",
    )
}

/// ElasticMQ's server from Maven Central, pinned in providers/brokers/elasticmq/pom.xml, and the
/// project's launcher compiled against it, under .brokers/sqs/elasticmq; run with the machine's
/// Java. The same steps as RocketMQ's.
fn install_elasticmq() -> Result<()> {
    let root = root();
    let source = root.join("providers/brokers/elasticmq");
    let install = root.join(".brokers/sqs/elasticmq");
    let launcher = install.join("classes/ElasticMqLauncher.class");
    if up_to_date(&launcher, &source, &["pom.xml", "ElasticMqLauncher.java"]) {
        return Ok(());
    }
    eprintln!("brokers: fetching the ElasticMQ jars from Maven Central into {}", install.join("lib").display());
    let lib = install.join("lib");
    if lib.exists() {
        std::fs::remove_dir_all(&lib).with_context(|| format!("cannot clear {}", lib.display()))?;
    }
    run_quietly(
        Command::new("mvn")
            .args(["--batch-mode", "--quiet", "-f"])
            .arg(source.join("pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display())),
        "fetch the ElasticMQ jars with mvn dependency:copy-dependencies",
    )?;
    run_quietly(
        Command::new("javac")
            .arg("-cp")
            .arg(lib.join("*"))
            .arg("-d")
            .arg(install.join("classes"))
            .arg(source.join("ElasticMqLauncher.java")),
        "compile the ElasticMQ launcher with javac",
    )
}

/// The version of `transport`'s local broker the project pins, for the implementation a run
/// announced (`elasticmq`; any other name means the transport's one or reference implementation):
/// moto in requirements-sqs.txt, ElasticMQ in its pom, the Pub/Sub module behind pstest in its
/// go.mod, Apache RocketMQ in its pom.
pub fn pinned_version(transport: &str, implementation: &str) -> Option<String> {
    let brokers = root().join("providers/brokers");
    let (file, find): (&str, fn(&str) -> Option<String>) = match (transport, implementation) {
        ("sqs", "elasticmq") => ("elasticmq/pom.xml", |line| {
            let rest = line.trim().strip_prefix("<elasticmq.version>")?;
            Some(format!("ElasticMQ {}", rest.strip_suffix("</elasticmq.version>")?))
        }),
        ("sqs", _) => {
            ("requirements-sqs.txt", |line| line.strip_prefix("moto[server]==").map(|v| format!("moto {}", v.trim())))
        }
        ("gcp", _) => ("pstest/go.mod", |line| {
            line.trim()
                .strip_prefix("require cloud.google.com/go/pubsub/v2 ")
                .map(|v| format!("pubsub pstest {}", v.trim()))
        }),
        ("rocketmq", _) => ("rocketmq/pom.xml", |line| {
            let rest = line.trim().strip_prefix("<rocketmq.version>")?;
            Some(format!("Apache RocketMQ {}", rest.strip_suffix("</rocketmq.version>")?))
        }),
        _ => return None,
    };
    std::fs::read_to_string(brokers.join(file)).ok()?.lines().find_map(find)
}
