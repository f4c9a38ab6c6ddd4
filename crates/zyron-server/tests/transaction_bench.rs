//! Suite `transaction`: what a transaction costs, shape by shape, measured by
//! the real `pgbench` running the same scripts against Zyron and against
//! PostgreSQL 15 (synchronous_commit on) in the same run, interleaved.
//!
//! Shapes, on pgbench's own tables (`pgbench -i`):
//! - `empty`: BEGIN; COMMIT (the transaction machinery alone);
//! - `read_only`: two primary-key reads in one snapshot;
//! - `write_commit`: one UPDATE, then a durable COMMIT;
//! - `write_rollback`: one UPDATE, then ROLLBACK (nothing may stay);
//! - `savepoint`: UPDATE; SAVEPOINT; UPDATE the same row; ROLLBACK TO the
//!   savepoint; RELEASE; COMMIT (only the first update may stay);
//! - `conflict`: REPEATABLE READ updates of 10 hot rows: first committer
//!   wins, losers get SQLSTATE 40001 and pgbench retries them
//!   (`--max-tries=0`); reported as committed tps and retries per commit.
//!
//! After each run the sum of all balances must have moved by exactly what
//! the committed transactions added, on both systems. A full run measures
//! each shape in three rounds of 5 s per system, alternating which system
//! goes first, and reports the median round.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-server --test transaction_bench -- --nocapture`

mod common;

use common::pgbench::{Outcome, Rounds, connect, measure, pgbench, start_peer};
use common::process::ZyronProcess;
use zyron_bench::postgres::bin_dir;
use zyron_bench::{Metric, SuiteRun};

const PEER: &str = "PostgreSQL 15 (synchronous_commit=on)";

struct Shape {
    name: &'static str,
    script: &'static str,
    /// The change in `sum(abalance)` each committed transaction makes.
    delta_per_commit: i64,
    /// Retry serialization failures (the shape expects them).
    retries: bool,
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "empty",
        script: "BEGIN;\nCOMMIT;\n",
        delta_per_commit: 0,
        retries: false,
    },
    Shape {
        name: "read_only",
        script: "\\set a random(1, :accounts)\n\\set b random(1, :accounts)\nBEGIN;\n\
                 SELECT abalance FROM pgbench_accounts WHERE aid = :a;\n\
                 SELECT abalance FROM pgbench_accounts WHERE aid = :b;\nCOMMIT;\n",
        delta_per_commit: 0,
        retries: false,
    },
    Shape {
        name: "write_commit",
        script: "\\set a random(1, :accounts)\nBEGIN;\n\
                 UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :a;\nCOMMIT;\n",
        delta_per_commit: 1,
        retries: false,
    },
    Shape {
        name: "write_rollback",
        script: "\\set a random(1, :accounts)\nBEGIN;\n\
                 UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :a;\nROLLBACK;\n",
        delta_per_commit: 0,
        retries: false,
    },
    Shape {
        name: "savepoint",
        script: "\\set a random(1, :accounts)\nBEGIN;\n\
                 UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :a;\n\
                 SAVEPOINT s;\n\
                 UPDATE pgbench_accounts SET abalance = abalance + 1000 WHERE aid = :a;\n\
                 ROLLBACK TO SAVEPOINT s;\nRELEASE SAVEPOINT s;\nCOMMIT;\n",
        delta_per_commit: 1,
        retries: false,
    },
    Shape {
        name: "conflict",
        script: "\\set a random(1, 10)\nBEGIN ISOLATION LEVEL REPEATABLE READ;\n\
                 UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :a;\nCOMMIT;\n",
        delta_per_commit: 1,
        retries: true,
    },
];

async fn balance_sum(port: u16) -> i64 {
    let client = connect(port).await.unwrap();
    client
        .query_one(
            "SELECT CAST(sum(abalance) AS BIGINT) FROM pgbench_accounts",
            &[],
        )
        .await
        .unwrap()
        .get::<_, Option<i64>>(0)
        .unwrap_or(0)
}

