//! Suite `group_commit`: commits/s, commits per fdatasync and commit latency
//! from 1 to 512 concurrent committers, each committing one 100-byte record
//! and waiting for it to be durable.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-wal --test group_commit_bench -- --nocapture`

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::fresh_wal;
use zyron_bench::{Metric, Samples, SuiteRun};

#[test]
fn group_commit_suite() {
    let mut run = SuiteRun::new("group_commit");
    let committer_counts: Vec<usize> = run
        .scale()
        .pick(vec![1, 8, 64], vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
    let seconds = run.scale().pick(0.3, 5.0);
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(fresh_wal(dir.path()));
    let mut single_rate = None;
    for &committers in &committer_counts {
        let outcome = drive(&wal, committers, Duration::from_secs_f64(seconds));
        let rate = outcome.commits as f64 / outcome.elapsed.as_secs_f64();
        let base = *single_rate.get_or_insert(rate);
        run.push(
            Metric::single(
                &format!("commits_per_s_{committers}"),
                "commits/s",
                true,
                rate,
            )
            .param("committers", committers)
            .param("speedup_over_1", rate / base),
        );
        run.push(
            Metric::single(
                &format!("commits_per_fsync_{committers}"),
                "commits",
                true,
                outcome.commits as f64 / outcome.fsyncs.max(1) as f64,
            )
            .param("committers", committers),
        );
        run.push(
            Metric::latency_ms(&format!("commit_latency_{committers}"), &outcome.latency)
                .param("committers", committers),
        );
    }
    run.finish().unwrap();
}

struct Outcome {
    commits: u64,
    fsyncs: u64,
    elapsed: Duration,
    latency: Samples,
}

fn drive(wal: &Arc<zyron_wal::Wal>, committers: usize, length: Duration) -> Outcome {
    let start = Arc::new(Barrier::new(committers + 1));
    let handles: Vec<_> = (0..committers)
        .map(|c| {
            let (wal, start) = (wal.clone(), start.clone());
            std::thread::spawn(move || {
                let payload = [c as u8; 100];
                let mut latencies_ns = Vec::new();
                start.wait();
                let began = Instant::now();
                while began.elapsed() < length {
                    let started = Instant::now();
                    let appended = wal.commit(1, &payload).unwrap();
                    latencies_ns.push(started.elapsed());
                    assert!(
                        wal.durable_lsn() >= appended.end_lsn,
                        "acknowledged before durable"
                    );
                }
                latencies_ns
            })
        })
        .collect();
    let before = wal.stats();
    start.wait();
    let began = Instant::now();
    let mut latency = Samples::new();
    let mut commits = 0u64;
    for handle in handles {
        for elapsed in handle.join().unwrap() {
            latency.record_duration(elapsed);
            commits += 1;
        }
    }
    let elapsed = began.elapsed();
    let after = wal.stats();
    assert_eq!(
        after.records - before.records,
        commits,
        "every commit was appended once"
    );
    Outcome {
        commits,
        fsyncs: after.fsyncs - before.fsyncs,
        elapsed,
        latency,
    }
}
