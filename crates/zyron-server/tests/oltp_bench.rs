//! Suite `oltp`: the real `pgbench` (TPC-B, unmodified) against Zyron and
//! against PostgreSQL 15 in the same run, on the same disk, interleaved
//! configuration by configuration: tps and latency percentiles with 1, 4, 16
//! and 64 clients, simple and prepared protocols. A full run measures each
//! configuration in three rounds of 10 s per system, alternating which system
//! goes first: tps is the median round's, latencies are all rounds' together.
//!
//! PostgreSQL runs with `synchronous_commit = on` and `shared_buffers = 1GB`;
//! Zyron with its defaults (every COMMIT waits for the WAL's fdatasync).
//! After the runs each system's books must balance: the sums of
//! pgbench_accounts, _branches and _tellers and of the history's deltas agree,
//! and the history holds one row per transaction pgbench reported.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-server --test oltp_bench -- --nocapture`

mod common;

use common::pgbench::{Outcome, Rounds, books_balance, measure, pgbench, start_peer};
use common::process::ZyronProcess;
use zyron_bench::postgres::bin_dir;
use zyron_bench::{Metric, SuiteRun};

fn run(port: u16, clients: usize, mode: &str, seconds: u64) -> Result<Outcome, String> {
    let (clients, seconds) = (clients.to_string(), seconds.to_string());
    measure(
        port,
        &["-c", &clients, "-j", "2", "-T", &seconds, "-M", mode],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oltp_suite() {
    let mut run_record = SuiteRun::new("oltp");
    let scale = run_record.scale().pick(1, 10);
    // Three rounds of 10 s per system, alternating which goes first: one 30 s run each
    // moved a ratio by a third when a burst of disk latency hit one side only.
    let rounds = run_record.scale().pick(1, 3);
    let seconds = run_record.scale().pick(3, 10);
    let client_counts = run_record.scale().pick(vec![1, 4], vec![1, 4, 16, 64]);
    if let Err(reason) = bin_dir() {
        run_record.skip(format!("pgbench not available: {reason}"));
        run_record.finish().unwrap();
        return;
    }
    let zyron_dir = tempfile::tempdir().unwrap();
    let zyron = ZyronProcess::start(zyron_dir.path(), "").unwrap();
    let postgres = start_peer(
        &mut run_record,
        &[
            ("shared_buffers", "1GB"),
            ("synchronous_commit", "on"),
            ("max_connections", "200"),
        ],
    )
    .await;
    let pg_port = postgres.as_ref().map(|pg| pg.port());
    let init = ["-i", "-s", &scale.to_string(), "-q"];
    pgbench(zyron.port, &init, None).unwrap();
    if let Some(port) = pg_port {
        pgbench(port, &init, None).unwrap();
    }
    let (mut zyron_total, mut pg_total) = (0u64, 0u64);
    for mode in ["simple", "prepared"] {
        for &clients in &client_counts {
            let (mut ours, mut peer) = (Rounds::new(), Rounds::new());
            for round in 0..rounds {
                let systems = Rounds::in_turn(
                    round,
                    (zyron.port, &mut ours),
                    pg_port.map(|p| (p, &mut peer)),
                );
                for (port, record) in systems {
                    record.add(&run(port, clients, mode, seconds).unwrap());
                }
            }
            zyron_total += ours.transactions;
            let label = format!("{mode}_{clients}");
            let mut tps = Metric::throughput(&format!("tps_{label}"), "txn/s", &ours.tps)
                .param("clients", clients)
                .param("mode", mode)
                .param("scale", scale)
                .param("rounds", rounds)
                .param("seconds_per_round", seconds);
            let mut p99 = Metric::latency_ms(&format!("latency_{label}"), &ours.latency)
                .param("clients", clients)
                .param("mode", mode);
            if pg_port.is_some() {
                pg_total += peer.transactions;
                tps = tps.with_peer("PostgreSQL 15 (synchronous_commit=on)", peer.median_tps());
                let peer_p99 = peer.latency.spread_ms().p99;
                p99 = p99
                    .param("peer_p99_ms", peer_p99)
                    .with_peer("PostgreSQL 15 (p50)", peer.latency.spread_ms().p50);
            }
            run_record.push(tps);
            run_record.push(p99);
        }
    }
    books_balance(zyron.port, zyron_total).await.unwrap();
    if let Some(port) = pg_port {
        books_balance(port, pg_total).await.unwrap();
    }
    run_record.finish().unwrap();
}
