//! `cargo xtask brokers install <transport>`: puts what a transport's local broker needs under
//! `.brokers/<transport>/`, from the registries this machine reaches. Idempotent and quick when
//! already installed, so `conformance` and `test` call it every time. `brokers images` is in
//! `images`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use contract::brokers::Install;

use crate::root;

#[derive(Subcommand)]
pub enum BrokersTask {
    /// Install the local broker of each transport (memory: nothing; sqs: moto in a venv, or with
    /// --impl elasticmq the ElasticMQ jars and the project's launcher; gcp: the pstest launcher;
    /// rocketmq: the Apache RocketMQ jars and the project's launcher, or with --impl
    /// rocketmq-rust the Rust name server and broker, built with cargo install: about 15 minutes;
    /// rabbitmq: Debian's rabbitmq-server package, run as a project-owned node;
    /// kafka: the Apache Kafka jars and the project's KRaft launcher)
    Install {
        /// Transports to install for
        #[arg(required = true, value_name = "TRANSPORT")]
        transports: Vec<String>,
        /// The implementation to install (default: each transport's reference, moto for sqs and
        /// apache for rocketmq; elasticmq and rocketmq-rust are for fidelity runs)
        #[arg(long = "impl", value_enum, value_name = "IMPLEMENTATION")]
        implementation: Option<Implementation>,
    },
    /// Build local stand-in broker images for engines that cannot pull (gcp: the pstest launcher FROM scratch)
    Images {
        /// Only these transports' images (and the Debian base they need); default: every one
        #[arg(value_name = "TRANSPORT")]
        transports: Vec<String>,
    },
}

/// The transports with a local broker (each with its facts, `contract::brokers`), and memory,
/// which needs none.
pub fn installable() -> Vec<&'static str> {
    std::iter::once("memory").chain(contract::brokers::all().iter().map(|b| b.transport.as_str())).collect()
}

/// The broker implementations `--impl` names (the contract's, as the test binaries read them).
pub use contract::Implementation;

/// `brokers install`: each of `transports`, as `implementation` when one is named (it must be
/// an implementation of every transport named).
pub fn install_all(transports: &[String], implementation: Option<Implementation>) -> Result<()> {
    if let Some(implementation) = implementation {
        let transport = implementation.transport();
        if transports.iter().any(|t| t != transport) {
            bail!(
                "brokers install --impl {}: an implementation of {transport}; install it with `brokers install {transport} --impl {0}`",
                implementation.name()
            );
        }
    }
    transports.iter().try_for_each(|transport| install_implementation(transport, implementation))
}

/// Installs `transport`'s local broker: `implementation` when it is one of that transport's,
/// else the reference implementation.
pub fn install_implementation(transport: &str, implementation: Option<Implementation>) -> Result<()> {
    match (transport, implementation) {
        ("sqs", Some(Implementation::ElasticMq)) => install_elasticmq(),
        ("rocketmq", Some(Implementation::RocketMqRust)) => install_rocketmq_rust(),
        ("rabbitmq", Some(Implementation::RabbitMq4)) => install_on_trixie("rabbitmq-server", "4.0.5"),
        ("redis", Some(Implementation::Redis8)) => install_on_trixie("redis-server", "8.0.2"),
        ("mqtt", Some(Implementation::Mosquitto2)) => install_on_trixie("mosquitto", "2.0.21"),
        ("postgres", Some(Implementation::Postgres17)) => install_on_trixie("postgresql-17", "17"),
        ("kafka", Some(Implementation::Kafka4)) => install_java_launcher_version(
            "Kafka 4.4.0",
            Path::new("providers/brokers/kafka"),
            Path::new("providers/brokers/kafka/4.4.0"),
            ".brokers/kafka-4.4.0",
            "KafkaLauncher",
        ),
        _ => install(transport),
    }
}

