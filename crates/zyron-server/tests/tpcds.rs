//! TPC-DS, all 99 queries, over Parquet files, heap tables and lake tables,
//! every answer compared with DuckDB's on the same data.
//!
//! Data, queries and answers come from DuckDB's `tpcds` extension (PyPI
//! `duckdb-extension-tpcds`, whose version must equal the `duckdb` package's;
//! both are 1.5.5 in `ZYRON_TPCDS_PYTHONPATH`, default
//! `~/.cache/zyron-py/tpcds`, where `scripts/test.sh` installs them). The
//! tables are written as Parquet once; DuckDB answers from them, and Zyron
//! reads them as external tables, copies them into heap tables and into lake
//! tables, and answers each query three times.
//!
//! Scale: SF 0.1 (CI) or SF 1 (`ZYRON_BENCH_SCALE=full`). A query that
//! fails, answers differently or outlives `statement_timeout` is a failure;
//! the known ones are in `tests/corpora/tpcds-sf<SF>.failing`, and any other
//! fails the test. The pass rates go to the README.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::corpus::{self, Outcomes, Verdict};
use common::tpcds_data::{Generated, Query, generate};
use tokio_postgres::Client;
use zyron_bench::Scale;
use zyron_bench::duckdb::same_rows;

/// The ways Zyron holds the tables, each answering all 99 queries.
const SHAPES: [Shape; 3] = [Shape::Parquet, Shape::Heap, Shape::Lake];

/// Memory one query may hold: generous for SF 1, and a quarter of the machine this runs on.
const QUERY_MEMORY_LIMIT_MIB: usize = 6 * 1024;

/// Relative tolerance for numbers: DuckDB divides decimals in double precision.
const TOLERANCE: f64 = 1e-6;

#[derive(Clone, Copy)]
enum Shape {
    Parquet,
    Heap,
    Lake,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Parquet => "parquet",
            Shape::Heap => "heap",
            Shape::Lake => "lake",
        }
    }
}

async fn execute(client: &Client, sql: &str) {
    if let Err(e) = client.simple_query(sql).await {
        panic!("{sql}: {e}");
    }
}

async fn load(client: &Client, shape: Shape, data: &Generated, dir: &Path) {
    for (table, columns) in &data.tables {
        let parquet = dir.join(format!("{table}.parquet"));
        let source = match shape {
            Shape::Parquet => table.clone(),
            Shape::Heap | Shape::Lake => format!("source_{table}"),
        };
        execute(
            client,
            &format!(
                "CREATE EXTERNAL TABLE {source} STORED AS PARQUET LOCATION '{}'",
                parquet.display()
            ),
        )
        .await;
        match shape {
            Shape::Parquet => {}
            Shape::Heap => {
                execute(
                    client,
                    &format!("CREATE TABLE {table} AS SELECT * FROM {source}"),
                )
                .await
            }
            Shape::Lake => {
                let columns = columns
                    .iter()
                    .map(|(name, ty)| format!("{name} {}", ty.replace("VARCHAR", "TEXT")))
                    .collect::<Vec<_>>()
                    .join(", ");
                let location = dir.join("lake").join(table);
                execute(
                    client,
                    &format!(
                        "CREATE EXTERNAL TABLE {table} ({columns}) STORED AS LAKE LOCATION '{}'",
                        location.display()
                    ),
                )
                .await;
                execute(
                    client,
                    &format!("INSERT INTO {table} SELECT * FROM {source}"),
                )
                .await;
            }
        }
        if !matches!(shape, Shape::Parquet) {
            execute(client, &format!("DROP TABLE {source}")).await;
        }
    }
}

async fn unload(client: &Client, data: &Generated) {
    for table in data.tables.keys() {
        execute(client, &format!("DROP TABLE {table}")).await;
    }
}

/// Runs one query and judges its answer against DuckDB's; `None` when no
/// reply came within `limit` (the session is then no longer usable).
async fn judge(client: &Client, query: &Query, limit: Duration) -> (Option<Verdict>, Duration) {
    let started = Instant::now();
    let reply = tokio::time::timeout(limit, client.simple_query(&query.sql)).await;
    let elapsed = started.elapsed();
    let Ok(reply) = reply else {
        return (None, elapsed);
    };
    let verdict = match reply {
        Ok(messages) => match same_rows(&common::simple_rows(messages), &query.rows, TOLERANCE) {
            Ok(()) => Verdict::Pass,
            Err(difference) => Verdict::Fail(format!("wrong answer: {difference}")),
        },
        Err(e) => Verdict::Fail(format!(
            "{} {}",
            common::sqlstate(&e),
            e.as_db_error().map(|d| d.message()).unwrap_or("")
        )),
    };
    (Some(verdict), elapsed)
}

#[derive(Default)]
struct ShapeTally {
    passed: usize,
    wrong: usize,
    errors: usize,
    timed_out: usize,
    seconds: f64,
}

