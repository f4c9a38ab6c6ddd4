//! PostgreSQL 15's own regression tests, statement by statement, on Zyron
//! and on a throwaway PostgreSQL 15 in the same run, answers compared.
//!
//! The scripts are `src/test/regress/sql` of Debian's `postgresql-15` source
//! package (`scripts/test.sh` fetches it into `~/.cache/zyron-corpora/pg15`;
//! `ZYRON_PG_REGRESS_DIR` names another `regress` directory). They run in
//! schedule order after `test_setup`, on one connection to each server, as
//! psql would run them (`pg_regress/psql.rs`).
//!
//! A statement passes when both servers answer the same rows (as multisets,
//! numbers compared as in the differential test) or the same row count, or
//! both fail with the same SQLSTATE. Anything else is a failure: the known
//! ones are in `tests/corpora/pg_regress.failing`, any other fails the test,
//! and the pass rates by file go to the README.

mod common;
#[allow(dead_code)] // the differential test's judge is not this corpus's
#[path = "differential/compare.rs"]
mod compare;
#[path = "pg_regress/psql.rs"]
mod psql;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::corpus::{self, Outcomes, Verdict};
use compare::Answer;
use futures::SinkExt;
use psql::Item;
use tokio_postgres::{Client, SimpleQueryMessage};

/// The scripts compared, in the order of PostgreSQL's parallel_schedule;
/// `test_setup` makes the tables the others read.
const SCRIPTS: &[&str] = &[
    "test_setup",
    "select",
    "case",
    "union",
    "join",
    "subselect",
    "aggregates",
    "with",
    "window",
    "insert",
    "update",
    "delete",
    "numeric",
    "strings",
    "transactions",
];

/// Longer than any statement of these scripts takes on PostgreSQL; set on
/// both servers, so a runaway query ends with 57014 on its own.
const STATEMENT_TIMEOUT: &str = "10s";
/// A statement with no reply this long is taken as hung (its session is replaced).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// A client-side failure (a closed connection), which no server answered.
const NO_SQLSTATE: &str = "?????";

fn corpus_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ZYRON_PG_REGRESS_DIR") {
        return Some(PathBuf::from(dir));
    }
    let cache = PathBuf::from(std::env::var_os("HOME")?).join(".cache/zyron-corpora/pg15");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    // The newest version: postgresql-15.18 after postgresql-15.9.
    sources.sort_by_key(|dir| {
        dir.to_string_lossy()
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse::<u32>().ok())
            .collect::<Vec<_>>()
    });
    Some(sources.pop()?.join("src/test/regress"))
}

/// A statement's answer: its rows, or for a command its row count.
async fn answer(client: &Client, item_sql: &str, copy_data: Option<&str>) -> Answer {
    let reply = match copy_data {
        Some(data) => tokio::time::timeout(CLIENT_TIMEOUT, copy_in(client, item_sql, data)).await,
        None => tokio::time::timeout(CLIENT_TIMEOUT, client.simple_query(item_sql)).await,
    };
    match reply {
        Err(_) => Answer::Hung,
        Ok(Err(e)) => Answer::Error {
            sqlstate: e
                .code()
                .map_or_else(|| NO_SQLSTATE.to_owned(), |c| c.code().to_owned()),
            message: e
                .as_db_error()
                .map_or_else(|| e.to_string(), |db| db.message().to_owned()),
        },
        Ok(Ok(messages)) => Answer::Rows(rows_or_count(&messages)),
    }
}

fn rows_or_count(messages: &[SimpleQueryMessage]) -> Vec<compare::Row> {
    let mut rows = Vec::new();
    let mut described = false;
    let mut count = None;
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => rows.push(
                (0..row.len())
                    .map(|i| row.get(i).map(compare::canonical))
                    .collect(),
            ),
            SimpleQueryMessage::RowDescription(_) => described = true,
            SimpleQueryMessage::CommandComplete(n) => count = Some(*n),
            _ => {}
        }
    }
    match (described, count) {
        (false, Some(n)) => vec![vec![Some(format!("{n} rows affected"))]],
        _ => rows,
    }
}

async fn copy_in(
    client: &Client,
    sql: &str,
    data: &str,
) -> Result<Vec<SimpleQueryMessage>, tokio_postgres::Error> {
    let sink = client.copy_in::<_, bytes::Bytes>(sql).await?;
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data.to_owned())).await?;
    let rows = sink.as_mut().finish().await?;
    Ok(vec![SimpleQueryMessage::CommandComplete(rows)])
}