/// Installs `transport`'s local broker as its facts' recipe says.
pub fn install(transport: &str) -> Result<()> {
    if transport == "memory" {
        return Ok(());
    }
    let Some(broker) = contract::brokers::of(transport) else {
        bail!("brokers install {transport}: no such transport; valid choices: {}", installable().join(", "))
    };
    match &broker.install {
        Install::Moto => install_moto(),
        Install::Pstest => install_pstest(),
        // A package Debian ships; the harness runs its binary on a loopback port, never the
        // package's service.
        Install::Debian { package, binary, system_user } => {
            install_debian_package(package, Path::new(binary))?;
            system_user.as_deref().map_or(Ok(()), ensure_system_user)
        }
        Install::Maven { name, source, into, launcher } => install_java_launcher(name, source, into, launcher),
        Install::Go { module, version, into } => install_go_command(module, version, into),
        Install::Npm { source, into } => install_npm_packages(source, into),
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

/// Makes the unprivileged system user `user` where missing: a server that refuses to run as root
/// (PostgreSQL; every machine here runs as root) runs as it.
fn ensure_system_user(user: &str) -> Result<()> {
    let user_exists = Command::new("id").args(["-u", user]).output().is_ok_and(|o| o.status.success());
    if !user_exists {
        eprintln!("brokers: creating the system user {user}, which runs the local broker");
        run_quietly(
            Command::new("useradd").args([
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                user,
            ]),
            &format!("create the system user {user} with useradd"),
        )?;
    }
    Ok(())
}

/// moto, pinned in providers/brokers/sqs/requirements.txt, in a project-owned virtualenv.
fn install_moto() -> Result<()> {
    let root = root();
    let venv = root.join(".brokers/sqs/venv");
    let python = venv.join("bin/python");
    let requirements = root.join("providers/brokers/sqs/requirements.txt");
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
        .context("providers/brokers/sqs/requirements.txt pins no moto version")?;
    let check = format!("import moto, moto.server, sys; sys.exit(0 if moto.__version__ == {pinned:?} else 1)");
    Ok(Command::new(python).args(["-c", &check]).output().is_ok_and(|output| output.status.success()))
}

/// Google's Pub/Sub fake behind the project's launcher (providers/brokers/pstest), built with the
/// machine's Go from the Go module proxy; rebuilt when its sources are newer than the binary.
/// Built static (CGO_ENABLED=0) so the very binary the local path runs also serves as the
/// entrypoint of the stand-in image `brokers images` builds FROM scratch.
fn install_pstest() -> Result<()> {
    let root = root();
    let source = root.join("providers/brokers/pstest");
    let binary = root.join(".brokers/gcp/pstest-launcher");
    if up_to_date(&binary, &["main.go", "go.mod", "go.sum"].map(|file| source.join(file))) {
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

/// `module`@`version`'s command, built static (CGO_ENABLED=0, so the stand-in image can run it
/// FROM scratch) by `go install` into `into`; a marker there names what was built, so a changed
/// version builds again and an unchanged one is not rebuilt.
fn install_go_command(module: &str, version: &str, into: &str) -> Result<()> {
    let into = root().join(into);
    let marker = into.join(".installed");
    let wanted = format!("{module}@{version}");
    if std::fs::read_to_string(&marker).is_ok_and(|built| built.trim() == wanted) {
        return Ok(());
    }
    eprintln!("brokers: building {wanted} into {} (go install; about 1 minute)", into.display());
    std::fs::create_dir_all(&into).with_context(|| format!("cannot create {}", into.display()))?;
    run_quietly(
        Command::new("go").env("CGO_ENABLED", "0").env("GOBIN", &into).args(["install", &wanted]),
        &format!("go install {wanted}"),
    )?;
    std::fs::write(&marker, &wanted).with_context(|| format!("cannot write {}", marker.display()))
}

/// The packages `source`/package-lock.json pins (every transitive one, by integrity hash),
/// installed by `npm ci` into `into`; skipped while `into` holds that very lock file. Install
/// scripts are not run: nothing the project runs needs them.
fn install_npm_packages(source: &str, into: &str) -> Result<()> {
    let (source, into) = (root().join(source), root().join(into));
    let read = |path: &Path| std::fs::read(path).with_context(|| format!("cannot read {}", path.display()));
    let lock = read(&source.join("package-lock.json"))?;
    let installed = into.join("node_modules").join(".package-lock.json");
    if into.join("package-lock.json").exists() && installed.exists() && read(&into.join("package-lock.json"))? == lock {
        return Ok(());
    }
    eprintln!(
        "brokers: installing the npm packages {} pins into {} (npm ci; about 30 s)",
        source.display(),
        into.display()
    );
    std::fs::create_dir_all(&into).with_context(|| format!("cannot create {}", into.display()))?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), into.join(file))
            .with_context(|| format!("cannot copy {file} into {}", into.display()))?;
    }
    run_quietly(
        Command::new("npm").current_dir(&into).args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"]),
        "npm ci",
    )
}

/// Whether `built` exists and is newer than every one of `sources`.
fn up_to_date(built: &Path, sources: &[PathBuf]) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let newest_source = sources.iter().filter_map(|file| modified(file)).max();
    matches!((modified(built), newest_source), (Some(built), Some(source)) if built >= source)
}

