//! Suite `executor`: the throughput of each query operator (hash join, aggregate, sort, window,
//! and subqueries, decorrelated and through the apply operator) in input rows per second,
//! against DuckDB on the same data in the same run.
//!
//! The data is generated once as Parquet; Zyron copies it into heap tables (its own storage),
//! DuckDB into its own tables. Both run with as many threads as the machine has cores, in
//! process (Zyron through a `Session`, DuckDB in its Python worker), one query after the other
//! (A B A B ...). Every answer is compared with DuckDB's; a result too large to compare whole
//! (the sort) is compared by row count and its first rows, and Zyron's is checked to be sorted.
//! A `scan` figure gives each side's cost of reading the table, which every operator pays.
//!
//! Scale: 200,000 fact rows (smoke) or 10,000,000 (`ZYRON_BENCH_SCALE=full`).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;

use std::path::Path;
use std::time::Instant;

use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::prelude::SessionContext;
use zyron_bench::duckdb::{DuckDb, same_rows};
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_engine::{Engine, EngineOptions, Session};

type Rows = Vec<Vec<Option<String>>>;

/// Rows compared for a result too large to compare whole.
const HEAD_ROWS: usize = 5;

/// Relative tolerance for doubles: the two sides sum in different orders.
const TOLERANCE: f64 = 1e-9;

/// One operator's query and what its throughput counts.
struct Case {
    name: &'static str,
    sql: String,
    /// Rows the operator consumes per run, the numerator of rows/s.
    input_rows: u64,
    /// The result is large: compare its row count and head, and check our order.
    sorted_result: bool,
}

fn cases(fact_rows: u64, dim_rows: u64, apply_outer_rows: u64) -> Vec<Case> {
    let case = |name, sql: &str, input_rows| Case {
        name,
        sql: sql.to_owned(),
        input_rows,
        sorted_result: false,
    };
    vec![
        case("scan", "SELECT count(*), sum(v) FROM fact", fact_rows),
        case(
            "hash_join",
            "SELECT count(*), sum(f.v * d.w) FROM fact f JOIN dim d ON f.k = d.k",
            fact_rows + dim_rows,
        ),
        case(
            "aggregate_1000_groups",
            "SELECT g, count(*), sum(v), min(v), max(v) FROM fact GROUP BY g ORDER BY g",
            fact_rows,
        ),
        case(
            "aggregate_many_groups",
            "SELECT count(*), sum(n), max(total) \
             FROM (SELECT k, count(*) AS n, sum(v) AS total FROM fact GROUP BY k) AS per_key",
            fact_rows,
        ),
        Case {
            name: "sort",
            sql: "SELECT id, v FROM fact ORDER BY v, id".to_owned(),
            input_rows: fact_rows,
            sorted_result: true,
        },
        case(
            "window",
            "SELECT count(*), sum(r), max(running) FROM (\
               SELECT row_number() OVER (PARTITION BY g ORDER BY id) AS r, \
                      sum(v) OVER (PARTITION BY g ORDER BY id ROWS UNBOUNDED PRECEDING) AS running \
               FROM fact) AS w",
            fact_rows,
        ),
        case(
            "subquery_decorrelated",
            "SELECT count(*) FROM dim d \
             WHERE d.w > (SELECT avg(f.v) FROM fact f WHERE f.k = d.k)",
            fact_rows + dim_rows,
        ),
        // A correlation by inequality, which DataFusion does not decorrelate: Zyron runs it
        // through its apply operator, once per outer row.
        case(
            "subquery_apply",
            &format!(
                "SELECT count(*) FROM dim o \
                 WHERE o.k < {apply_outer_rows} \
                   AND o.w > (SELECT avg(i.w) FROM dim i WHERE i.k < o.k)"
            ),
            apply_outer_rows,
        ),
    ]
}

#[test]
fn executor_bench() {
    common::block_on(bench());
}