fn verdict(zyron: &Answer, postgres: &Answer) -> Verdict {
    let fail = |why: String| Verdict::Fail(corpus::one_line(&why, 240));
    match (zyron, postgres) {
        (Answer::Hung, _) => fail(format!("no answer within {} s", CLIENT_TIMEOUT.as_secs())),
        (_, Answer::Hung) => fail("PostgreSQL gave no answer".to_owned()),
        (
            Answer::Error { sqlstate: ours, .. },
            Answer::Error {
                sqlstate: theirs, ..
            },
        ) if ours == theirs && ours != NO_SQLSTATE => Verdict::Pass,
        (
            Answer::Error { sqlstate, message },
            Answer::Error {
                sqlstate: theirs, ..
            },
        ) => fail(format!(
            "Zyron fails with {sqlstate} ({message}), PostgreSQL with {theirs}"
        )),
        (Answer::Error { sqlstate, message }, Answer::Rows(_)) => {
            fail(format!("Zyron fails with {sqlstate} ({message})"))
        }
        (Answer::Rows(_), Answer::Error { sqlstate, message }) => fail(format!(
            "Zyron answers where PostgreSQL fails with {sqlstate} ({message})"
        )),
        (Answer::Rows(ours), Answer::Rows(theirs)) => match compare::same_rows(ours, theirs, false)
        {
            None => Verdict::Pass,
            Some(difference) => fail(format!("wrong answer: {difference}")),
        },
    }
}

struct Session {
    zyron: Client,
    postgres: Client,
}

impl Session {
    async fn open(server: &common::TestServer, postgres_port: u16) -> Self {
        let session = Session {
            zyron: server.connect().await,
            postgres: common::connect_when_ready(postgres_port, "postgres", CLIENT_TIMEOUT).await,
        };
        for client in [&session.zyron, &session.postgres] {
            client
                .simple_query(&format!("SET statement_timeout = '{STATEMENT_TIMEOUT}'"))
                .await
                .expect("statement_timeout");
        }
        // One partition: scripts read answers that depend on row order (a ROWS
        // frame without ORDER BY), which parallel scans would make vary by run.
        session
            .zyron
            .simple_query("SET datafusion.execution.target_partitions = 1")
            .await
            .expect("target_partitions");
        session
    }
}

#[derive(Default)]
struct FileTally {
    statements: usize,
    passed: usize,
    /// Both fail with the same SQLSTATE (also a pass).
    both_fail: usize,
    /// EXPLAIN that both answer: plans are not compared.
    not_compared: usize,
    wrong: usize,
    zyron_fails: usize,
    zyron_answers_error: usize,
    other: usize,
}