/// ElasticMQ's server from Maven Central, pinned in providers/brokers/elasticmq/pom.xml, and the
/// project's launcher compiled against it, under .brokers/sqs/elasticmq; run with the machine's
/// Java.
fn install_elasticmq() -> Result<()> {
    install_java_launcher("ElasticMQ", "providers/brokers/elasticmq", ".brokers/sqs/elasticmq", "ElasticMqLauncher")
}

/// The jars `source`/pom.xml pins, fetched with Maven into `install`/lib, and `source`'s Java files
/// (`launcher`.java among them) compiled against them into `install`/classes; skipped while the
/// class is newer than every one of them.
fn install_java_launcher(name: &str, source: &str, install: &str, launcher: &str) -> Result<()> {
    install_java_launcher_version(name, Path::new(source), Path::new(source), install, launcher)
}

/// As [`install_java_launcher`], for a version of a broker whose launcher is shared: the jars of
/// `version`/pom.xml, `launcher`.java from `shared`, and `version`'s own Java files (the classes
/// that differ between versions) beside it.
fn install_java_launcher_version(
    name: &str,
    shared: &Path,
    version: &Path,
    install: &str,
    launcher: &str,
) -> Result<()> {
    let root = root();
    let (version, install) = (root.join(version), root.join(install));
    let java_files = |folder: &Path| -> Result<Vec<PathBuf>> {
        let entries = std::fs::read_dir(folder).with_context(|| format!("cannot list {}", folder.display()))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry.with_context(|| format!("cannot list {}", folder.display()))?.path();
            if path.extension().is_some_and(|extension| extension == "java") {
                files.push(path);
            }
        }
        Ok(files)
    };
    let mut sources = java_files(&version)?;
    let shared_launcher = root.join(shared).join(format!("{launcher}.java"));
    if !sources.contains(&shared_launcher) {
        sources.push(shared_launcher);
    }
    sources.sort();
    let inputs: Vec<PathBuf> = sources.iter().cloned().chain([version.join("pom.xml")]).collect();
    if up_to_date(&install.join(format!("classes/{launcher}.class")), &inputs) {
        return Ok(());
    }
    let lib = install.join("lib");
    eprintln!("brokers: fetching the {name} jars from Maven Central into {}", lib.display());
    // Fresh lib and classes folders: jars and classes of an older pinned version must not stay on
    // the class path.
    for folder in [&lib, &install.join("classes")] {
        if folder.exists() {
            std::fs::remove_dir_all(folder).with_context(|| format!("cannot clear {}", folder.display()))?;
        }
    }
    run_quietly(
        Command::new("mvn")
            .args(["--batch-mode", "--quiet", "-f"])
            .arg(version.join("pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display())),
        &format!("fetch the {name} jars with mvn dependency:copy-dependencies"),
    )?;
    run_quietly(
        Command::new("javac").arg("-cp").arg(lib.join("*")).arg("-d").arg(install.join("classes")).args(&sources),
        &format!("compile the {name} launcher with javac"),
    )
}

/// `package` as Debian 13 (trixie) packages it, at upstream `version`, in the Debian 13 root under
/// `.brokers/trixie` (debootstrapped from Debian's mirror the first time, about a minute; then
/// apt-get inside it, through `providers/brokers/trixie/in-root.sh`; needs root, as the machines
/// here are): the broker versions users run next, beside the references the host's Debian 12
/// packages. The providers run the project's launchers inside it (`providers::local::in_trixie`).
fn install_on_trixie(package: &str, version: &str) -> Result<()> {
    let rootfs = root().join(".brokers/trixie");
    let in_root = root().join("providers/brokers/trixie/in-root.sh");
    // Debian's version of the package, without its epoch ("5:8.0.2-3" is 8.0.2).
    let installed = || -> Option<String> {
        let output = Command::new("chroot")
            .arg(&rootfs)
            .args(["dpkg-query", "-W", "-f", "${Version}", package])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        output.status.success().then(|| text.split_once(':').map_or(text.clone(), |(_, rest)| rest.to_owned()))
    };
    // "8.0.2" is 8.0.2-3; "17" is any 17.x.
    let wanted =
        |installed: &str| [format!("{version}-"), format!("{version}.")].iter().any(|p| installed.starts_with(p));
    if installed().is_some_and(|installed| wanted(&installed)) {
        return Ok(());
    }
    if !rootfs.join("usr/bin/apt-get").exists() {
        ensure_debootstrap()?;
        if rootfs.exists() {
            std::fs::remove_dir_all(&rootfs).with_context(|| format!("cannot clear {}", rootfs.display()))?;
        }
        eprintln!("brokers: debootstrap a Debian 13 (trixie) root into {} (about a minute)", rootfs.display());
        run_quietly(
            Command::new("debootstrap")
                .args(["--variant=minbase", "trixie"])
                .arg(&rootfs)
                .arg("http://deb.debian.org/debian"),
            "debootstrap trixie",
        )?;
        std::fs::copy("/etc/resolv.conf", rootfs.join("etc/resolv.conf"))
            .context("cannot copy /etc/resolv.conf into the trixie root")?;
    }
    eprintln!("brokers: apt-get install {package} in the Debian 13 root (about 15 s)");
    let apt = |args: &[&str], what: &str| {
        run_quietly(
            Command::new(&in_root).arg(&rootfs).args(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]).args(args),
            what,
        )
    };
    apt(&["update", "-qq"], "apt-get update (trixie)")?;
    apt(&["install", "-y", "-qq", "--no-install-recommends", package], &format!("apt-get install {package} (trixie)"))?;
    match installed() {
        Some(installed) if wanted(&installed) => Ok(()),
        other => bail!(
            "brokers: trixie's {package} is {other:?}, not the {version} the fidelity table records (its broker.toml)"
        ),
    }
}

