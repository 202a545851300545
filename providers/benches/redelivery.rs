//! Redelivery latency through a conformance cell, per configuration: how long after a nack or a
//! zero-delay requeue the message is received again, and how long after a delivery an unsettled
//! message comes back by itself (the lease). The manifest's `redelivery_ms` is the slowest
//! release figure here; the cells' "at once" bound is derived from it (generator::manifest).
//!
//! Two figures per configuration: idle (one cell at a time) and loaded (every named
//! configuration at once, `CELLS_AT_ONCE` cells each, as a transport's test binary runs its
//! matrix: one broker serves them all). The cells' bounds must hold under the loaded figure.
//!
//! `cargo bench -p providers --features sqs,gcp,rocketmq,postgres,mqtt,redis,rabbitmq,kafka,nats,azure --bench redelivery [-- CONFIGURATION…]`
//! (each compiled-in configuration when none is named; name one transport's configurations to
//! load its broker as its matrix does; brokers as CONFORMANCE_BROKERS says).

use std::time::{Duration, Instant};

use providers::{Cell, CellSpec, Provider, Variant};

const ROUNDS: usize = 10;
/// A transport's matrix runs 12 behaviours x 2 variants of each configuration at once.
const CELLS_AT_ONCE: usize = 24;
/// Rounds of each loaded cell.
const LOADED_ROUNDS: usize = 3;

fn providers() -> Vec<&'static dyn Provider> {
    #[allow(unused_mut)]
    let mut all: Vec<&'static dyn Provider> = vec![providers::memory()];
    #[cfg(feature = "sqs")]
    all.extend([providers::sqs() as &dyn Provider, providers::sqs_fifo(), providers::sns(), providers::sns_fifo()]);
    #[cfg(feature = "gcp")]
    all.extend([
        providers::gcp_pull() as &dyn Provider,
        providers::gcp_pull_ordering(),
        providers::gcp_stream(),
        providers::gcp_stream_ordering(),
    ]);
    #[cfg(feature = "rocketmq")]
    all.push(providers::rocketmq());
    #[cfg(feature = "postgres")]
    all.push(providers::postgres());
    #[cfg(feature = "mqtt")]
    all.push(providers::mqtt());
    #[cfg(feature = "redis")]
    all.push(providers::redis_streams());
    #[cfg(feature = "nats")]
    all.push(providers::nats_jetstream());
    #[cfg(feature = "azure")]
    all.push(providers::azure_queue());
    #[cfg(feature = "rabbitmq")]
    all.extend([providers::rabbitmq() as &dyn Provider, providers::rabbitmq_quorum()]);
    #[cfg(feature = "kafka")]
    all.push(providers::kafka());
    all
}

#[derive(Clone, Copy)]
enum Release {
    Nack,
    Requeue,
    /// Nothing: the lease lapses.
    Lapse,
}

/// One round: send, receive, release, and the time until the message is received again.
async fn round(cell: &Cell, release: Release) -> Duration {
    let sent = cell.message();
    cell.send(&sent).await;
    let received = cell.receive(sent.id()).await;
    let released_at = Instant::now();
    match release {
        Release::Nack => cell.channel().nack(&received).await.expect("nack"),
        Release::Requeue => cell.channel().requeue(&received, Duration::ZERO).await.expect("requeue"),
        Release::Lapse => {}
    }
    let again = cell
        .receive_within(sent.id(), Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("{} did not come back within 60 s", sent.id()));
    let elapsed = released_at.elapsed();
    cell.channel().acknowledge(&again).await.expect("acknowledge");
    elapsed
}

fn figures(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_millis();
    format!(
        "min {:>5} ms  median {:>5} ms  max {:>5} ms",
        ms(samples[0]),
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1])
    )
}

/// Releases measured in one cell: `rounds` nacks and as many zero-delay requeues.
async fn releases(provider: &'static dyn Provider, rounds: usize) -> Vec<Duration> {
    let cell = provider.cell(CellSpec::new("BENCH", Variant::Proactor)).await;
    let mut samples = Vec::new();
    for _ in 0..rounds {
        samples.push(round(&cell, Release::Nack).await);
        samples.push(round(&cell, Release::Requeue).await);
    }
    cell.finish().await;
    samples
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let named: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let chosen: Vec<&'static dyn Provider> =
        providers().into_iter().filter(|p| named.is_empty() || named.iter().any(|n| n == p.configuration())).collect();
    // Loaded: every chosen configuration's cells at once.
    let mut tasks = Vec::new();
    for provider in &chosen {
        for _ in 0..CELLS_AT_ONCE {
            let provider = *provider;
            tasks.push((provider.configuration(), tokio::spawn(releases(provider, LOADED_ROUNDS))));
        }
    }
    let mut loaded: std::collections::BTreeMap<&str, Vec<Duration>> = Default::default();
    for (name, task) in tasks {
        loaded.entry(name).or_default().extend(task.await.expect("a loaded cell panicked"));
    }
    for (name, samples) in loaded {
        println!("{name:<20} loaded   {} ({} cells at once)", figures(samples), CELLS_AT_ONCE * chosen.len());
    }
    for provider in chosen {
        let name = provider.configuration();
        let cell = provider.cell(CellSpec::new("BENCH", Variant::Proactor)).await;
        let mut nacks = Vec::new();
        let mut requeues = Vec::new();
        for _ in 0..ROUNDS {
            nacks.push(round(&cell, Release::Nack).await);
            requeues.push(round(&cell, Release::Requeue).await);
        }
        println!("{name:<20} nack     {}", figures(nacks));
        println!("{name:<20} requeue0 {}", figures(requeues));
        // Nothing lapses on memory, nor on a connected MQTT session or RabbitMQ (no lease: an
        // unsettled delivery stays with its channel), nor on Kafka (a connected consumer moves
        // past an uncommitted record).
        if !["memory", "mqtt", "rabbitmq", "rabbitmq-quorum", "kafka"].contains(&name) {
            println!("{name:<20} lapse    {}", figures(vec![round(&cell, Release::Lapse).await]));
        }
        cell.finish().await;
    }
}
