//! Suite `end_to_end`: a server's whole life as an operator sees it, on Zyron
//! and on PostgreSQL 15 in the same run, interleaved round by round:
//! cold boot to accepting TCP connections, first ReadyForQuery, creating the
//! TPC-H schema, seeding rows with multi-row INSERTs, an analytical query,
//! and a graceful shutdown (SIGTERM to exit).
//!
//! Both run as child processes on loopback. PostgreSQL runs with
//! `synchronous_commit = on` and `shared_buffers = 1GB`; Zyron's tables are
//! durable heap tables, every INSERT a transaction committed through the WAL
//! with fdatasync, as PostgreSQL's are.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zyron_bench::duckdb::same_rows;
use zyron_bench::postgres::{TempPostgres, free_port, wait_until_accepting};
use zyron_bench::{Metric, Samples, SuiteRun};

const ZYRON: &str = env!("CARGO_BIN_EXE_zyron");
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
const ROWS_PER_INSERT: usize = 1000;

const TPCH_DDL: &str = "
CREATE TABLE region (r_regionkey INT, r_name TEXT, r_comment TEXT);
CREATE TABLE nation (n_nationkey INT, n_name TEXT, n_regionkey INT, n_comment TEXT);
CREATE TABLE supplier (s_suppkey BIGINT, s_name TEXT, s_address TEXT, s_nationkey INT, s_phone TEXT, s_acctbal NUMERIC(15,2), s_comment TEXT);
CREATE TABLE customer (c_custkey BIGINT, c_name TEXT, c_address TEXT, c_nationkey INT, c_phone TEXT, c_acctbal NUMERIC(15,2), c_mktsegment TEXT, c_comment TEXT);
CREATE TABLE part (p_partkey BIGINT, p_name TEXT, p_mfgr TEXT, p_brand TEXT, p_type TEXT, p_size INT, p_container TEXT, p_retailprice NUMERIC(15,2), p_comment TEXT);
CREATE TABLE partsupp (ps_partkey BIGINT, ps_suppkey BIGINT, ps_availqty INT, ps_supplycost NUMERIC(15,2), ps_comment TEXT);
CREATE TABLE orders (o_orderkey BIGINT, o_custkey BIGINT, o_orderstatus TEXT, o_totalprice NUMERIC(15,2), o_orderdate DATE, o_orderpriority TEXT, o_clerk TEXT, o_shippriority INT, o_comment TEXT);
CREATE TABLE lineitem (l_orderkey BIGINT, l_partkey BIGINT, l_suppkey BIGINT, l_linenumber INT, l_quantity NUMERIC(15,2), l_extendedprice NUMERIC(15,2), l_discount NUMERIC(15,2), l_tax NUMERIC(15,2), l_returnflag TEXT, l_linestatus TEXT, l_shipdate DATE, l_commitdate DATE, l_receiptdate DATE, l_shipinstruct TEXT, l_shipmode TEXT, l_comment TEXT);
CREATE TABLE seed (id BIGINT, grp INT, qty INT, price DOUBLE PRECISION, flag TEXT);
";
const DROP_ALL: &str = "DROP TABLE IF EXISTS region; DROP TABLE IF EXISTS nation; DROP TABLE IF EXISTS supplier; \
DROP TABLE IF EXISTS customer; DROP TABLE IF EXISTS part; DROP TABLE IF EXISTS partsupp; DROP TABLE IF EXISTS orders; \
DROP TABLE IF EXISTS lineitem; DROP TABLE IF EXISTS seed";
const ANALYTICAL: &str = "SELECT flag, grp % 10 AS bucket, count(*) AS n, sum(qty) AS qty, sum(price) AS price \
FROM seed WHERE qty > 5 GROUP BY flag, grp % 10 ORDER BY flag, bucket";

