//! Suite `oltp`: the real `pgbench` (TPC-B, unmodified) against Zyron and
//! against PostgreSQL 15 in the same run, on the same disk, interleaved
//! configuration by configuration: tps and latency percentiles with 1, 4, 16
//! and 64 clients, simple and prepared protocols.
//!
//! PostgreSQL runs with `synchronous_commit = on` and `shared_buffers = 1GB`;
//! Zyron with its defaults (every COMMIT waits for the WAL's fdatasync).
//! After the runs each system's books must balance: the sums of
//! pgbench_accounts, _branches and _tellers and of the history's deltas agree,
//! and the history holds one row per transaction pgbench reported.
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-server --test oltp_bench -- --nocapture`

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio_postgres::NoTls;
use zyron_bench::postgres::{TempPostgres, bin_dir, free_port, wait_until_accepting};
use zyron_bench::{Metric, Samples, SuiteRun};

const ZYRON: &str = env!("CARGO_BIN_EXE_zyron");

struct ZyronProcess {
    _dir: tempfile::TempDir,
    child: Child,
    port: u16,
}

impl ZyronProcess {
    fn start() -> ZyronProcess {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new(ZYRON)
            .args(["serve", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until_accepting(port, Duration::from_secs(60)).unwrap();
        ZyronProcess {
            _dir: dir,
            child,
            port,
        }
    }
}

impl Drop for ZyronProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one pgbench run reported.
struct Outcome {
    tps: f64,
    transactions: u64,
    latency: Samples,
}

fn pgbench(port: u16, args: &[&str], log_dir: Option<&Path>) -> Result<String, String> {
    let mut command = Command::new(bin_dir()?.join("pgbench"));
    command
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(args);
    if let Some(dir) = log_dir {
        command.current_dir(dir).args(["--log", "--log-prefix=txn"]);
    }
    command.arg("postgres");
    let out = command.output().map_err(|e| format!("pgbench: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("pgbench {args:?} failed: {text}"));
    }
    Ok(text)
}

/// Runs `pgbench -n` (the tables were just initialised) and reads tps from
/// its report and every transaction's latency from its per-transaction log.
fn run(port: u16, clients: usize, mode: &str, seconds: u64) -> Result<Outcome, String> {
    let logs = tempfile::tempdir().unwrap();
    let args = [
        "-n",
        "-c",
        &clients.to_string(),
        "-j",
        "2",
        "-T",
        &seconds.to_string(),
        "-M",
        mode,
    ];
    let report = pgbench(port, &args, Some(logs.path()))?;
    let number = |label: &str| -> Option<f64> {
        report
            .lines()
            .find(|l| l.starts_with(label))?
            .split_whitespace()
            .find_map(|w| w.parse().ok())
    };
    let tps = number("tps =").ok_or_else(|| format!("no tps in pgbench's report: {report}"))?;
    let failed = number("number of failed transactions:").unwrap_or(0.0);
    if failed > 0.0 {
        return Err(format!("{failed} pgbench transactions failed: {report}"));
    }
    let mut latency = Samples::new();
    let mut transactions = 0;
    for file in std::fs::read_dir(logs.path()).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        for line in text.lines() {
            // client_id transaction_no time_us script_no time_epoch time_us
            let micros: u64 = line
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            latency.record_duration(Duration::from_micros(micros));
            transactions += 1;
        }
    }
    Ok(Outcome {
        tps,
        transactions,
        latency,
    })
}

/// The TPC-B invariant: every table's balance sum equals the history's.
async fn books_balance(port: u16, expected_history: u64) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"),
        NoTls,
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut sums = Vec::new();
    for sql in [
        "SELECT CAST(sum(abalance) AS BIGINT) FROM pgbench_accounts",
        "SELECT CAST(sum(bbalance) AS BIGINT) FROM pgbench_branches",
        "SELECT CAST(sum(tbalance) AS BIGINT) FROM pgbench_tellers",
        "SELECT CAST(coalesce(sum(delta), 0) AS BIGINT) FROM pgbench_history",
    ] {
        let row = client
            .query_one(sql, &[])
            .await
            .map_err(|e| format!("{sql}: {e}"))?;
        sums.push(row.get::<_, Option<i64>>(0).unwrap_or(0));
    }
    let history: i64 = client
        .query_one("SELECT count(*) FROM pgbench_history", &[])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    if sums.windows(2).any(|w| w[0] != w[1]) || history as u64 != expected_history {
        return Err(format!(
            "books do not balance: sums {sums:?}, history {history} rows for {expected_history} transactions"
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oltp_suite() {
    let mut run_record = SuiteRun::new("oltp");
    let scale = run_record.scale().pick(1, 10);
    let seconds = run_record.scale().pick(3, 30);
    let client_counts = run_record.scale().pick(vec![1, 4], vec![1, 4, 16, 64]);
    if let Err(reason) = bin_dir() {
        run_record.skip(format!("pgbench not available: {reason}"));
        run_record.finish().unwrap();
        return;
    }
    let zyron = ZyronProcess::start();
    let mut postgres = TempPostgres::init().ok();
    if let Some(pg) = postgres.as_mut() {
        pg.spawn(&[
            ("shared_buffers", "1GB"),
            ("synchronous_commit", "on"),
            ("max_connections", "200"),
        ])
        .unwrap();
        wait_until_accepting(pg.port(), Duration::from_secs(60)).unwrap();
    } else {
        run_record.skip("PostgreSQL 15 could not be started; Zyron runs alone");
    }
    let pg_port = postgres.as_ref().map(|pg| pg.port());
    let init = ["-i", "-s", &scale.to_string(), "-q"];
    pgbench(zyron.port, &init, None).unwrap();
    if let Some(port) = pg_port {
        pgbench(port, &init, None).unwrap();
    }
    let (mut zyron_total, mut pg_total) = (0u64, 0u64);
    for mode in ["simple", "prepared"] {
        for &clients in &client_counts {
            let ours = run(zyron.port, clients, mode, seconds).unwrap();
            zyron_total += ours.transactions;
            let peer = pg_port.map(|port| run(port, clients, mode, seconds).unwrap());
            let label = format!("{mode}_{clients}");
            let mut tps = Metric::single(&format!("tps_{label}"), "txn/s", true, ours.tps)
                .param("clients", clients)
                .param("mode", mode)
                .param("scale", scale)
                .param("seconds", seconds);
            let mut p99 = Metric::latency_ms(&format!("latency_{label}"), &ours.latency)
                .param("clients", clients)
                .param("mode", mode);
            if let Some(peer) = &peer {
                pg_total += peer.transactions;
                tps = tps.with_peer("PostgreSQL 15 (synchronous_commit=on)", peer.tps);
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
