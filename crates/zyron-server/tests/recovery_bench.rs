//! Suite `recovery`: how long a crashed server takes to answer again, and
//! how fast it replays its log, against PostgreSQL 15 doing the same.
//!
//! Each round: CHECKPOINT both servers; run the same number of pgbench TPC-B
//! transactions on each (4 clients, prepared); crash each (Zyron: SIGKILL;
//! PostgreSQL: immediate shutdown, SIGQUIT, which skips the shutdown
//! checkpoint exactly as a crash does; a SIGKILLed postmaster would leave
//! its children holding shared memory and refuse to restart); restart; time
//! until `SELECT 1` answers. Replay time and log volume come from each
//! server's own log (Zyron's `opened data directory` line; PostgreSQL's
//! `redo starts at` / `redo done at ... elapsed`). After every restart the
//! TPC-B books must balance with one history row per committed transaction.
//!
//! `replay` is the log replay alone: Zyron's restart also loads its last
//! checkpoint image into memory first (in `restart_after_crash`, not in
//! `replay`). Finally both take a CHECKPOINT, crash and restart with nothing
//! to replay: Zyron then loads its image (its time is a parameter of
//! `restart_after_checkpoint`); PostgreSQL reads pages on demand.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-server --test recovery_bench -- --nocapture`

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::pgbench::{books_balance, connect, measure, pgbench, start_peer, until_answering};
use common::process::{ZyronProcess, logged_field};
use zyron_bench::postgres::{TempPostgres, bin_dir};
use zyron_bench::{Metric, Samples, SuiteRun};

/// No checkpoint of its own during a round: replay covers the whole round.
const ZYRON_CONFIG: &str = "checkpoint_wal_mib = 16384\n";
const PG_SETTINGS: &[(&str, &str)] = &[
    ("shared_buffers", "1GB"),
    ("synchronous_commit", "on"),
    ("checkpoint_timeout", "1d"),
    ("max_wal_size", "20GB"),
];
const PEER: &str = "PostgreSQL 15 (crash recovery)";

/// What one restart cost.
struct Restart {
    /// From spawning the process to the first answered query.
    answer: Duration,
    /// Log replay alone, as the server reports it.
    replay: Duration,
    wal_bytes: f64,
}

async fn checkpoint(port: u16) {
    connect(port)
        .await
        .unwrap()
        .simple_query("CHECKPOINT")
        .await
        .unwrap();
}

async fn crash_zyron(server: ZyronProcess, dir: &Path) -> (ZyronProcess, Restart) {
    server.kill9();
    let started = Instant::now();
    let server = ZyronProcess::start(dir, ZYRON_CONFIG).unwrap();
    let answer = until_answering(server.port, started).await;
    let log = server.log();
    let field = |key| logged_field(&log, "opened data directory", key).unwrap();
    let restart = Restart {
        answer,
        replay: Duration::from_secs_f64(field("replay_ms") / 1e3),
        wal_bytes: field("wal_bytes"),
    };
    (server, restart)
}

/// A WAL location `X/Y` (hex) as a byte position.
fn lsn(text: &str) -> Option<f64> {
    let (high, low) = text.split_once('/')?;
    let high = u64::from_str_radix(high, 16).ok()?;
    let low = u64::from_str_radix(low, 16).ok()?;
    Some(((high << 32) + low) as f64)
}