/// Multi-row INSERT statements for `rows` deterministic rows.
fn seed_statements(rows: usize) -> Vec<String> {
    (0..rows)
        .collect::<Vec<_>>()
        .chunks(ROWS_PER_INSERT)
        .map(|chunk| {
            let values: Vec<String> = chunk
                .iter()
                .map(|&i| {
                    let flag = ["A", "N", "R"][i % 3];
                    format!(
                        "({i}, {}, {}, {}, '{flag}')",
                        i % 97,
                        (i * 7) % 50,
                        (i % 1000) as f64 * 1.25
                    )
                })
                .collect();
            format!("INSERT INTO seed VALUES {}", values.join(", "))
        })
        .collect()
}

/// One system under test: how to start it, and how to stop it.
trait Lifecycle {
    fn name(&self) -> String;
    fn spawn(&mut self) -> u16;
    fn terminate(&mut self) -> Duration;
}

struct Zyron {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Lifecycle for Zyron {
    fn name(&self) -> String {
        "zyron".into()
    }

    fn spawn(&mut self) -> u16 {
        let port = free_port();
        let child = Command::new(ZYRON)
            .args([
                "serve",
                "--log",
                "warn",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(self.dir.path())
            .stderr(Stdio::null())
            .spawn()
            .expect("zyron starts");
        self.child = Some(child);
        port
    }

    fn terminate(&mut self) -> Duration {
        let mut child = self.child.take().expect("running");
        let started = Instant::now();
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        assert!(status.success(), "zyron exited with {status:?}");
        started.elapsed()
    }
}

struct Postgres {
    cluster: TempPostgres,
}

impl Lifecycle for Postgres {
    fn name(&self) -> String {
        "postgresql 15 (synchronous_commit=on)".into()
    }

    fn spawn(&mut self) -> u16 {
        self.cluster
            .spawn(&[
                ("shared_buffers", "1GB"),
                ("synchronous_commit", "on"),
                ("fsync", "on"),
            ])
            .expect("postgres starts");
        self.cluster.port()
    }

    fn terminate(&mut self) -> Duration {
        self.cluster.stop("TERM").expect("postgres stops")
    }
}

/// Figures of one life.
struct Life {
    boot_ms: f64,
    first_ready_ms: f64,
    ddl_ms: f64,
    seed_rows_per_s: f64,
    query_ms: Vec<f64>,
    shutdown_ms: f64,
    answer: Vec<Vec<Option<String>>>,
}

async fn live(system: &mut dyn Lifecycle, seed: &[String], queries: usize) -> Life {
    let started = Instant::now();
    let port = system.spawn();
    tokio::task::block_in_place(|| wait_until_accepting(port, BOOT_TIMEOUT)).expect("accepts");
    let boot = started.elapsed();
    let client = common::connect_when_ready(port, "postgres", BOOT_TIMEOUT).await;
    let first_ready = started.elapsed();

    client.batch_execute(DROP_ALL).await.expect("cleanup");
    let ddl_started = Instant::now();
    client.batch_execute(TPCH_DDL).await.expect("ddl");
    let ddl = ddl_started.elapsed();

    let seed_started = Instant::now();
    for statement in seed {
        client.batch_execute(statement).await.expect("seed insert");
    }
    let seed_rows = seed.len() * ROWS_PER_INSERT;
    let seed_rows_per_s = seed_rows as f64 / seed_started.elapsed().as_secs_f64();

    let mut query_ms = Vec::new();
    let mut answer = Vec::new();
    for _ in 0..queries {
        let query_started = Instant::now();
        let messages = client
            .simple_query(ANALYTICAL)
            .await
            .expect("analytical query");
        query_ms.push(query_started.elapsed().as_secs_f64() * 1e3);
        answer = common::simple_rows(messages);
    }
    drop(client);
    let shutdown = tokio::task::block_in_place(|| system.terminate());
    Life {
        boot_ms: boot.as_secs_f64() * 1e3,
        first_ready_ms: first_ready.as_secs_f64() * 1e3,
        ddl_ms: ddl.as_secs_f64() * 1e3,
        seed_rows_per_s,
        query_ms,
        shutdown_ms: shutdown.as_secs_f64() * 1e3,
        answer,
    }
}

#[derive(Default)]
struct Figures {
    boot: Samples,
    first_ready: Samples,
    ddl: Samples,
    seed: Option<Samples>,
    query: Samples,
    shutdown: Samples,
}

impl Figures {
    fn add(&mut self, life: &Life) {
        let ms = |v: f64| Duration::from_secs_f64(v / 1e3);
        self.boot.record_duration(ms(life.boot_ms));
        self.first_ready.record_duration(ms(life.first_ready_ms));
        self.ddl.record_duration(ms(life.ddl_ms));
        self.seed
            .get_or_insert_with(Samples::for_values)
            .record_value(life.seed_rows_per_s);
        for q in &life.query_ms {
            self.query.record_duration(ms(*q));
        }
        self.shutdown.record_duration(ms(life.shutdown_ms));
    }
}

#[test]
fn end_to_end_bench() {
    common::block_on(bench());
}

async fn bench() {
    let mut run = SuiteRun::new("end_to_end");
    let scale = run.scale();
    let rounds = scale.pick(1, 5);
    let seed_rows = scale.pick(10_000, 200_000);
    let queries = scale.pick(3, 10);
    let seed = seed_statements(seed_rows);

    let mut zyron = Zyron {
        dir: tempfile::tempdir().unwrap(),
        child: None,
    };
    let mut postgres = match TempPostgres::init() {
        Ok(cluster) => Some(Postgres { cluster }),
        Err(reason) => {
            run.skip(format!("PostgreSQL comparison: {reason}"));
            None
        }
    };
    let mut ours = Figures::default();
    let mut theirs = Figures::default();
    for _ in 0..rounds {
        let our_life = live(&mut zyron, &seed, queries).await;
        ours.add(&our_life);
        if let Some(pg) = postgres.as_mut() {
            let peer_life = live(pg, &seed, queries).await;
            theirs.add(&peer_life);
            if let Err(difference) = same_rows(&our_life.answer, &peer_life.answer, 1e-9) {
                panic!("analytical answers differ from PostgreSQL's: {difference}");
            }
        }
        assert_eq!(our_life.answer.len(), 30, "3 flags x 10 buckets");
    }

    let peer_name = postgres.as_ref().map(|p| p.name());
    let with_peer = |metric: Metric, peer: &Samples, higher: bool| match &peer_name {
        Some(name) if !peer.is_empty() => {
            let value = if higher {
                peer.spread(1.0).p50
            } else {
                peer.spread_ms().p50
            };
            metric.with_peer(name, value)
        }
        _ => metric,
    };
    let storage = "durable heap tables (WAL, fdatasync at commit)";
    run.push(with_peer(
        Metric::latency_ms("boot_to_accept", &ours.boot),
        &theirs.boot,
        false,
    ));
    run.push(with_peer(
        Metric::latency_ms("first_ready_for_query", &ours.first_ready),
        &theirs.first_ready,
        false,
    ));
    run.push(with_peer(
        Metric::latency_ms("ddl_bootstrap_9_tables", &ours.ddl),
        &theirs.ddl,
        false,
    ));
    let seed_ours = ours.seed.take().expect("at least one round");
    let seed_peer = theirs.seed.take().unwrap_or_default();
    run.push(
        with_peer(
            Metric::throughput("seed_insert", "rows/s", &seed_ours),
            &seed_peer,
            true,
        )
        .param("rows", seed_rows as u64)
        .param("rows_per_statement", ROWS_PER_INSERT as u64)
        .param("zyron_storage", storage),
    );
    run.push(
        with_peer(
            Metric::latency_ms("analytical_query", &ours.query),
            &theirs.query,
            false,
        )
        .param("rows_scanned", seed_rows as u64)
        .param(
            "answer",
            if postgres.is_some() {
                "matches postgresql"
            } else {
                "not compared"
            },
        ),
    );
    run.push(with_peer(
        Metric::latency_ms("graceful_shutdown", &ours.shutdown),
        &theirs.shutdown,
        false,
    ));
    run.finish().unwrap();
}