/// Runs one shape on one server and checks the balances moved as the
/// committed transactions say they must.
async fn run_shape(
    port: u16,
    shape: &Shape,
    script: &std::path::Path,
    accounts: u64,
    clients: usize,
    seconds: u64,
) -> Outcome {
    let before = balance_sum(port).await;
    let (clients, seconds, accounts) = (
        clients.to_string(),
        seconds.to_string(),
        format!("accounts={accounts}"),
    );
    let script = script.to_str().unwrap();
    let mut args = vec![
        "-f", script, "-D", &accounts, "-c", &clients, "-j", "2", "-T", &seconds, "-M", "prepared",
    ];
    if shape.retries {
        args.push("--max-tries=0");
    }
    let outcome = measure(port, &args).unwrap();
    let moved = balance_sum(port).await - before;
    assert_eq!(
        moved,
        shape.delta_per_commit * outcome.transactions as i64,
        "{}: balances moved by {moved} after {} committed transactions",
        shape.name,
        outcome.transactions
    );
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_suite() {
    let mut run_record = SuiteRun::new("transaction");
    let scale = run_record.scale().pick(1u64, 10);
    // Several short rounds, alternating which system goes first: on this shared machine one
    // 15-second run each moved a ratio by a tenth from one run of the suite to the next.
    let rounds = run_record.scale().pick(1, 3);
    let seconds = run_record.scale().pick(2, 5);
    let client_counts = run_record.scale().pick(vec![4], vec![1, 16]);
    if let Err(reason) = bin_dir() {
        run_record.skip(format!("pgbench not available: {reason}"));
        run_record.finish().unwrap();
        return;
    }
    let zyron_dir = tempfile::tempdir().unwrap();
    let zyron = ZyronProcess::start(zyron_dir.path(), "").unwrap();
    let postgres = start_peer(
        &mut run_record,
        &[("shared_buffers", "1GB"), ("synchronous_commit", "on")],
    )
    .await;
    let pg_port = postgres.as_ref().map(|pg| pg.port());
    let init = ["-i", "-s", &scale.to_string(), "-q"];
    for port in std::iter::once(zyron.port).chain(pg_port) {
        pgbench(port, &init, None).unwrap();
    }
    let scripts = tempfile::tempdir().unwrap();
    let accounts = 100_000 * scale;
    for shape in SHAPES {
        let script = scripts.path().join(format!("{}.sql", shape.name));
        std::fs::write(&script, shape.script).unwrap();
        for &clients in &client_counts {
            let (mut ours, mut peer) = (Rounds::new(), Rounds::new());
            for round in 0..rounds {
                let systems = Rounds::in_turn(
                    round,
                    (zyron.port, &mut ours),
                    pg_port.map(|p| (p, &mut peer)),
                );
                for (port, record) in systems {
                    record.add(&run_shape(port, shape, &script, accounts, clients, seconds).await);
                }
            }
            let peer = pg_port.map(|_| &peer);
            push_metrics(&mut run_record, shape, clients, &ours, peer);
        }
    }
    run_record.finish().unwrap();
}

fn push_metrics(
    run_record: &mut SuiteRun,
    shape: &Shape,
    clients: usize,
    ours: &Rounds,
    peer: Option<&Rounds>,
) {
    let label = format!("{}_{clients}", shape.name);
    let mut tps = Metric::throughput(&format!("tps_{label}"), "txn/s", &ours.tps)
        .param("clients", clients)
        .param("shape", shape.name)
        .param("script", shape.script);
    // pgbench's average, not its per-transaction log: it reads the clock
    // lazily and logs many sub-0.1 ms transactions as 0 us.
    let mut latency = Metric::from_spread(
        &format!("latency_average_{label}"),
        "ms",
        false,
        ours.latency_average_ms.spread(1.0),
    )
    .param("clients", clients)
    .param("shape", shape.name);
    if let Some(peer) = peer {
        tps = tps.with_peer(PEER, peer.median_tps());
        latency = latency.with_peer(PEER, peer.latency_average_ms.spread(1.0).p50);
    }
    run_record.push(tps);
    run_record.push(latency);
    if shape.retries {
        let mut retries = Metric::single(
            &format!("retries_per_commit_{label}"),
            "retries/commit",
            false,
            ours.retries_per_commit(),
        )
        .param("clients", clients)
        .param("hot_rows", 10);
        if let Some(peer) = peer {
            retries = retries.with_peer(PEER, peer.retries_per_commit());
        }
        run_record.push(retries);
    }
}
