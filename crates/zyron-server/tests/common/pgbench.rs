//! Running the real `pgbench` (PostgreSQL 15's) against a server on a port
//! and reading what it reported: tps, retries, and every transaction's
//! latency from its per-transaction log.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;
use zyron_bench::postgres::{TempPostgres, bin_dir};
use zyron_bench::{Samples, SuiteRun};

/// What one pgbench run reported.
pub struct Outcome {
    pub tps: f64,
    /// Transactions that committed (pgbench's "actually processed").
    pub transactions: u64,
    /// Serialization failures (40001) that pgbench retried.
    pub retries: u64,
    /// pgbench's own average (elapsed time x clients / transactions).
    pub latency_average_ms: f64,
    /// Every transaction's latency from pgbench's log. pgbench reads the
    /// clock lazily, so transactions much shorter than 0.1 ms are often
    /// logged as 0 us: use `latency_average_ms` for those.
    pub latency: Samples,
}

/// One system's rounds of one configuration: a suite alternates short rounds
/// of the two systems, so a burst of noise on this shared machine lands on
/// both and shows in the spread, and reports the median round.
pub struct Rounds {
    pub tps: Samples,
    pub latency_average_ms: Samples,
    /// Every transaction's latency, all rounds together.
    pub latency: Samples,
    pub transactions: u64,
    pub retries: u64,
}

impl Rounds {
    pub fn new() -> Self {
        Rounds {
            tps: Samples::for_values(),
            latency_average_ms: Samples::for_values(),
            latency: Samples::new(),
            transactions: 0,
            retries: 0,
        }
    }

    pub fn add(&mut self, outcome: &Outcome) {
        self.tps.record_value(outcome.tps);
        self.latency_average_ms
            .record_value(outcome.latency_average_ms);
        self.latency.merge(&outcome.latency);
        self.transactions += outcome.transactions;
        self.retries += outcome.retries;
    }

    /// The systems in the order round `round` runs them: Zyron first in even
    /// rounds, the peer (if there is one) first in odd ones.
    pub fn in_turn<'a>(
        round: usize,
        ours: (u16, &'a mut Rounds),
        peer: Option<(u16, &'a mut Rounds)>,
    ) -> Vec<(u16, &'a mut Rounds)> {
        let mut systems = vec![ours];
        systems.extend(peer);
        if round % 2 == 1 {
            systems.reverse();
        }
        systems
    }

    /// The median round's tps.
    pub fn median_tps(&self) -> f64 {
        self.tps.spread(1.0).p50
    }

    pub fn retries_per_commit(&self) -> f64 {
        self.retries as f64 / self.transactions.max(1) as f64
    }
}

/// Runs pgbench against `127.0.0.1:port` as user and database `postgres`;
/// with `log_dir`, it writes its per-transaction log there.
pub fn pgbench(port: u16, args: &[&str], log_dir: Option<&Path>) -> Result<String, String> {
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

/// Runs `pgbench -n <args>` (the tables exist already) and reads its report
/// and its per-transaction log. A transaction that failed for good is an error.
pub fn measure(port: u16, args: &[&str]) -> Result<Outcome, String> {
    let logs = tempfile::tempdir().unwrap();
    let mut all_args = vec!["-n"];
    all_args.extend_from_slice(args);
    let report = pgbench(port, &all_args, Some(logs.path()))?;
    let number = |label: &str| -> Option<f64> {
        report
            .lines()
            .find(|l| l.starts_with(label))?
            .split(|c: char| c.is_whitespace() || c == '/')
            .find_map(|w| w.parse().ok())
    };
    let tps = number("tps =").ok_or_else(|| format!("no tps in pgbench's report: {report}"))?;
    let failed = number("number of failed transactions:").unwrap_or(0.0);
    if failed > 0.0 {
        return Err(format!("{failed} pgbench transactions failed: {report}"));
    }
    let processed = number("number of transactions actually processed:")
        .ok_or_else(|| format!("no transaction count in pgbench's report: {report}"))?;
    let retries = number("total number of retries:").unwrap_or(0.0);
    let latency_average_ms = number("latency average =")
        .ok_or_else(|| format!("no latency average in pgbench's report: {report}"))?;
    let mut latency = Samples::new();
    for file in std::fs::read_dir(logs.path()).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        for line in text.lines() {
            // client_id transaction_no time_us script_no time_epoch time_us [retries]
            if let Some(micros) = line.split_whitespace().nth(2).and_then(|v| v.parse().ok()) {
                latency.record_duration(Duration::from_micros(micros));
            }
        }
    }
    if latency.len() != processed as u64 {
        return Err(format!(
            "pgbench reported {processed} transactions but logged {}",
            latency.len()
        ));
    }
    Ok(Outcome {
        tps,
        transactions: processed as u64,
        retries: retries as u64,
        latency_average_ms,
        latency,
    })
}

/// A client of the server on `port` as pgbench connects (user and database `postgres`).
pub async fn connect(port: u16) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"),
        NoTls,
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(client)
}

/// Polls until `SELECT 1` answers on `port` (PostgreSQL accepts connections
/// before it can answer them); the time since `started`.
pub async fn until_answering(port: u16, started: Instant) -> Duration {
    let deadline = started + Duration::from_secs(600);
    loop {
        if let Ok(client) = connect(port).await
            && client.simple_query("SELECT 1").await.is_ok()
        {
            return started.elapsed();
        }
        assert!(Instant::now() < deadline, "no answer on port {port}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The TPC-B invariant: every table's balance sum equals the history's, and
/// the history holds one row per committed transaction.
pub async fn books_balance(port: u16, expected_history: u64) -> Result<(), String> {
    let client = connect(port).await?;
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

/// The PostgreSQL 15 peer of a suite, started with `settings` and answering;
/// if it cannot start, the run records why and Zyron runs alone.
pub async fn start_peer(
    run_record: &mut SuiteRun,
    settings: &[(&str, &str)],
) -> Option<TempPostgres> {
    let started = TempPostgres::init().and_then(|mut pg| pg.spawn(settings).map(|()| pg));
    match started {
        Ok(pg) => {
            until_answering(pg.port(), Instant::now()).await;
            Some(pg)
        }
        Err(reason) => {
            run_record.skip(format!(
                "PostgreSQL 15 could not be started ({reason}); Zyron runs alone"
            ));
            None
        }
    }
}