fn tally(outcomes: &[(String, Verdict, Duration)]) -> ShapeTally {
    let mut tally = ShapeTally::default();
    for (_, verdict, elapsed) in outcomes {
        tally.seconds += elapsed.as_secs_f64();
        match verdict {
            Verdict::Pass => tally.passed += 1,
            Verdict::Fail(why) if why.starts_with("wrong answer") => tally.wrong += 1,
            Verdict::Fail(why) if why.starts_with("57014") || why.starts_with("no reply") => {
                tally.timed_out += 1
            }
            Verdict::Fail(_) => tally.errors += 1,
        }
    }
    tally
}

fn readme_section(
    scale_factor: f64,
    duckdb: &str,
    runs: &[(Shape, Vec<(String, Verdict, Duration)>)],
) -> String {
    let scale = if scale_factor >= 1.0 {
        "ZYRON_BENCH_SCALE=full "
    } else {
        ""
    };
    let mut text = format!(
        "TPC-DS SF {scale_factor}, the 99 queries of DuckDB's `tpcds` extension, answers \
         compared with DuckDB {duckdb}'s on the same data \
         (`{scale}cargo test --workspace --release --test tpcds`):\n\n\
         | tables | same answer as DuckDB | wrong answer | error | over the time limit | Zyron's time, all queries |\n\
         |---|---:|---:|---:|---:|---:|\n"
    );
    for (shape, outcomes) in runs {
        let t = tally(outcomes);
        text.push_str(&format!(
            "| {} | {} of {} | {} | {} | {} | {:.1} s |\n",
            shape.name(),
            t.passed,
            outcomes.len(),
            t.wrong,
            t.errors,
            t.timed_out,
            t.seconds
        ));
    }
    let failing: Vec<String> = runs
        .iter()
        .flat_map(|(shape, outcomes)| {
            outcomes
                .iter()
                .filter_map(move |(name, verdict, _)| match verdict {
                    Verdict::Fail(why) => Some(format!(
                        "- {} {name}: {}",
                        shape.name(),
                        corpus::one_line(why, 160)
                    )),
                    Verdict::Pass => None,
                })
        })
        .collect();
    if !failing.is_empty() {
        text.push_str("\nFailing:\n");
        text.push_str(&failing.join("\n"));
        text.push('\n');
    }
    text
}

#[test]
fn tpcds() {
    common::block_on(run());
}

async fn run() {
    let scale = Scale::from_env();
    let scale_factor = scale.pick(0.1, 1.0);
    let statement_timeout = scale.pick(60, 600);
    // statement_timeout bounds a query's rows; this, whatever else hangs.
    let client_limit = Duration::from_secs(statement_timeout + 30);
    let dir = tempfile::tempdir().unwrap();
    let data = match generate(scale_factor, dir.path()) {
        Ok(data) => data,
        Err(reason) => {
            println!("tpcds: skipped: {reason}");
            return;
        }
    };
    assert_eq!(
        data.queries.len(),
        99,
        "DuckDB's tpcds extension has 99 queries"
    );

    // A query that outgrows its memory fails with 53200 and is listed, where
    // unbounded it could take the machine and the whole run with it (q72 over
    // heap tables at SF 1 grew past 23 GB).
    let server = common::TestServer::start_with(
        |config| config.query_memory_limit_mib = QUERY_MEMORY_LIMIT_MIB,
        None,
    )
    .await;
    let connect = async || {
        let client = server.connect().await;
        execute(
            &client,
            &format!("SET statement_timeout = '{statement_timeout}s'"),
        )
        .await;
        client
    };
    let mut client = connect().await;
    let mut runs = Vec::new();
    for shape in SHAPES {
        let started = Instant::now();
        load(&client, shape, &data, dir.path()).await;
        println!(
            "tpcds: {} tables loaded in {:.1} s",
            shape.name(),
            started.elapsed().as_secs_f64()
        );
        let mut outcomes = Vec::new();
        for query in &data.queries {
            let (verdict, elapsed) = judge(&client, query, client_limit).await;
            let verdict = match verdict {
                Some(verdict) => verdict,
                None => {
                    client = connect().await;
                    Verdict::Fail(format!("no reply within {} s", client_limit.as_secs()))
                }
            };
            println!(
                "tpcds: {} {} {:.2} s {}",
                shape.name(),
                query.name,
                elapsed.as_secs_f64(),
                match &verdict {
                    Verdict::Pass => "same answer".to_owned(),
                    Verdict::Fail(why) => corpus::one_line(why, 200),
                }
            );
            outcomes.push((query.name.clone(), verdict, elapsed));
        }
        unload(&client, &data).await;
        runs.push((shape, outcomes));
    }
    server.server.shutdown().await.unwrap();

    let key = format!("tpcds-sf{scale_factor}");
    let section = readme_section(scale_factor, &data.version, &runs);
    println!("{section}");
    corpus::publish(&key, &section).unwrap_or_else(|e| println!("tpcds: README: {e}"));
    let mut outcomes = Outcomes::default();
    for (shape, cases) in runs {
        for (name, verdict, _) in cases {
            outcomes.record(format!("{}/{name}", shape.name()), verdict);
        }
    }
    if let Err(new_failures) = corpus::check(&key, &outcomes) {
        panic!("{new_failures}");
    }
}
