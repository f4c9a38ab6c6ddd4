//! Suite `wal`: the durable commit floor (one committer, one record, waited
//! for) next to this disk's own fdatasync latency, measured interleaved in the
//! same run; plus buffered append throughput.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-wal --test wal_bench -- --nocapture`

mod common;

use std::time::{Duration, Instant};

use common::{RawSync, fresh_wal, pg_test_fsync_us};
use zyron_bench::{Metric, Samples, SuiteRun};

const COMMIT_PAYLOAD_BYTES: usize = 100;

#[test]
fn wal_suite() {
    let mut run = SuiteRun::new("wal");
    let dir = tempfile::tempdir().unwrap();
    let rounds = run.scale().pick(3, 10);
    let per_round = run.scale().pick(200, 2_000);

    let wal = fresh_wal(&dir.path().join("wal"));
    let mut raw = RawSync::new(dir.path());
    let mut raw_samples = Samples::new();
    let mut commit_samples = Samples::new();
    let payload = vec![7u8; COMMIT_PAYLOAD_BYTES];
    let fsyncs_before = wal.stats().fsyncs;
    zyron_bench::interleave::<()>(
        rounds,
        |_| {
            for _ in 0..per_round {
                let started = Instant::now();
                let appended = wal.commit(1, &payload).unwrap();
                commit_samples.record_duration(started.elapsed());
                assert!(wal.durable_lsn() >= appended.end_lsn);
            }
            Ok(())
        },
        |_| {
            for _ in 0..per_round {
                raw_samples.record_duration(raw.once());
            }
            Ok(())
        },
    )
    .unwrap();
    let commits = (rounds * per_round) as u64;
    assert_eq!(
        wal.stats().fsyncs - fsyncs_before,
        commits,
        "one committer: one fdatasync per commit"
    );

    let raw_metric = Metric::latency_ms("fdatasync_8kb", &raw_samples).param("write_bytes", 8192);
    let raw_p50 = raw_metric.value;
    run.push(raw_metric);
    run.push(
        Metric::latency_ms("commit_floor", &commit_samples)
            .param("payload_bytes", COMMIT_PAYLOAD_BYTES)
            .param("committers", 1)
            .with_peer("fdatasync of one 8 kB write, same disk, same run", raw_p50),
    );
    match pg_test_fsync_us(dir.path(), run.scale().pick(1, 5)) {
        Ok(us) => run.push(Metric::single(
            "pg_test_fsync_fdatasync",
            "ms",
            false,
            us / 1000.0,
        )),
        Err(reason) => run.skip(format!("pg_test_fsync: {reason}")),
    }

    for payload_bytes in [100usize, 8192] {
        let (rate, mb_per_s) = append_throughput(&wal, payload_bytes, run.scale().pick(0.3, 3.0));
        run.push(
            Metric::throughput(
                &format!("append_records_per_s_{payload_bytes}b"),
                "records/s",
                &rate,
            )
            .param("payload_bytes", payload_bytes),
        );
        run.push(
            Metric::throughput(
                &format!("append_mb_per_s_{payload_bytes}b"),
                "MB/s",
                &mb_per_s,
            )
            .param("payload_bytes", payload_bytes),
        );
    }
    run.finish().unwrap();
}

/// Buffered appends (nobody waits per record), made durable by one flush at
/// the end of each one-second window; returns records/s and MB/s per window.
fn append_throughput(
    wal: &zyron_wal::Wal,
    payload_bytes: usize,
    seconds: f64,
) -> (Samples, Samples) {
    let payload = vec![3u8; payload_bytes];
    let mut records_per_s = Samples::for_values();
    let mut mb_per_s = Samples::for_values();
    let windows = seconds.ceil() as usize;
    let window = Duration::from_secs_f64(seconds / windows as f64);
    for _ in 0..windows {
        let started = Instant::now();
        let start_lsn = wal.next_lsn();
        let mut records = 0u64;
        while started.elapsed() < window {
            for _ in 0..64 {
                wal.append(1, &payload).unwrap();
            }
            records += 64;
        }
        let end = wal.next_lsn();
        wal.flush(end).unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        records_per_s.record_value(records as f64 / elapsed);
        mb_per_s.record_value((end - start_lsn) as f64 / elapsed / 1e6);
    }
    (records_per_s, mb_per_s)
}
