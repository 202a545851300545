//! `cargo xtask brokers images`: builds stand-in images carrying the same brokers the local path
//! runs, for Docker engines that cannot pull (air-gapped, or this project's CI). Each broker's
//! stand-in is data: its name, base and build context in `providers/brokers/<folder>/broker.toml`
//! (`contract::brokers`), its Dockerfile beside it:
//!
//! - gcp: Google's pstest behind the project's static launcher, FROM scratch;
//! - the others on a Debian base, `localhost/conformance-base:bookworm`, imported from a
//!   `debootstrap --variant=minbase` root file system (no registry needed: only Debian's mirror),
//!   given to each Dockerfile as the build argument `BASE`; each honours the interface
//!   testcontainers-modules' module expects of the official image, so the same container
//!   definition runs either.
//!
//! Each image is labelled with a digest of its inputs (its build context, and its base image's
//! id), and rebuilt only when they change. Builds that install packages use the host network,
//! since the engine here runs without iptables.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use contract::brokers::{Base, Broker};

use crate::brokers::{install, run_quietly};
use crate::root;

/// The Debian base every stand-in but gcp's builds on.
pub const BASE: &str = "localhost/conformance-base:bookworm";

/// The label carrying an image's input digest.
const INPUTS_LABEL: &str = "conformance.inputs";
/// The suite, variant and mirror of the base; part of its input digest.
const DEBOOTSTRAP: [&str; 4] = ["--variant=minbase", "bookworm", "ROOTFS", "http://deb.debian.org/debian"];

/// Builds the stand-ins of `transports` (every one when empty), and the base those need.
pub fn build(transports: &[String]) -> Result<()> {
    let brokers = contract::brokers::all();
    let names: Vec<&str> = brokers.iter().map(|broker| broker.transport.as_str()).collect();
    if let Some(unknown) = transports.iter().find(|t| !names.contains(&t.as_str())) {
        bail!("brokers images {unknown}: no stand-in image; valid choices: {}", names.join(", "));
    }
    let wanted: Vec<&Broker> =
        brokers.iter().filter(|b| transports.is_empty() || transports.contains(&b.transport)).collect();
    run_quietly(
        Command::new("docker").arg("info"),
        "reach a Docker engine with `docker info` (start one with providers/brokers/docker-engine.sh up target)",
    )?;
    if wanted.iter().any(|broker| broker.image.build.base == Base::Debian) {
        base()?;
    }
    wanted.into_iter().try_for_each(stand_in)
}

/// `broker`'s stand-in: its context (installing the local broker first where the context takes
/// what that installs), its Dockerfile, on its base.
fn stand_in(broker: &Broker) -> Result<()> {
    let build = &broker.image.build;
    if build.install_first {
        install(&broker.transport)?;
    }
    let inputs: Vec<PathBuf> = build.context.iter().map(|path| root().join(path)).collect();
    let context = context(&broker.transport, &inputs)?;
    if build.host_ca {
        // pip inside the build reaches PyPI through the host's network, so it must trust what the
        // host trusts (here a TLS-inspecting proxy's CA, which Debian's bundle in the image lacks).
        std::fs::copy(host_trust(), context.join("host-ca.crt")).context("copying the host's CA bundle")?;
    }
    let dockerfile = root().join("providers/brokers").join(broker.folder).join("Dockerfile");
    std::fs::copy(&dockerfile, context.join("Dockerfile"))
        .with_context(|| format!("copying {} into the build context", dockerfile.display()))?;
    build_image(&broker.image.stand_in, &context, build.base)
}

/// The base: a minimal Debian root file system from the mirror, imported as an image.
fn base() -> Result<()> {
    let digest = digest_of(&[DEBOOTSTRAP.join(" ").as_bytes()]);
    if cached(BASE, &digest)? {
        return Ok(());
    }
    let started = Instant::now();
    crate::brokers::ensure_debootstrap()?;
    let rootfs = root().join("target/stand-in-images/base/rootfs");
    if rootfs.exists() {
        std::fs::remove_dir_all(&rootfs).with_context(|| format!("cannot clear {}", rootfs.display()))?;
    }
    let args = DEBOOTSTRAP.map(|arg| if arg == "ROOTFS" { rootfs.to_str().expect("utf-8 path") } else { arg });
    eprintln!("brokers: debootstrap {} (about a minute)", args.join(" "));
    run_quietly(Command::new("debootstrap").args(args), "debootstrap the Debian base")?;
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run tar")?;
    let imported = Command::new("docker")
        .args(["import", "--change", &format!("LABEL {INPUTS_LABEL}={digest}"), "-", BASE])
        .stdin(tar.stdout.take().expect("piped"))
        .output()
        .context("cannot run docker import")?;
    let tarred = tar.wait()?;
    if !imported.status.success() || !tarred.success() {
        bail!("docker import {BASE} failed (tar {tarred}): {}", String::from_utf8_lossy(&imported.stderr));
    }
    std::fs::remove_dir_all(&rootfs).with_context(|| format!("cannot remove {}", rootfs.display()))?;
    report(BASE, started)
}

