//! `cargo xtask brokers images`: builds stand-in images carrying the same brokers the local path
//! runs, for Docker engines that cannot pull (air-gapped, or this project's CI):
//!
//! - gcp: Google's pstest behind the project's static launcher, FROM scratch;
//! - a Debian base, `localhost/conformance-base:bookworm`, imported from a `debootstrap
//!   --variant=minbase` root file system (no registry needed: only Debian's mirror);
//! - on it, sqs: moto (the reference implementation) in a virtualenv, answering as LocalStack
//!   does on port 4566; rocketmq: the Apache RocketMQ jars and launcher with Debian's JRE;
//! - and the brokers Debian packages, each honouring the interface testcontainers-modules' module
//!   expects of the official image, so the same container definition runs either: redis
//!   (redis-server), postgres (postgresql-15 behind an entrypoint of the project's), mqtt
//!   (mosquitto), rabbitmq (rabbitmq-server with the management image's plugins); and kafka: the
//!   Kafka jars and the project's launcher with Debian's JRE, started as the apache/kafka image
//!   starts its broker.
//!
//! Each image is labelled with a digest of its inputs (its build context, and its base image's
//! id), and rebuilt only when they change. Builds that install packages use the host network,
//! since the engine here runs without iptables.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::brokers::{install, install_pstest, run_quietly};
use crate::root;

/// The Pub/Sub stand-in: `localhost/` so no engine ever pulls a look-alike from a public registry
/// (the name cannot resolve to Docker Hub); the tag names the pstest module the launcher pins.
/// The container source uses it when CONFORMANCE_PUBSUB_IMAGE names it.
pub const PUBSUB_STAND_IN: &str = "localhost/conformance-pstest:pubsub-v2.9.0";
/// The Debian base every other stand-in builds on.
pub const BASE: &str = "localhost/conformance-base:bookworm";
/// The SQS stand-in (moto, as pinned in providers/brokers/requirements-sqs.txt), used through
/// CONFORMANCE_LOCALSTACK_IMAGE.
pub const SQS_STAND_IN: &str = "localhost/conformance-moto:5.2.5";
/// The RocketMQ image (Apache RocketMQ 5.3.3, as pinned in providers/brokers/rocketmq/pom.xml):
/// the default of the rocketmq container source (providers::rocketmq::ROCKETMQ_IMAGE).
pub const ROCKETMQ_STAND_IN: &str = "localhost/conformance-rocketmq:5.3.3";
/// The Redis stand-in (Debian 12's redis-server), used through CONFORMANCE_REDIS_IMAGE.
pub const REDIS_STAND_IN: &str = "localhost/conformance-redis:7.0.15";
/// The PostgreSQL stand-in (Debian 12's postgresql-15), used through CONFORMANCE_POSTGRES_IMAGE.
pub const POSTGRES_STAND_IN: &str = "localhost/conformance-postgres:15";
/// The MQTT stand-in (Debian 12's mosquitto), used through CONFORMANCE_MQTT_IMAGE.
pub const MQTT_STAND_IN: &str = "localhost/conformance-mosquitto:2.0.11";
/// The RabbitMQ stand-in (Debian 12's rabbitmq-server), used through CONFORMANCE_RABBITMQ_IMAGE.
pub const RABBITMQ_STAND_IN: &str = "localhost/conformance-rabbitmq:3.10.8";
/// The Kafka stand-in (Apache Kafka 3.9.0, as pinned in providers/brokers/kafka/pom.xml), used
/// through CONFORMANCE_KAFKA_IMAGE.
pub const KAFKA_STAND_IN: &str = "localhost/conformance-kafka:3.9.0";

/// The label carrying an image's input digest.
const INPUTS_LABEL: &str = "conformance.inputs";
/// The suite, variant and mirror of the base; part of its input digest.
const DEBOOTSTRAP: [&str; 4] = ["--variant=minbase", "bookworm", "ROOTFS", "http://deb.debian.org/debian"];

