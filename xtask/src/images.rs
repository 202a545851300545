//! `cargo xtask brokers images`: builds stand-in images carrying the same brokers the local path
//! runs, for Docker engines that cannot pull (air-gapped, or this project's CI).

use std::process::Command;

use anyhow::{Context, Result};

use crate::brokers::{install_pstest, run_quietly};
use crate::root;

/// The Pub/Sub stand-in: `localhost/` so no engine ever pulls a look-alike from a public registry
/// (the name cannot resolve to Docker Hub); the tag names the pstest module the launcher pins.
/// The container source uses it when CONFORMANCE_PUBSUB_IMAGE names it.
pub const PUBSUB_STAND_IN: &str = "localhost/conformance-pstest:pubsub-v2.9.0";

/// The Pub/Sub stand-in image: the static launcher `install gcp` builds, as the entrypoint of an
/// image FROM scratch. Its container mode speaks the interface testcontainers-modules'
/// `CloudSdk::pubsub()` expects of Google's image (gcloud's arguments, the ready line on stderr).
/// SQS has no stand-in: moto needs Python, which an image FROM scratch cannot carry.
pub fn build() -> Result<()> {
    install_pstest()?;
    let started = std::time::Instant::now();
    let context = root().join("target/stand-in-images/pstest");
    std::fs::create_dir_all(&context)?;
    std::fs::copy(root().join(".brokers/gcp/pstest-launcher"), context.join("pstest-launcher"))
        .context("copying the pstest launcher into the image context")?;
    std::fs::write(
        context.join("Dockerfile"),
        "# Written by `cargo xtask brokers images`: Google's pstest behind the project's launcher.\n\
         FROM scratch\n\
         COPY pstest-launcher /pstest-launcher\n\
         EXPOSE 8085\n\
         ENTRYPOINT [\"/pstest-launcher\"]\n",
    )?;
    run_quietly(
        Command::new("docker").args(["build", "--quiet", "--tag", PUBSUB_STAND_IN]).arg(&context),
        &format!("docker build {PUBSUB_STAND_IN} (is the docker CLI installed and a daemon running?)"),
    )?;
    eprintln!(
        "brokers: built {PUBSUB_STAND_IN} in {:.1} s; use it with CONFORMANCE_PUBSUB_IMAGE={PUBSUB_STAND_IN}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
