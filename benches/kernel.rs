//! Benchmarks: the event queue's throughput, and FedAvg on the full FedEM synthetic benchmark
//! (T = 300, d = 150): one round, and the whole 100-round run with evaluation every 20 rounds
//! (target: under 30 s wall on a 2-core machine). Run with `cargo bench --bench kernel`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fedsim::actors::simulate;
use fedsim::run::default_threads;
use fedsim::scenario::Scenario;
use fedsim::sim::{EventQueue, SeedTree, SimTime};
use rand::Rng;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn event_queue(c: &mut Criterion) {
    const N: u64 = 100_000;
    let mut g = c.benchmark_group("event_queue");
    g.throughput(Throughput::Elements(N));
    g.bench_function("push_pop_100k", |b| {
        let mut rng = SeedTree::new(1).rng(fedsim::sim::Entity::Run, "bench", 0);
        let times: Vec<(u64, u32)> = (0..N).map(|_| (rng.gen_range(0..1_000_000), rng.gen_range(0..300))).collect();
        b.iter_batched(
            || times.clone(),
            |times| {
                let mut q = EventQueue::new();
                for (i, &(t, r)) in times.iter().enumerate() {
                    q.push(SimTime(t), r, i);
                }
                let mut last = 0;
                while let Some((_, i)) = q.pop() {
                    last = i;
                }
                last
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn fedavg(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join("scenarios/paper/fedem_synthetic_fedavg.yaml");
    let threads = default_threads();
    let base = Scenario::load(&file, &[]).expect("paper scenario");
    let data = Arc::new(base.data.build(&base.split, &SeedTree::new(base.data_seed)));
    let mut g = c.benchmark_group("fedavg_fedem_synthetic");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    let one = Scenario::load(&file, &["rounds=1".into()]).unwrap();
    g.bench_function("one_round_with_evaluation", |b| {
        b.iter(|| simulate(&one.run, data.clone(), threads, |_| {}).unwrap().events)
    });
    g.bench_function("100_rounds_eval_every_20", |b| {
        b.iter(|| simulate(&base.run, data.clone(), threads, |_| {}).unwrap().events)
    });
    g.finish();
}

criterion_group!(benches, event_queue, fedavg);
criterion_main!(benches);
