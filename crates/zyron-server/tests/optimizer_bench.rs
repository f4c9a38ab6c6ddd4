//! Suite `optimizer`: for every TPC-H and TPC-DS query, how long Zyron takes to plan it against
//! DuckDB and PostgreSQL 15, and how long Zyron's plan takes to run against DuckDB's.
//!
//! Planning time is the time to answer `EXPLAIN <query>`: parse, bind, optimise, build the
//! physical plan and print it. Zyron answers in process (a `Session`), DuckDB in its Python
//! worker, PostgreSQL over loopback TCP, so PostgreSQL's figure includes one round trip
//! (tens of microseconds). The three take turns on each query (A B C A B C ...). Every system
//! holds the same data in its own tables (Zyron's heap, DuckDB's and PostgreSQL's after
//! `ANALYZE`), since plans depend on statistics. Run time is the whole query in process, all
//! rows read, Zyron and DuckDB in turns with as many threads as the machine has cores, and
//! every answer is compared with DuckDB's: a difference not listed in
//! `tests/corpora/optimizer-sf<SF>.failing` fails the suite.
//!
//! Data: TPC-H from Zyron's generator, TPC-DS from DuckDB's `tpcds` extension (skipped, with
//! the reason printed, when it is not installed). Scale: SF 0.01 (smoke) or SF 1
//! (`ZYRON_BENCH_SCALE=full`).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
/// The engine tests' helpers for reading a session's rows.
#[path = "../../zyron-engine/tests/common/mod.rs"]
mod engine_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::corpus::{self, Outcomes, Verdict};
use futures::SinkExt;
use tokio_postgres::Client;
use zyron_bench::duckdb::{DuckDb, same_rows};
use zyron_bench::postgres::TempPostgres;
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_engine::{Engine, EngineOptions, Session};

type Rows = Vec<Vec<Option<String>>>;

/// Relative tolerance for numbers: DuckDB divides decimals in double precision.
const TOLERANCE: f64 = 1e-6;

/// Bytes of CSV sent to PostgreSQL per COPY message.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// One benchmark's tables (as Parquet in `dir`) and queries.
struct Workload {
    name: &'static str,
    dir: PathBuf,
    scale_factor: f64,
    tables: Vec<String>,
    queries: Vec<(String, String)>,
}

/// The three systems, each holding the current workload's tables.
struct Systems {
    zyron: Session,
    duckdb: DuckDb,
    postgres: Option<(TempPostgres, Client)>,
}

/// What one workload measured, summed over its queries.
#[derive(Default)]
struct Totals {
    plan_ms: f64,
    plan_duckdb_ms: f64,
    /// Zyron's and PostgreSQL's planning, over the queries PostgreSQL accepts.
    plan_ms_where_postgres: f64,
    plan_postgres_ms: f64,
    run_ms: f64,
    run_duckdb_ms: f64,
}

#[test]
fn optimizer_bench() {
    common::block_on(bench());
}

