//! Suite `tpch`: the 22 TPC-H queries over the PostgreSQL wire protocol, with
//! DuckDB running the same queries on the same generated data in the same
//! run. Every answer is compared with DuckDB's; the suite fails on any
//! difference.
//!
//! Scale: SF 0.01 (smoke, CI) or SF 1 (`ZYRON_BENCH_SCALE=full`).
//! Zyron's time is the client's: request, execution and all rows received
//! over TCP. DuckDB's is measured inside its Python worker around
//! `execute` + `fetchall`, so DuckDB pays no wire cost.

mod common;

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use zyron_bench::duckdb::{DuckDb, same_rows};
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_server::Demo;

type Rows = Vec<Vec<Option<String>>>;

async fn run_on_zyron(client: &Client, sql: &str) -> Rows {
    let messages = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("zyron failed: {e}\n{sql}"));
    common::simple_rows(messages)
}

/// Writes the generated tables as Parquet and loads them into DuckDB, so both
/// systems query identical data.
async fn load_duckdb(
    duck: &mut DuckDb,
    scale_factor: f64,
    dir: &std::path::Path,
) -> Result<(), String> {
    for table in common::tpch_data::write_parquet(scale_factor, dir).await? {
        let path = dir.join(format!("{table}.parquet"));
        duck.run(
            &format!(
                "CREATE TABLE {table} AS SELECT * FROM read_parquet('{}')",
                path.display()
            ),
            1,
        )?;
    }
    Ok(())
}

#[test]
fn tpch_bench() {
    common::block_on(bench());
}

async fn bench() {
    let mut run = SuiteRun::new("tpch");
    let scale = run.scale();
    let scale_factor = scale.pick(0.01, 1.0);
    let rounds = scale.pick(1, 3);

    let server = common::TestServer::start_with(|_| {}, Some(Demo::Tpch { scale_factor })).await;
    let client = server.connect().await;

    let parquet_dir = tempfile::tempdir().unwrap();
    let mut duck = match DuckDb::start(None) {
        Ok(mut duck) => match load_duckdb(&mut duck, scale_factor, parquet_dir.path()).await {
            Ok(()) => Some(duck),
            Err(e) => panic!("DuckDB is installed but could not load the data: {e}"),
        },
        Err(reason) => {
            run.skip(format!("DuckDB comparison: {reason}"));
            None
        }
    };
    let peer_name = duck
        .as_ref()
        .map(|d| format!("duckdb {} (python, in process)", d.version));

    let mut total_ours = 0.0;
    let mut total_peer = 0.0;
    let mut mismatches = Vec::new();
    for (name, sql) in common::tpch_data::queries() {
        let mut ours = Samples::new();
        let mut theirs = Samples::new();
        let mut our_rows = Rows::new();
        let mut peer_rows = None;
        for _ in 0..rounds {
            let started = Instant::now();
            our_rows = run_on_zyron(&client, &sql).await;
            ours.record_duration(started.elapsed());
            if let Some(duck) = duck.as_mut() {
                let reply = duck.run(&sql, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
                theirs.record_duration(Duration::from_secs_f64(reply.times_ms[0] / 1000.0));
                peer_rows = Some(reply.rows);
            }
        }
        let mut metric = Metric::latency_ms(&name, &ours)
            .param("sf", scale_factor)
            .param("rows", our_rows.len() as u64);
        total_ours += metric.value;
        if let (Some(peer_rows), Some(peer_name)) = (&peer_rows, &peer_name) {
            let peer_ms = theirs.spread_ms().p50;
            total_peer += peer_ms;
            metric = metric.with_peer(peer_name, peer_ms);
            match same_rows(&our_rows, peer_rows, 1e-6) {
                Ok(()) => metric = metric.param("answer", "matches duckdb"),
                Err(difference) => mismatches.push(format!("{name}: {difference}")),
            }
        }
        run.push(metric);
    }
    let mut total = Samples::new();
    total.record_duration(Duration::from_secs_f64(total_ours / 1000.0));
    let mut total_metric = Metric::latency_ms("total_22_queries", &total).param("sf", scale_factor);
    if let Some(peer_name) = &peer_name {
        total_metric = total_metric.with_peer(peer_name, total_peer);
    }
    run.push(total_metric);
    run.finish().unwrap();
    server.server.shutdown().await.unwrap();
    assert!(
        mismatches.is_empty(),
        "answers differ from DuckDB's:\n{}",
        mismatches.join("\n")
    );
}