/// The pinned version of the Rust name server and broker (crates.io `rocketmq-namesrv` and
/// `rocketmq-broker`, the project of the gateway's client `rocketmq-client-rust`): the rocketmq
/// facts' `rocketmq-rust X.Y.Z`.
fn rocketmq_rust_version() -> &'static str {
    contract::brokers::of("rocketmq")
        .and_then(|broker| broker.implementations.iter().find(|other| other.name == "rocketmq-rust"))
        .and_then(|other| other.version.strip_prefix("rocketmq-rust "))
        .expect("providers/brokers/rocketmq/broker.toml gives rocketmq-rust's version as \"rocketmq-rust X.Y.Z\"")
}
/// The crates that carry the Rust name server and broker, and their binaries.
const ROCKETMQ_RUST_CRATES: [(&str, &str); 2] =
    [("rocketmq-namesrv", "rocketmq-namesrv-rust"), ("rocketmq-broker", "rocketmq-broker-rust")];

/// The Rust name server and broker, built by `cargo install` at the pinned version (with their
/// published lock files) into .brokers/rocketmq/rust/bin; about 15 minutes on two cores, once.
/// They build in a target folder of their own (whatever CARGO_TARGET_DIR says: the workspace's
/// target must not be touched), removed once they are installed. The launcher that runs them is
/// providers/brokers/rocketmq-rust/launcher.sh.
fn install_rocketmq_rust() -> Result<()> {
    let version = rocketmq_rust_version();
    let install = root().join(".brokers/rocketmq/rust");
    let pinned = format!("version={version}");
    let installed = |binary: &str| {
        Command::new(install.join("bin").join(binary))
            .arg("--version")
            .output()
            .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).lines().any(|line| line == pinned))
    };
    if ROCKETMQ_RUST_CRATES.iter().all(|(_, binary)| installed(binary)) {
        return Ok(());
    }
    eprintln!(
        "brokers: building rocketmq-rust {version} (name server and broker) with cargo install into {} \
         (about 15 minutes on two cores)",
        install.display()
    );
    let crates = ROCKETMQ_RUST_CRATES.map(|(name, _)| format!("{name}@{version}"));
    let build = root().join("target/rocketmq-rust-install");
    run_quietly(
        crate::build::cargo()
            // --force: a binary of another version (or half an earlier install) may be there.
            .args(["install", "--locked", "--force", "--quiet", "--root"])
            .arg(&install)
            .args(crates)
            .env("CARGO_TARGET_DIR", &build),
        "cargo install rocketmq-namesrv and rocketmq-broker",
    )?;
    std::fs::remove_dir_all(&build).with_context(|| format!("cannot remove {}", build.display()))?;
    if let Some((_, missing)) = ROCKETMQ_RUST_CRATES.iter().find(|(_, binary)| !installed(binary)) {
        bail!("{missing} {version} is still missing from {} after cargo install", install.join("bin").display());
    }
    Ok(())
}