/// PostgreSQL's own account of its redo: bytes replayed and elapsed time.
fn pg_redo(log: &str) -> Option<(f64, Duration)> {
    let after = |marker: &str| -> Option<&str> {
        let line = log.lines().rev().find(|l| l.contains(marker))?;
        line.split(marker).nth(1)
    };
    let start = lsn(after("redo starts at ")?.split_whitespace().next()?)?;
    let done_line = after("redo done at ")?;
    let done = lsn(done_line.split_whitespace().next()?)?;
    let seconds: f64 = done_line
        .split("elapsed: ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((done - start, Duration::from_secs_f64(seconds)))
}

async fn crash_postgres(pg: &mut TempPostgres) -> Restart {
    pg.stop("QUIT").unwrap();
    let started = Instant::now();
    pg.spawn(PG_SETTINGS).unwrap();
    let answer = until_answering(pg.port(), started).await;
    // Nothing to redo (right after a checkpoint) logs no redo lines.
    let (wal_bytes, replay) = pg_redo(&pg.log()).unwrap_or((0.0, Duration::ZERO));
    Restart {
        answer,
        replay,
        wal_bytes,
    }
}

/// The samples of every round, per system.
struct Tally {
    answer_ms: Samples,
    replay_ms: Samples,
    replayed_txn_per_s: Samples,
    wal_bytes_per_txn: Samples,
}

impl Tally {
    fn new() -> Self {
        Tally {
            answer_ms: Samples::for_values(),
            replay_ms: Samples::for_values(),
            replayed_txn_per_s: Samples::for_values(),
            wal_bytes_per_txn: Samples::for_values(),
        }
    }

    fn add(&mut self, restart: &Restart, transactions: u64) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        self.answer_ms.record_value(ms(restart.answer));
        self.replay_ms.record_value(ms(restart.replay));
        let replay_s = restart.replay.as_secs_f64().max(1e-3);
        self.replayed_txn_per_s
            .record_value(transactions as f64 / replay_s);
        self.wal_bytes_per_txn
            .record_value(restart.wal_bytes / transactions as f64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_suite() {
    let mut run_record = SuiteRun::new("recovery");
    let scale = run_record.scale().pick(1, 10);
    let rounds = run_record.scale().pick(1, 3);
    let per_client = run_record.scale().pick(250, 5_000);
    let clients = 4;
    if let Err(reason) = bin_dir() {
        run_record.skip(format!("pgbench not available: {reason}"));
        run_record.finish().unwrap();
        return;
    }
    let zyron_dir = tempfile::tempdir().unwrap();
    let mut zyron = ZyronProcess::start(zyron_dir.path(), ZYRON_CONFIG).unwrap();
    let mut postgres = start_peer(&mut run_record, PG_SETTINGS).await;
    let init = ["-i", "-s", &scale.to_string(), "-q"];
    pgbench(zyron.port, &init, None).unwrap();
    if let Some(pg) = &postgres {
        pgbench(pg.port(), &init, None).unwrap();
    }
    let workload = [
        "-c",
        &clients.to_string(),
        "-j",
        "2",
        "-t",
        &per_client.to_string(),
        "-M",
        "prepared",
    ];
    let (mut ours, mut theirs) = (Tally::new(), Tally::new());
    let (mut zyron_total, mut pg_total) = (0, 0);
    for _ in 0..rounds {
        checkpoint(zyron.port).await;
        let done = measure(zyron.port, &workload).unwrap().transactions;
        zyron_total += done;
        let (restarted, restart) = crash_zyron(zyron, zyron_dir.path()).await;
        zyron = restarted;
        ours.add(&restart, done);
        books_balance(zyron.port, zyron_total).await.unwrap();
        if let Some(pg) = postgres.as_mut() {
            checkpoint(pg.port()).await;
            let done = measure(pg.port(), &workload).unwrap().transactions;
            pg_total += done;
            theirs.add(&crash_postgres(pg).await, done);
            books_balance(pg.port(), pg_total).await.unwrap();
        }
    }
    let peer = postgres.is_some();
    let params = |m: Metric| {
        m.param("scale", scale)
            .param("transactions_per_round", clients * per_client)
            .param("clients", clients)
    };
    let metric = |name: &str, unit: &str, higher: bool, mine: &Samples, peers: &Samples| {
        let m = params(Metric::from_spread(name, unit, higher, mine.spread(1.0)));
        if peer {
            m.with_peer(PEER, peers.spread(1.0).p50)
        } else {
            m
        }
    };
    run_record.push(metric(
        "restart_after_crash",
        "ms",
        false,
        &ours.answer_ms,
        &theirs.answer_ms,
    ));
    run_record.push(metric(
        "replay",
        "ms",
        false,
        &ours.replay_ms,
        &theirs.replay_ms,
    ));
    run_record.push(metric(
        "replay_rate",
        "txn/s",
        true,
        &ours.replayed_txn_per_s,
        &theirs.replayed_txn_per_s,
    ));
    run_record.push(metric(
        "wal_per_transaction",
        "bytes",
        false,
        &ours.wal_bytes_per_txn,
        &theirs.wal_bytes_per_txn,
    ));

    // A restart with nothing to replay: the checkpoint image alone.
    checkpoint(zyron.port).await;
    let (zyron, restart) = crash_zyron(zyron, zyron_dir.path()).await;
    let logged = |key| logged_field(&zyron.log(), "opened data directory", key).unwrap_or(0.0);
    let (image_rows, image_load_ms) = (logged("image_rows"), logged("image_load_ms"));
    books_balance(zyron.port, zyron_total).await.unwrap();
    let mut clean = Metric::single(
        "restart_after_checkpoint",
        "ms",
        false,
        restart.answer.as_secs_f64() * 1e3,
    )
    .param("scale", scale)
    .param("image_rows", image_rows)
    .param("image_load_ms", image_load_ms);
    if let Some(pg) = postgres.as_mut() {
        checkpoint(pg.port()).await;
        let restart = crash_postgres(pg).await;
        books_balance(pg.port(), pg_total).await.unwrap();
        clean = clean.with_peer(PEER, restart.answer.as_secs_f64() * 1e3);
    }
    run_record.push(clean);
    run_record.finish().unwrap();
}