impl FileTally {
    fn count(&mut self, verdict: &Verdict, zyron: &Answer) {
        self.statements += 1;
        match verdict {
            Verdict::Pass if matches!(zyron, Answer::Error { .. }) => self.both_fail += 1,
            Verdict::Pass => self.passed += 1,
            Verdict::Fail(why) if why.starts_with("wrong answer") => self.wrong += 1,
            Verdict::Fail(why) if why.starts_with("Zyron answers where") => {
                self.zyron_answers_error += 1
            }
            Verdict::Fail(why) if why.starts_with("Zyron fails with") => self.zyron_fails += 1,
            Verdict::Fail(_) => self.other += 1,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_regression_statements_answer_as_postgresql_15() {
    let Some(dir) = corpus_dir().filter(|d| d.join("sql/test_setup.sql").is_file()) else {
        println!(
            "pg_regress: skipped: no PostgreSQL 15 regression scripts \
             (scripts/test.sh fetches them; or set ZYRON_PG_REGRESS_DIR)"
        );
        return;
    };
    let mut postgres = match zyron_bench::postgres::TempPostgres::init() {
        Ok(cluster) => cluster,
        Err(reason) => {
            println!("pg_regress: skipped, PostgreSQL 15 is not available: {reason}");
            return;
        }
    };
    postgres
        .spawn(&[("fsync", "off")])
        .expect("PostgreSQL starts");
    let server = common::TestServer::start_with(|c| c.query_memory_limit_mib = 2048, None).await;
    // Waits until PostgreSQL takes connections.
    common::connect_when_ready(postgres.port(), "postgres", Duration::from_secs(60)).await;
    let env = HashMap::from([
        ("PG_ABS_SRCDIR".to_owned(), dir.display().to_string()),
        ("PG_LIBDIR".to_owned(), "/nonexistent".to_owned()),
        ("PG_DLSUFFIX".to_owned(), ".so".to_owned()),
    ]);

    // ZYRON_PG_REGRESS_TRACE=1 prints each statement before it runs.
    let trace = std::env::var("ZYRON_PG_REGRESS_TRACE").is_ok_and(|v| v == "1");
    let started = Instant::now();
    let mut outcomes = Outcomes::default();
    let mut tallies = Vec::new();
    for script in SCRIPTS {
        let path = dir.join(format!("sql/{script}.sql"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let mut tally = FileTally::default();
        // pg_regress runs each script in a new psql session.
        let mut session = Session::open(&server, postgres.port()).await;
        let (mut last_line, mut same_line) = (0, 0);
        for item in psql::split(&text, &env, &dir) {
            let Item::Statement {
                line,
                sql,
                copy_data,
            } = item
            else {
                continue;
            };
            // A plan is each system's own: EXPLAIN runs (a failure would still
            // show) but its text is not compared.
            let explain = sql.trim_start().to_ascii_lowercase().starts_with("explain");
            if trace {
                eprintln!("pg_regress: {script}.sql:{line}: {sql}");
            }
            let ours = answer(&session.zyron, &sql, copy_data.as_deref()).await;
            let theirs = answer(&session.postgres, &sql, copy_data.as_deref()).await;
            // tokio-postgres loses its place in the protocol after a COPY that
            // fails (with PostgreSQL as with Zyron): such a session, like a hung
            // one, is replaced, as psql would reconnect.
            let failed_copy = copy_data.is_some()
                && [&ours, &theirs]
                    .iter()
                    .any(|a| matches!(a, Answer::Error { .. }));
            let hung = [&ours, &theirs].iter().any(|a| matches!(a, Answer::Hung));
            if failed_copy || hung {
                session = Session::open(&server, postgres.port()).await;
            }
            let verdict = match (&ours, &theirs) {
                (Answer::Rows(_), Answer::Rows(_)) if explain => {
                    tally.not_compared += 1;
                    continue;
                }
                _ => verdict(&ours, &theirs),
            };
            tally.count(&verdict, &ours);
            // Statements sharing a line are told apart by their order on it.
            same_line = if line == last_line { same_line + 1 } else { 0 };
            last_line = line;
            let case = match same_line {
                0 => format!("{script}.sql:{line}"),
                n => format!("{script}.sql:{line}.{n}"),
            };
            outcomes.record(case, verdict);
        }
        println!(
            "pg_regress: {script}: {} of {} statements pass ({:.0} s so far)",
            tally.passed + tally.both_fail,
            tally.statements,
            started.elapsed().as_secs_f64()
        );
        tallies.push((*script, tally));
    }
    server.server.shutdown().await.unwrap();

    let section = readme_section(&dir, &tallies);
    println!("{section}");
    corpus::publish("pg_regress", &section).unwrap_or_else(|e| println!("pg_regress: README: {e}"));
    if let Err(new_failures) = corpus::check("pg_regress", &outcomes) {
        panic!("{new_failures}");
    }
}

fn readme_section(dir: &Path, tallies: &[(&str, FileTally)]) -> String {
    let source = dir
        .ancestors()
        .nth(3)
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut text = format!(
        "PostgreSQL's regression scripts ({source}, `src/test/regress/sql`), every statement \
         run on Zyron and on PostgreSQL 15 in the same run \
         (`cargo test --workspace --release --test pg_regress`):\n\n\
         | script | statements compared | same answer | same error | wrong answer | Zyron fails, PostgreSQL answers | Zyron answers, PostgreSQL fails | other |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut total = FileTally::default();
    for (script, t) in tallies {
        text.push_str(&format!(
            "| {script} | {} | {} | {} | {} | {} | {} | {} |\n",
            t.statements,
            t.passed,
            t.both_fail,
            t.wrong,
            t.zyron_fails,
            t.zyron_answers_error,
            t.other
        ));
        total.statements += t.statements;
        total.passed += t.passed;
        total.both_fail += t.both_fail;
        total.not_compared += t.not_compared;
        total.wrong += t.wrong;
        total.zyron_fails += t.zyron_fails;
        total.zyron_answers_error += t.zyron_answers_error;
        total.other += t.other;
    }
    text.push_str(&format!(
        "| **all** | {} | {} | {} | {} | {} | {} | {} |\n\n\
         {:.0}% of the statements pass (same answer or same error).\n",
        total.statements,
        total.passed,
        total.both_fail,
        total.wrong,
        total.zyron_fails,
        total.zyron_answers_error,
        total.other,
        100.0 * (total.passed + total.both_fail) as f64 / total.statements.max(1) as f64,
    ));
    text.push_str(&format!(
        "{} EXPLAIN statements that both answer are not compared: a plan is each system's own.\n",
        total.not_compared
    ));
    text
}