async fn bench() {
    let mut run = SuiteRun::new("optimizer");
    let scale = run.scale();
    let scale_factor = scale.pick(0.01, 1.0);
    let plan_rounds = scale.pick(3, 10);
    let run_rounds = scale.pick(1, 3);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().unwrap();

    let duckdb = match DuckDb::start(Some(threads)) {
        Ok(duck) => duck,
        Err(reason) => {
            run.skip(format!(
                "the whole suite: DuckDB is its reference: {reason}"
            ));
            run.finish().unwrap();
            return;
        }
    };
    let postgres = start_postgres().await.map_err(|reason| {
        run.skip(format!("PostgreSQL 15 planning times: {reason}"));
    });
    let engine = Engine::new(EngineOptions {
        data_dir: Some(dir.path().join("zyron")),
        ..EngineOptions::default()
    })
    .unwrap();
    let mut systems = Systems {
        zyron: engine.new_session(),
        duckdb,
        postgres: postgres.ok(),
    };
    let peer = format!(
        "duckdb {} ({threads} threads, in process)",
        systems.duckdb.version
    );

    let mut workloads = vec![tpch(scale_factor, dir.path()).await];
    match tpcds(scale_factor, dir.path()) {
        Ok(workload) => workloads.push(workload),
        Err(reason) => run.skip(format!("TPC-DS: {reason}")),
    }
    let mut answers = Outcomes::default();
    for workload in &workloads {
        load(&mut systems, workload).await;
        let mut totals = Totals::default();
        for (name, sql) in &workload.queries {
            let label = format!("{}_{name}", workload.name);
            let plan = measure_planning(&mut systems, sql, plan_rounds).await;
            run.push(plan.metric(&label, &peer, workload, &mut totals));
            let (metric, verdict) = measure_run(
                &mut systems,
                &label,
                sql,
                run_rounds,
                &peer,
                workload,
                &mut totals,
            )
            .await;
            run.push(metric);
            answers.record(label, verdict);
        }
        for metric in totals.metrics(workload, &peer) {
            run.push(metric);
        }
        unload(&mut systems, workload).await;
    }
    run.finish().unwrap();
    if let Err(new_failures) = corpus::check(&format!("optimizer-sf{scale_factor}"), &answers) {
        panic!("answers differ from DuckDB's: {new_failures}");
    }
}

async fn start_postgres() -> Result<(TempPostgres, Client), String> {
    let mut cluster = TempPostgres::init()?;
    cluster.spawn(&[("fsync", "off")])?;
    let client =
        common::connect_when_ready(cluster.port(), "postgres", Duration::from_secs(60)).await;
    Ok((cluster, client))
}

/// Each workload's files go in a folder of their own: both have a `customer` table.
fn workload_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn tpch(scale_factor: f64, parent: &Path) -> Workload {
    let dir = workload_dir(parent, "tpch");
    let tables = common::tpch_data::write_parquet(scale_factor, &dir)
        .await
        .expect("TPC-H data");
    Workload {
        name: "tpch",
        dir,
        scale_factor,
        tables: tables.into_iter().map(str::to_owned).collect(),
        queries: common::tpch_data::queries(),
    }
}

fn tpcds(scale_factor: f64, parent: &Path) -> Result<Workload, String> {
    let dir = workload_dir(parent, "tpcds");
    let generated = common::tpcds_data::generate(scale_factor, &dir)?;
    Ok(Workload {
        name: "tpcds",
        dir,
        scale_factor,
        tables: generated.tables.into_keys().collect(),
        queries: generated
            .queries
            .into_iter()
            .map(|query| (query.name, query.sql))
            .collect(),
    })
}

/// Loads the workload's Parquet files into each system's own tables.
async fn load(systems: &mut Systems, workload: &Workload) {
    let dir = workload.dir.as_path();
    for table in &workload.tables {
        let parquet = dir.join(format!("{table}.parquet"));
        duckdb(
            &mut systems.duckdb,
            &format!(
                "CREATE TABLE {table} AS SELECT * FROM read_parquet('{}')",
                parquet.display()
            ),
        );
        for sql in [
            format!(
                "CREATE EXTERNAL TABLE source_{table} STORED AS PARQUET LOCATION '{}'",
                parquet.display()
            ),
            format!("CREATE TABLE {table} AS SELECT * FROM source_{table}"),
            format!("DROP TABLE source_{table}"),
        ] {
            engine_common::command(&mut systems.zyron, &sql).await;
        }
        if let Some((_, client)) = &systems.postgres {
            load_postgres(client, &mut systems.duckdb, table, dir).await;
        }
    }
    if let Some((_, client)) = &systems.postgres {
        client.batch_execute("ANALYZE").await.expect("ANALYZE");
    }
}