/// A transport and the function that builds its stand-in.
type StandIn = (&'static str, fn() -> Result<()>);

/// Each transport's stand-in, in build order; every one but gcp's is on the Debian base.
const STAND_INS: [StandIn; 8] = [
    ("gcp", pubsub),
    ("sqs", sqs),
    ("rocketmq", rocketmq),
    ("redis", redis),
    ("postgres", postgres),
    ("mqtt", mqtt),
    ("rabbitmq", rabbitmq),
    ("kafka", kafka),
];

/// Builds the stand-ins of `transports` (every one when empty), and the base those need.
pub fn build(transports: &[String]) -> Result<()> {
    let names: Vec<&str> = STAND_INS.iter().map(|(name, _)| *name).collect();
    if let Some(unknown) = transports.iter().find(|t| !names.contains(&t.as_str())) {
        bail!("brokers images {unknown}: no stand-in image; valid choices: {}", names.join(", "));
    }
    let wanted: Vec<&StandIn> =
        STAND_INS.iter().filter(|(name, _)| transports.is_empty() || transports.iter().any(|t| t == name)).collect();
    run_quietly(
        Command::new("docker").arg("info"),
        "reach a Docker engine with `docker info` (start one with providers/brokers/docker-engine.sh up target)",
    )?;
    if wanted.iter().any(|(name, _)| *name != "gcp") {
        base()?;
    }
    wanted.iter().try_for_each(|(_, build)| build())
}

/// The base: a minimal Debian root file system from the mirror, imported as an image.
fn base() -> Result<()> {
    let digest = digest_of(&[DEBOOTSTRAP.join(" ").as_bytes()]);
    if cached(BASE, &digest)? {
        return Ok(());
    }
    let started = Instant::now();
    ensure_debootstrap()?;
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

/// debootstrap from Debian's packages, where missing.
fn ensure_debootstrap() -> Result<()> {
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

/// moto in a virtualenv on Debian's Python, serving 0.0.0.0:4566 and printing LocalStack's ready
/// line, so the LocalStack container definition runs it unchanged.
fn sqs() -> Result<()> {
    let brokers = root().join("providers/brokers");
    let inputs = [brokers.join("requirements-sqs.txt"), brokers.join("moto_launcher.py")];
    let context = context("moto", &inputs)?;
    // pip inside the build reaches PyPI through the host's network, so it must trust what the
    // host trusts (here a TLS-inspecting proxy's CA, which Debian's bundle in the image lacks).
    std::fs::copy(host_trust(), context.join("host-ca.crt")).context("copying the host's CA bundle")?;
    let dockerfile = format!(
        "# Written by `cargo xtask brokers images`: moto, the SQS/SNS reference implementation.\n\
         FROM {BASE}\n\
         RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\\n\
         \x20   python3 python3-venv && rm -rf /var/lib/apt/lists/*\n\
         COPY requirements-sqs.txt moto_launcher.py host-ca.crt /opt/moto/\n\
         RUN python3 -m venv /opt/moto/venv \\\n\
         \x20   && /opt/moto/venv/bin/pip install --quiet --disable-pip-version-check --cert /opt/moto/host-ca.crt \\\n\
         \x20      -r /opt/moto/requirements-sqs.txt\n\
         EXPOSE 4566\n\
         # tail holds the launcher's stdin open: it stops when stdin closes (its parent, on the local path).\n\
         ENTRYPOINT [\"/bin/sh\", \"-c\", \"tail -f /dev/null | /opt/moto/venv/bin/python /opt/moto/moto_launcher.py 4566 0.0.0.0\"]\n"
    );
    build_on_base(SQS_STAND_IN, &context, &dockerfile)
}

/// Apache RocketMQ's name server and broker in one JVM (the jars and launcher `brokers install
/// rocketmq` fetches and compiles) on Debian's JRE. The container's command is the two ports;
/// it runs on the host network (see providers::containers::rocketmq).
fn rocketmq() -> Result<()> {
    install("rocketmq")?;
    let install = root().join(".brokers/rocketmq");
    let context = context("rocketmq", &[install.join("lib"), install.join("classes")])?;
    let dockerfile = format!(
        "# Written by `cargo xtask brokers images`: Apache RocketMQ behind the project's launcher.\n\
         FROM {BASE}\n\
         RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\\n\
         \x20   openjdk-17-jre-headless && rm -rf /var/lib/apt/lists/*\n\
         COPY lib /opt/rocketmq/lib\n\
         COPY classes /opt/rocketmq/classes\n\
         # tail holds the launcher's stdin open: it stops when stdin closes (its parent, on the local path).\n\
         # $0 and $1: the name server's and the broker's ports, the container's command.\n\
         ENTRYPOINT [\"/bin/sh\", \"-c\", \"tail -f /dev/null | java -Xms128m -Xmx512m -XX:MaxDirectMemorySize=384m \
         -XX:+UseSerialGC -Duser.home=/tmp/rocketmq -cp '/opt/rocketmq/lib/*:/opt/rocketmq/classes' Launcher \
         /tmp/rocketmq/work $0 $1\"]\n"
    );
    build_on_base(ROCKETMQ_STAND_IN, &context, &dockerfile)
}

/// The `RUN` line that installs `packages` from Debian's mirror without recommends, then drops the
/// downloaded packages and the lists (a debootstrapped base, unlike Debian's published images,
/// keeps every .deb in /var/cache/apt/archives; a smaller image also starts faster on vfs, which
/// copies it for every container).
fn apt_install(packages: &str) -> String {
    format!(
        "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\\n\
         \x20   {packages} && apt-get clean && rm -rf /var/lib/apt/lists/*\n"
    )
}

/// Debian's redis-server as the official redis image runs it (the interface of
/// testcontainers-modules' `Redis`): port 6379, "Ready to accept connections" on stdout.
fn redis() -> Result<()> {
    let context = context("redis", &[])?;
    let dockerfile = format!(
        "# Written by `cargo xtask brokers images`: Debian's redis-server, as the official redis image runs it.\n\
         FROM {BASE}\n\
         {}\
         EXPOSE 6379\n\
         USER redis\n\
         WORKDIR /var/lib/redis\n\
         # Every interface with protected mode off, as in the official image (the container source publishes\n\
         # the port on 127.0.0.1 only); no persistence; the log on stdout.\n\
         CMD [\"redis-server\", \"--bind\", \"0.0.0.0\", \"--protected-mode\", \"no\", \"--save\", \"\", \"--appendonly\", \"no\"]\n",
        apt_install("redis-server")
    );
    build_on_base(REDIS_STAND_IN, &context, &dockerfile)
}

/// Debian's PostgreSQL 15 behind providers/brokers/postgres/image-entrypoint.sh, which honours
/// the official postgres image's variables, arguments and ready lines (what testcontainers-modules'
/// `Postgres` uses). The server refuses to run as root: the image runs as the user postgres.
fn postgres() -> Result<()> {
    let context = context("postgres", &[root().join("providers/brokers/postgres/image-entrypoint.sh")])?;
    let dockerfile = format!(
        "# Written by `cargo xtask brokers images`: Debian's PostgreSQL 15 behind the project's entrypoint.\n\
         FROM {BASE}\n\
         # postgresql-common first, told to make no cluster: the entrypoint makes the container's own.\n\
         RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\\n\
         \x20   postgresql-common \\\n\
         \x20   && sed -i 's/^#*create_main_cluster.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf \\\n\
         \x20   && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 \\\n\
         \x20   && apt-get clean && rm -rf /var/lib/apt/lists/* \\\n\
         \x20   && install -d -o postgres -g postgres /var/lib/postgresql/data\n\
         COPY image-entrypoint.sh /usr/local/bin/docker-entrypoint.sh\n\
         ENV PGDATA=/var/lib/postgresql/data\n\
         EXPOSE 5432\n\
         USER postgres\n\
         ENTRYPOINT [\"/usr/local/bin/docker-entrypoint.sh\"]\n"
    );
    build_on_base(POSTGRES_STAND_IN, &context, &dockerfile)
}

/// Debian's mosquitto with the official eclipse-mosquitto image's `/mosquitto-no-auth.conf`
/// (anonymous clients on 1883, every interface), the configuration testcontainers-modules'
/// `Mosquitto` starts it with.
fn mqtt() -> Result<()> {
    let context = context("mosquitto", &[])?;
    let dockerfile = format!(
        "# Written by `cargo xtask brokers images`: Debian's mosquitto, as the eclipse-mosquitto image runs it.\n\
         FROM {BASE}\n\
         {}\
         # The official image's configuration for anonymous clients (the container source publishes the port on\n\
         # 127.0.0.1 only); mosquitto logs to stderr.\n\
         RUN printf 'listener 1883\\nallow_anonymous true\\n' > /mosquitto-no-auth.conf\n\
         EXPOSE 1883\n\
         USER mosquitto\n\
         CMD [\"mosquitto\", \"-c\", \"/mosquitto-no-auth.conf\"]\n",
        apt_install("mosquitto")
    );
    build_on_base(MQTT_STAND_IN, &context, &dockerfile)
}

/// Debian's rabbitmq-server as the official rabbitmq `-management` image runs it (the image
/// testcontainers-modules' `RabbitMq` expects): AMQP on 5672 on every interface, guest allowed
/// from anywhere, the management and Prometheus plugins (four with their dependencies, the count
/// in the module's ready line) and the log on stdout.
fn rabbitmq() -> Result<()> {
    let context = context("rabbitmq", &[])?;
    let dockerfile = format!(
        "# Written by `cargo xtask brokers images`: Debian's rabbitmq-server, as the official rabbitmq image runs it.\n\
         FROM {BASE}\n\
         {}\
         RUN printf '%s\\n' 'listeners.tcp.default = 5672' 'loopback_users.guest = false' 'log.console = true' \\\n\
         \x20       'log.console.level = info' 'log.file = false' > /etc/rabbitmq/rabbitmq.conf \\\n\
         \x20   && echo '[rabbitmq_management,rabbitmq_prometheus].' > /etc/rabbitmq/enabled_plugins \\\n\
         \x20   && chown rabbitmq:rabbitmq /etc/rabbitmq/enabled_plugins\n\
         ENV HOME=/var/lib/rabbitmq\n\
         EXPOSE 5672\n\
         USER rabbitmq\n\
         # Not /usr/sbin's wrapper, which switches user and logs to /var/log.\n\
         CMD [\"/usr/lib/rabbitmq/bin/rabbitmq-server\"]\n",
        apt_install("rabbitmq-server")
    );
    build_on_base(RABBITMQ_STAND_IN, &context, &dockerfile)
}

/// Apache Kafka (the jars and launcher `brokers install kafka` fetches and compiles) on Debian's
/// JRE, started from /etc/kafka/docker/run (providers/brokers/kafka/image-run.sh) and configured
/// from the environment as the apache/kafka image is: the interface testcontainers-modules'
/// `apache::Kafka` uses (its command waits for a start script it writes into /opt/kafka).
fn kafka() -> Result<()> {
    install("kafka")?;
    let install = root().join(".brokers/kafka");
    let inputs = [install.join("lib"), install.join("classes"), root().join("providers/brokers/kafka/image-run.sh")];
    let context = context("kafka", &inputs)?;
    let dockerfile = format!(
        "# Written by `cargo xtask brokers images`: Apache Kafka behind the project's launcher.\n\
         FROM {BASE}\n\
         {}\
         RUN useradd --system --no-create-home --shell /usr/sbin/nologin kafka \\\n\
         \x20   && install -d -o kafka -g kafka /opt/kafka\n\
         COPY lib /opt/kafka/lib\n\
         COPY classes /opt/kafka/classes\n\
         COPY image-run.sh /etc/kafka/docker/run\n\
         EXPOSE 9092\n\
         USER kafka\n\
         CMD [\"/etc/kafka/docker/run\"]\n",
        apt_install("openjdk-17-jre-headless")
    );
    build_on_base(KAFKA_STAND_IN, &context, &dockerfile)
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

/// Builds `image` from `dockerfile` in `context` unless its inputs (the context, the Dockerfile
/// and the base's id) are those it was built from.
fn build_on_base(image: &str, context: &Path, dockerfile: &str) -> Result<()> {
    std::fs::write(context.join("Dockerfile"), dockerfile)?;
    let base_id = output(Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", BASE]))?;
    let mut parts = vec![base_id.into_bytes()];
    for file in files_under(context)? {
        parts.push(file.strip_prefix(context).expect("under the context").to_string_lossy().into_owned().into_bytes());
        parts.push(std::fs::read(&file)?);
    }
    let digest = digest_of(&parts.iter().map(Vec::as_slice).collect::<Vec<_>>());
    if cached(image, &digest)? {
        return Ok(());
    }
    let started = Instant::now();
    eprintln!("brokers: building {image} (installs packages from Debian's mirror)");
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

/// The Pub/Sub stand-in image: the static launcher `install gcp` builds, as the entrypoint of an
/// image FROM scratch. Its container mode speaks the interface testcontainers-modules'
/// `CloudSdk::pubsub()` expects of Google's image (gcloud's arguments, the ready line on stderr).
fn pubsub() -> Result<()> {
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