/// The version of `transport`'s local broker the project pins, for the implementation a run
/// announced: its facts' version, or the version of the other implementation it names
/// (`elasticmq`, `rocketmq-rust`). PostgreSQL's minor version is whatever Debian ships: the server
/// says it.
pub fn pinned_version(transport: &str, implementation: &str) -> Option<String> {
    let broker = contract::brokers::of(transport)?;
    if let Some(other) = broker.implementations.iter().find(|other| other.name == implementation) {
        return Some(other.version.clone());
    }
    match &broker.install {
        Install::Debian { binary, .. } if transport == "postgres" => {
            let output = Command::new(binary).arg("--version").output().ok()?;
            let version = String::from_utf8_lossy(&output.stdout);
            Some(format!("PostgreSQL {}", version.trim().strip_prefix("postgres (PostgreSQL) ")?))
        }
        _ => Some(broker.version.clone()),
    }
}

/// A broker Debian packages (redis-server, mosquitto, PostgreSQL): `binary` is all the project
/// uses, started by its own launcher on a free loopback port, never as the package's service
/// (machines here run no init system, so installing the package starts none). When `binary` is
/// missing the package is installed with apt-get, which needs root; a machine without apt-get
/// gets an error naming the package to install by hand.
pub(crate) fn install_debian_package(package: &str, binary: &Path) -> Result<()> {
    if binary.exists() {
        return Ok(());
    }
    let apt_available = Command::new("apt-get").arg("--version").output().is_ok_and(|o| o.status.success());
    if !apt_available {
        bail!(
            "brokers: {} is missing and apt-get is not available to install the Debian package {package}; \
             install {package} (or your system's package of it) by hand",
            binary.display()
        );
    }
    eprintln!("brokers: installing the Debian package {package} with apt-get (about 15 s)");
    let apt = |args: &[&str], what: &str| {
        run_quietly(Command::new("apt-get").env("DEBIAN_FRONTEND", "noninteractive").args(args), what)
    };
    // The package lists may be stale or absent on a fresh machine: refresh them first.
    apt(&["update", "-qq"], "apt-get update")?;
    apt(&["install", "-y", "-qq", "--no-install-recommends", package], &format!("apt-get install {package}"))?;
    if !binary.exists() {
        bail!("brokers: apt-get installed {package} but {} is still missing", binary.display());
    }
    Ok(())
}

/// debootstrap from Debian's packages, where missing.
pub(crate) fn ensure_debootstrap() -> Result<()> {
    if Command::new("debootstrap").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    eprintln!("brokers: installing debootstrap with apt-get");
    run_quietly(Command::new("apt-get").args(["update", "-qq"]), "apt-get update (is apt-get available, as root?)")?;
    run_quietly(
        Command::new("apt-get").args(["install", "-y", "-qq", "debootstrap"]).env("DEBIAN_FRONTEND", "noninteractive"),
        "apt-get install debootstrap",
    )
}