/// Creates `table` in PostgreSQL with DuckDB's column types and copies DuckDB's rows in as CSV.
async fn load_postgres(client: &Client, duck: &mut DuckDb, table: &str, dir: &Path) {
    let columns = duckdb(duck, &format!("DESCRIBE {table}"))
        .into_iter()
        .map(|column| {
            let name = column[0].clone().expect("a column has a name");
            let ty = column[1].clone().expect("a column has a type");
            format!("{name} {}", postgres_type(&ty))
        })
        .collect::<Vec<_>>()
        .join(", ");
    client
        .batch_execute(&format!("CREATE TABLE {table} ({columns})"))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL: CREATE TABLE {table}: {e}"));
    let csv = dir.join(format!("{table}.csv"));
    duckdb(
        duck,
        &format!(
            "COPY {table} TO '{}' (FORMAT csv, HEADER false)",
            csv.display()
        ),
    );
    let data = std::fs::read(&csv).unwrap();
    let sink = client
        .copy_in::<_, bytes::Bytes>(&format!("COPY {table} FROM STDIN WITH (FORMAT csv)"))
        .await
        .unwrap();
    futures::pin_mut!(sink);
    for chunk in data.chunks(COPY_CHUNK_BYTES) {
        sink.send(bytes::Bytes::copy_from_slice(chunk))
            .await
            .unwrap();
    }
    sink.as_mut()
        .finish()
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL: COPY {table}: {e}"));
    std::fs::remove_file(csv).unwrap();
}

/// PostgreSQL's spelling of a DuckDB column type.
fn postgres_type(duckdb_type: &str) -> String {
    match duckdb_type {
        "VARCHAR" => "text".to_owned(),
        "DOUBLE" => "double precision".to_owned(),
        "FLOAT" => "real".to_owned(),
        "TINYINT" | "UTINYINT" => "smallint".to_owned(),
        "USMALLINT" => "integer".to_owned(),
        "UINTEGER" => "bigint".to_owned(),
        "UBIGINT" | "HUGEINT" => "numeric".to_owned(),
        other => other.to_owned(),
    }
}

async fn unload(systems: &mut Systems, workload: &Workload) {
    for table in &workload.tables {
        let drop = format!("DROP TABLE {table}");
        duckdb(&mut systems.duckdb, &drop);
        engine_common::command(&mut systems.zyron, &drop).await;
        if let Some((_, client)) = &systems.postgres {
            client.batch_execute(&drop).await.unwrap();
        }
    }
}

/// Planning times of one query on each system.
struct Planning {
    zyron: Samples,
    duckdb: Samples,
    /// PostgreSQL's times, or its error when it refuses the query.
    postgres: Result<Samples, String>,
}

async fn measure_planning(systems: &mut Systems, sql: &str, rounds: usize) -> Planning {
    let explain = format!("EXPLAIN {sql}");
    let mut planning = Planning {
        zyron: Samples::new(),
        duckdb: Samples::new(),
        postgres: match systems.postgres {
            Some(_) => Ok(Samples::new()),
            None => Err("not running".to_owned()),
        },
    };
    for _ in 0..rounds {
        let started = Instant::now();
        engine_common::rows(&mut systems.zyron, &explain).await;
        planning.zyron.record_duration(started.elapsed());
        let reply = systems
            .duckdb
            .run(&explain, 1)
            .unwrap_or_else(|e| panic!("DuckDB: {e}\n{explain}"));
        planning
            .duckdb
            .record_duration(Duration::from_secs_f64(reply.times_ms[0] / 1000.0));
        if let (Some((_, client)), Ok(samples)) = (&systems.postgres, &mut planning.postgres) {
            let started = Instant::now();
            match client.simple_query(&explain).await {
                Ok(_) => samples.record_duration(started.elapsed()),
                Err(e) => {
                    planning.postgres = Err(format!(
                        "{} {}",
                        common::sqlstate(&e),
                        e.as_db_error().map_or("", |d| d.message())
                    ))
                }
            }
        }
    }
    planning
}

