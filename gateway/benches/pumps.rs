//! Throughput of both pumps on the in-memory transport with a no-op handler: the cost the pump
//! and the transport add per message. Figures go to BENCHMARKS.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gateway::pump::{AsyncHandler, Handler, Outcome, Proactor, Reactor, TextMapper, TextRequest};
use gateway::transport::memory::MemoryBroker;
use gateway::{Blocking, Message, MessageType, Subscription};

const MESSAGES: u64 = 10_000;

struct NoOp;

impl Handler<TextRequest> for NoOp {
    fn handle(&self, _: TextRequest) -> Outcome {
        Outcome::Handled
    }
}

#[async_trait]
impl AsyncHandler<TextRequest> for NoOp {
    async fn handle(&self, _: TextRequest) -> Outcome {
        Outcome::Handled
    }
}

fn loaded_broker() -> (MemoryBroker, Subscription) {
    let broker = MemoryBroker::new();
    let subscription = Subscription::new("bench", "bench").with_receive_timeout(Duration::from_millis(10));
    let body = vec![b'x'; 256];
    for _ in 0..MESSAGES {
        broker.publish("bench", Message::new("bench", MessageType::Command, body.clone()), Duration::ZERO);
    }
    (broker, subscription)
}

fn wait_for(done: impl Fn() -> u64) {
    while done() < MESSAGES {
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn pumps(c: &mut Criterion) {
    let mut group = c.benchmark_group("pump_in_memory_noop");
    group.throughput(Throughput::Elements(MESSAGES)).sample_size(10);

    group.bench_function("reactor", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let (broker, subscription) = loaded_broker();
                let channel = Arc::new(Blocking::new(broker.channel(&subscription).unwrap()));
                let started = Instant::now();
                let handle = Reactor::new(channel, subscription, TextMapper, NoOp).start();
                wait_for(|| handle.counters().snapshot().acknowledged);
                total += started.elapsed();
                handle.stop().expect("the reactor stops");
            }
            total
        })
    });

    let runtime = tokio::runtime::Runtime::new().unwrap();
    group.bench_function("proactor", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let (broker, subscription) = loaded_broker();
                let channel = Arc::new(broker.channel(&subscription).unwrap());
                let started = Instant::now();
                let handle = {
                    let _entered = runtime.enter();
                    Proactor::new(channel, subscription, TextMapper, NoOp).start()
                };
                wait_for(|| handle.counters().snapshot().acknowledged);
                total += started.elapsed();
                runtime.block_on(handle.stop()).expect("the proactor stops");
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, pumps);
criterion_main!(benches);