/// The CA bundle the host's own pip uses: PIP_CERT, else SSL_CERT_FILE, else Debian's bundle.
fn host_trust() -> PathBuf {
    ["PIP_CERT", "SSL_CERT_FILE"]
        .iter()
        .find_map(|variable| std::env::var_os(variable).filter(|v| !v.is_empty()))
        .map_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"), PathBuf::from)
}

/// A fresh build context under target/stand-in-images/NAME holding copies of `inputs`.
fn context(name: &str, inputs: &[PathBuf]) -> Result<PathBuf> {
    let context = root().join("target/stand-in-images").join(name);
    if context.exists() {
        std::fs::remove_dir_all(&context).with_context(|| format!("cannot clear {}", context.display()))?;
    }
    std::fs::create_dir_all(&context)?;
    for input in inputs {
        let name = input.file_name().expect("an input names a file or folder");
        run_quietly(Command::new("cp").arg("-r").arg(input).arg(context.join(name)), "copy into the build context")?;
    }
    Ok(context)
}

/// Builds `image` from the Dockerfile in `context` on `base` unless its inputs (the context and
/// the base's id) are those it was built from.
fn build_image(image: &str, context: &Path, base: Base) -> Result<()> {
    let mut parts = Vec::new();
    if base == Base::Debian {
        parts
            .push(output(Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", BASE]))?.into_bytes());
    }
    for file in files_under(context)? {
        parts.push(file.strip_prefix(context).expect("under the context").to_string_lossy().into_owned().into_bytes());
        parts.push(std::fs::read(&file)?);
    }
    let digest = digest_of(&parts.iter().map(Vec::as_slice).collect::<Vec<_>>());
    if cached(image, &digest)? {
        return Ok(());
    }
    let started = Instant::now();
    eprintln!("brokers: building {image}");
    run_quietly(
        Command::new("docker")
            .args([
                "build",
                "--quiet",
                "--force-rm",
                "--network",
                "host",
                "--label",
                &format!("{INPUTS_LABEL}={digest}"),
                "--build-arg",
                &format!("BASE={BASE}"),
            ])
            .args(["--tag", image])
            .arg(context),
        &format!("docker build {image}"),
    )?;
    report(image, started)
}

/// Every file under `dir`, sorted.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(files_under(&path)?);
        } else {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// SHA-256 over length-prefixed parts, in hex.
fn digest_of(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether `image` exists with `digest` as its input label; says so when it does.
fn cached(image: &str, digest: &str) -> Result<bool> {
    let format = format!("{{{{index .Config.Labels \"{INPUTS_LABEL}\"}}}}");
    let labelled = Command::new("docker").args(["image", "inspect", "--format", &format, image]).output()?;
    let fresh = labelled.status.success() && String::from_utf8_lossy(&labelled.stdout).trim() == digest;
    if fresh {
        eprintln!("brokers: {image} is up to date (inputs {})", &digest[..12]);
    }
    Ok(fresh)
}

/// Says how long `image` took and how big it is.
fn report(image: &str, started: Instant) -> Result<()> {
    let size = output(Command::new("docker").args(["image", "inspect", "--format", "{{.Size}}", image]))?;
    let megabytes = size.parse::<f64>().unwrap_or(0.0) / 1e6;
    eprintln!("brokers: built {image} in {:.1} s ({megabytes:.0} MB)", started.elapsed().as_secs_f64());
    Ok(())
}

/// A command's trimmed stdout; its stderr in the error.
fn output(command: &mut Command) -> Result<String> {
    let out = command.output().with_context(|| format!("cannot run {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