impl Planning {
    fn metric(&self, label: &str, peer: &str, workload: &Workload, totals: &mut Totals) -> Metric {
        let ours = self.zyron.spread_ms().p50;
        let duckdb = self.duckdb.spread_ms().p50;
        totals.plan_ms += ours;
        totals.plan_duckdb_ms += duckdb;
        let metric = Metric::latency_ms(&format!("{label}_planning"), &self.zyron)
            .param("sf", workload.scale_factor)
            .param(
                "measured",
                "EXPLAIN, in process (postgres: over loopback TCP)",
            )
            .with_peer(peer, duckdb);
        match &self.postgres {
            Ok(samples) => {
                let postgres = samples.spread_ms().p50;
                totals.plan_ms_where_postgres += ours;
                totals.plan_postgres_ms += postgres;
                metric
                    .param("postgres_15_ms", postgres)
                    .param("ratio_vs_postgres_15", postgres / ours)
            }
            Err(why) => metric.param("postgres_15", format!("refused: {why}")),
        }
    }
}

/// Runs the query on Zyron and DuckDB in turns; the metric and whether the answers agree.
async fn measure_run(
    systems: &mut Systems,
    label: &str,
    sql: &str,
    rounds: usize,
    peer: &str,
    workload: &Workload,
    totals: &mut Totals,
) -> (Metric, Verdict) {
    let mut ours = Samples::new();
    let mut theirs = Samples::new();
    let mut our_rows = Rows::new();
    let mut their_rows = Rows::new();
    for _ in 0..rounds {
        let started = Instant::now();
        our_rows = engine_common::text_rows(&engine_common::rows(&mut systems.zyron, sql).await);
        ours.record_duration(started.elapsed());
        let reply = systems
            .duckdb
            .run(sql, 1)
            .unwrap_or_else(|e| panic!("DuckDB: {e}\n{sql}"));
        theirs.record_duration(Duration::from_secs_f64(reply.times_ms[0] / 1000.0));
        their_rows = reply.rows;
    }
    let duckdb = theirs.spread_ms().p50;
    let metric = Metric::latency_ms(&format!("{label}_run"), &ours)
        .param("sf", workload.scale_factor)
        .param("rows", our_rows.len() as u64)
        .param("storage", "zyron heap tables; duckdb native tables")
        .with_peer(peer, duckdb);
    totals.run_ms += metric.value;
    totals.run_duckdb_ms += duckdb;
    match same_rows(&our_rows, &their_rows, TOLERANCE) {
        Ok(()) => (metric.param("answer", "matches duckdb"), Verdict::Pass),
        Err(difference) => (
            metric.param("answer", format!("differs from duckdb: {difference}")),
            Verdict::Fail(format!("wrong answer: {difference}")),
        ),
    }
}

impl Totals {
    fn metrics(&self, workload: &Workload, peer: &str) -> Vec<Metric> {
        let total = |name: String, ms: f64| {
            let mut samples = Samples::new();
            samples.record_duration(Duration::from_secs_f64(ms / 1000.0));
            Metric::latency_ms(&name, &samples)
                .param("sf", workload.scale_factor)
                .param("queries", workload.queries.len() as u64)
        };
        let name = workload.name;
        let mut metrics = vec![
            total(format!("{name}_planning_total"), self.plan_ms)
                .with_peer(peer, self.plan_duckdb_ms),
            total(format!("{name}_run_total"), self.run_ms).with_peer(peer, self.run_duckdb_ms),
        ];
        if self.plan_postgres_ms > 0.0 {
            metrics.push(
                total(
                    format!("{name}_planning_total_where_postgres_plans"),
                    self.plan_ms_where_postgres,
                )
                .with_peer("postgresql 15 (loopback TCP)", self.plan_postgres_ms),
            );
        }
        metrics
    }
}

/// Runs `sql` on DuckDB; its rows. Loading and dropping must not fail.
fn duckdb(duck: &mut DuckDb, sql: &str) -> Rows {
    duck.run(sql, 1)
        .unwrap_or_else(|e| panic!("DuckDB: {e}\n{sql}"))
        .rows
}