async fn bench() {
    let mut run = SuiteRun::new("executor");
    let scale = run.scale();
    let fact_rows: u64 = scale.pick(200_000, 10_000_000);
    let dim_rows = fact_rows / 10;
    let apply_outer_rows: u64 = scale.pick(500, 2_000);
    let rounds = scale.pick(2, 5);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());

    let dir = tempfile::tempdir().unwrap();
    write_parquet(dir.path(), fact_rows, dim_rows).await;
    let engine = Engine::new(EngineOptions {
        data_dir: Some(dir.path().join("zyron")),
        ..EngineOptions::default()
    })
    .unwrap();
    let mut session = engine.new_session();
    for table in ["fact", "dim"] {
        load_zyron(&mut session, dir.path(), table).await;
    }

    let mut duck = match DuckDb::start(Some(threads)) {
        Ok(mut duck) => {
            for table in ["fact", "dim"] {
                let parquet = dir.path().join(format!("{table}.parquet"));
                duck.run(
                    &format!(
                        "CREATE TABLE {table} AS SELECT * FROM read_parquet('{}')",
                        parquet.display()
                    ),
                    1,
                )
                .unwrap_or_else(|e| panic!("DuckDB could not load {table}: {e}"));
            }
            Some(duck)
        }
        Err(reason) => {
            run.skip(format!("DuckDB comparison: {reason}"));
            None
        }
    };
    let peer_name = duck
        .as_ref()
        .map(|d| format!("duckdb {} ({threads} threads, in process)", d.version));

    let mut mismatches = Vec::new();
    for case in cases(fact_rows, dim_rows, apply_outer_rows) {
        let mut ours = Samples::for_values();
        let mut theirs = Samples::for_values();
        let mut our_rows = Rows::new();
        let mut peer = None;
        for _ in 0..rounds {
            let started = Instant::now();
            let batches = common::rows(&mut session, &case.sql).await;
            ours.record_value(case.input_rows as f64 / started.elapsed().as_secs_f64());
            our_rows = common::text_rows(&batches);
            if let Some(duck) = duck.as_mut() {
                let reply = if case.sorted_result {
                    duck.run_columnar(&case.sql, 1, HEAD_ROWS)
                } else {
                    duck.run(&case.sql, 1)
                }
                .unwrap_or_else(|e| panic!("{}: DuckDB: {e}", case.name));
                theirs.record_value(case.input_rows as f64 / (reply.times_ms[0] / 1000.0));
                peer = Some(reply);
            }
        }
        let mut metric = Metric::throughput(case.name, "rows/s", &ours)
            .param("input_rows", case.input_rows)
            .param("fact_rows", fact_rows)
            .param("dim_rows", dim_rows)
            .param("threads", threads as u64)
            .param("storage", "zyron heap table; duckdb native table");
        if let (Some(reply), Some(peer_name)) = (&peer, &peer_name) {
            metric = metric.with_peer(peer_name, theirs.spread(1.0).p50);
            match compare(&case, &our_rows, reply) {
                Ok(()) => metric = metric.param("answer", "matches duckdb"),
                Err(difference) => mismatches.push(format!("{}: {difference}", case.name)),
            }
        }
        if case.sorted_result {
            assert_sorted(&our_rows);
        }
        run.push(metric);
    }
    run.finish().unwrap();
    assert!(
        mismatches.is_empty(),
        "answers differ from DuckDB's:\n{}",
        mismatches.join("\n")
    );
}

/// Generates `fact` (keys spread over `dim`, 1,000 groups, doubles with repeats) and `dim`.
async fn write_parquet(dir: &Path, fact_rows: u64, dim_rows: u64) {
    let ctx = SessionContext::new();
    let tables = [
        (
            "fact",
            format!(
                "SELECT value AS id, (value * 7919) % {dim_rows} AS k, \
                        (value * 104729) % 1000 AS g, CAST((value * 31) % 10007 AS DOUBLE) / 4 AS v \
                 FROM range({fact_rows})"
            ),
        ),
        (
            "dim",
            format!(
                "SELECT value AS k, CAST((value * 17) % 1009 AS DOUBLE) * 5 AS w, \
                        concat('name-', CAST(value AS VARCHAR)) AS name \
                 FROM range({dim_rows})"
            ),
        ),
    ];
    for (table, sql) in tables {
        let path = dir.join(format!("{table}.parquet"));
        ctx.sql(&sql)
            .await
            .unwrap()
            .write_parquet(
                path.to_str().unwrap(),
                DataFrameWriteOptions::new().with_single_file_output(true),
                None,
            )
            .await
            .unwrap();
    }
}

async fn load_zyron(session: &mut Session, dir: &Path, table: &str) {
    let parquet = dir.join(format!("{table}.parquet"));
    for sql in [
        format!(
            "CREATE EXTERNAL TABLE source_{table} STORED AS PARQUET LOCATION '{}'",
            parquet.display()
        ),
        format!("CREATE TABLE {table} AS SELECT * FROM source_{table}"),
        format!("DROP TABLE source_{table}"),
    ] {
        session
            .execute_sql(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

fn compare(case: &Case, ours: &Rows, reply: &zyron_bench::duckdb::Reply) -> Result<(), String> {
    if !case.sorted_result {
        return same_rows(ours, &reply.rows, TOLERANCE);
    }
    let their_count = reply.row_count.expect("a columnar reply counts its rows");
    if ours.len() as u64 != their_count {
        return Err(format!("{} rows vs {their_count}", ours.len()));
    }
    same_rows(&ours[..HEAD_ROWS.min(ours.len())], &reply.rows, TOLERANCE)
}

/// The sort's rows `(id, v)` come in order of `v`, then `id`.
fn assert_sorted(rows: &Rows) {
    let key = |row: &Vec<Option<String>>| -> (f64, i64) {
        let number = |index: usize| row[index].as_deref().expect("no NULLs in fact");
        (number(1).parse().unwrap(), number(0).parse().unwrap())
    };
    for pair in rows.windows(2) {
        assert!(
            key(&pair[0]) <= key(&pair[1]),
            "sort returned {:?} before {:?}",
            pair[0],
            pair[1]
        );
    }
}
