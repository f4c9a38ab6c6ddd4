//! Differential testing in the manner of SQLancer: random tables and queries,
//! each query run on Zyron and on PostgreSQL 15 with the answers compared, and
//! two oracles that need no second database, run on Zyron alone:
//!
//! - TLP (ternary logic partitioning): the rows of `SELECT .. FROM ..` are those
//!   of the same query `WHERE p`, `WHERE NOT p` and `WHERE p IS NULL` together.
//! - NoREC: `count(*) .. WHERE p` equals counting the rows where `p` holds
//!   in the select list, which no optimizer rewrites the same way.
//!
//! The fixed part (seed `ZYRON_DIFF_SEED`, default 1, `ZYRON_DIFF_QUERIES`
//! queries) makes the same queries on every run; the fresh part runs
//! `ZYRON_DIFF_SECONDS` more with a seed taken from the clock, which it prints
//! so that a failure can be replayed. The full run sets an hour.
//!
//! A query Zyron cannot run although PostgreSQL answers it is a known gap
//! when its message is in [`KNOWN_GAPS`] (reported, with counts); any other
//! failure, wrong answer or broken oracle fails the test with the SQL that
//! shows it.

mod common;
#[path = "differential/compare.rs"]
mod compare;
#[path = "differential/query.rs"]
mod query;
#[path = "differential/rng.rs"]
mod rng;
#[path = "differential/schema.rs"]
mod schema;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use compare::{Answer, Verdict};
use rng::Rng;
use schema::Schema;
use tokio_postgres::Client;

/// Zyron failures on valid SQL that are understood and tracked, matched in
/// "Zyron fails with SQLSTATE (message)": each is a gap to close, not a
/// regression. A failure that holds none of these fails the test.
const KNOWN_GAPS: &[&str] = &[
    // Evaluation order: Zyron computes a join condition before a WHERE that
    // PostgreSQL finds false first, or a subquery under a CASE branch that is
    // not taken, and meets an overflow PostgreSQL never evaluates.
    "integer out of range",
    "bigint out of range",
    "value out of range: overflow",
    "value out of range: underflow",
    // Refused rather than answered wrong (`subquery::outer_aggregate`).
    "reads only columns of an outer query",
    // Subqueries in a join condition, an aggregate's argument or a window:
    // the Apply takes those of filters and projections only.
    "Physical plan does not support logical expression",
    "Correlated scalar subquery can only be used in",
    // sqlparser 0.62 reads `x IN ((SELECT ..), y)` as a subquery and fails.
    "Expected: ), found: ,",
    "Expected: end of statement, found: (",
    "42601 (syntax error: Expected: ), found:",
    // The Apply's answer column is nullable where DataFusion's logical plan
    // says a UNION input is not.
    "Physical input schema should be the same as the one converted",
    // A literal outside arithmetic stays BIGINT, and DataFusion's substr takes
    // no BIGINT string (`substr(CAST(NULL AS TEXT) || 1, ..)` shapes).
    "for function substr",
    // Decorrelation DataFusion gets wrong in shapes the Apply does not take
    // yet (subqueries in join conditions, nested under NOT IN in an OR).
    "null_aware anti join only supports single column join key",
    "Zyron fails with 42703",
    "specified more than once",
    // Evaluation order again: abs() of BIGINT's minimum on a row PostgreSQL never reaches.
    "overflow on abs(",
];

/// Wrong answers that are understood and tracked, by the start of their
/// finding: reported with counts, not failing the test.
const KNOWN_WRONG: &[&str] = &[
    // An integer literal that is not an operand of arithmetic (`NULLIF(2, 0)`,
    // a VALUES row) is BIGINT in Zyron and integer in PostgreSQL, so an
    // expression over it is BIGINT and does not overflow where PostgreSQL's
    // integer does.
    "PostgreSQL fails with 22003 (integer out of range); Zyron answers",
];

/// Queries per schema: enough for each schema's tables to be read many ways.
const QUERIES_PER_SCHEMA: usize = 60;
/// Findings kept in full in the report; the rest are counted.
const MAX_FINDINGS_SHOWN: usize = 25;

#[derive(Default)]
struct Report {
    queries: usize,
    same: usize,
    both_failed: usize,
    postgres_refused: usize,
    /// Known gaps by message, with one query that shows each.
    gaps: BTreeMap<String, (usize, String)>,
    tlp_checked: usize,
    norec_checked: usize,
    findings: Vec<String>,
}

impl Report {
    /// Counts a known gap, keeping the first query that shows it.
    fn track(&mut self, known: &str, sql: &str) {
        let entry = self
            .gaps
            .entry(known.to_owned())
            .or_insert_with(|| (0, sql.to_owned()));
        entry.0 += 1;
    }

    fn find(&mut self, what: String) {
        self.findings.push(what);
    }

    fn summary(&self, label: &str) -> String {
        let mut text = format!(
            "{label}: {} queries: {} same answers, {} failed on both, {} refused by PostgreSQL, \
             {} known gaps; TLP checked {} times, NoREC {} times; {} findings",
            self.queries,
            self.same,
            self.both_failed,
            self.postgres_refused,
            self.gaps.values().map(|(n, _)| n).sum::<usize>(),
            self.tlp_checked,
            self.norec_checked,
            self.findings.len()
        );
        for (message, (count, example)) in &self.gaps {
            text.push_str(&format!(
                "\n  gap x{count}: {message}\n      e.g. {example}"
            ));
        }
        for finding in self.findings.iter().take(MAX_FINDINGS_SHOWN) {
            text.push_str(&format!("\n  FINDING: {finding}"));
        }
        if !self.findings.is_empty() {
            let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
                "differential-{}.txt",
                label.split(" (").next().unwrap_or(label).replace(' ', "-")
            ));
            let all: Vec<String> = self
                .findings
                .iter()
                .map(|f| format!("FINDING: {f}"))
                .collect();
            match std::fs::write(&path, all.join("\n")) {
                Ok(()) => text.push_str(&format!("\n  all findings: {}", path.display())),
                Err(e) => text.push_str(&format!("\n  (writing {}: {e})", path.display())),
            }
        }
        text
    }
}

struct Peers {
    zyron: Client,
    postgres: Client,
}

impl Peers {
    /// Runs `sql` on both; a statement that sets a schema up must succeed on both.
    async fn setup(&self, sql: &str) -> Result<(), String> {
        for (name, client) in [("Zyron", &self.zyron), ("PostgreSQL", &self.postgres)] {
            if let Answer::Error { sqlstate, message } = compare::answer(client, sql).await {
                return Err(format!("{name} refused `{sql}`: {sqlstate} {message}"));
            }
        }
        Ok(())
    }

    async fn load(&self, schema: &Schema) -> Result<(), String> {
        for sql in Schema::drop_sql() {
            self.setup(&sql).await?;
        }
        for sql in schema.setup_sql() {
            self.setup(&sql).await?;
        }
        Ok(())
    }
}

enum Budget {
    Queries(usize),
    Time(Duration),
}

async fn campaign(peers: &Peers, seed: u64, budget: Budget, report: &mut Report) {
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let more = |report: &Report| match budget {
        Budget::Queries(n) => report.queries < n,
        Budget::Time(limit) => started.elapsed() < limit,
    };
    while more(report) {
        let schema = Schema::random(&mut rng);
        if let Err(e) = peers.load(&schema).await {
            report.find(format!("schema setup (seed {seed}): {e}"));
            return;
        }
        for _ in 0..QUERIES_PER_SCHEMA {
            if !more(report) {
                return;
            }
            let mut generator = query::Generator::new(&mut rng, &schema);
            let query = generator.query();
            let partitionable = generator.partitionable();
            let findings_before = report.findings.len();
            compare_with_postgres(peers, &query, report).await;
            ternary_logic_partitioning(&peers.zyron, &partitionable, report).await;
            non_optimizing_count(&peers.zyron, &partitionable, report).await;
            for finding in &mut report.findings[findings_before..] {
                finding.push_str(&format!(
                    "\n      schema: {}",
                    schema.setup_sql().join("; ")
                ));
            }
        }
    }
}

async fn compare_with_postgres(peers: &Peers, query: &query::Query, report: &mut Report) {
    report.queries += 1;
    let ours = compare::answer(&peers.zyron, &query.sql).await;
    let theirs = compare::answer(&peers.postgres, &query.sql).await;
    match compare::judge(&ours, &theirs, query.ordered) {
        Verdict::Same => report.same += 1,
        Verdict::BothFailed => report.both_failed += 1,
        Verdict::PostgresRefused => report.postgres_refused += 1,
        Verdict::ZyronFailed { sqlstate, message } => {
            let failure = format!("Zyron fails with {sqlstate} ({message})");
            let gap = KNOWN_GAPS.iter().find(|known| failure.contains(*known));
            match gap {
                Some(known) => report.track(known, &query.sql),
                None => report.find(format!("{failure} where PostgreSQL answers: {}", query.sql)),
            }
        }
        Verdict::Wrong(difference) => {
            match KNOWN_WRONG
                .iter()
                .find(|known| difference.starts_with(*known))
            {
                Some(known) => report.track(known, &query.sql),
                None => report.find(format!("{difference}\n      in: {}", query.sql)),
            }
        }
    }
}

async fn ternary_logic_partitioning(
    zyron: &Client,
    select: &query::Partitionable,
    report: &mut Report,
) {
    let base = format!("SELECT {} FROM {}", select.items, select.from);
    let p = &select.predicate;
    let parts = format!(
        "{base} WHERE {p} UNION ALL {base} WHERE NOT ({p}) UNION ALL {base} WHERE ({p}) IS NULL"
    );
    let (Answer::Rows(whole), Answer::Rows(partitioned)) = (
        compare::answer(zyron, &base).await,
        compare::answer(zyron, &parts).await,
    ) else {
        return;
    };
    report.tlp_checked += 1;
    if let Some(difference) = compare::same_rows(&partitioned, &whole, false) {
        report.find(format!(
            "TLP: the three partitions differ from the whole ({difference})\n      whole: {base}\n      parts: {parts}"
        ));
    }
}

async fn non_optimizing_count(zyron: &Client, select: &query::Partitionable, report: &mut Report) {
    let p = &select.predicate;
    let filtered = format!("SELECT count(*) FROM {} WHERE {p}", select.from);
    let counted = format!(
        "SELECT count(CASE WHEN {p} THEN 1 END) FROM {}",
        select.from
    );
    let (Answer::Rows(a), Answer::Rows(b)) = (
        compare::answer(zyron, &filtered).await,
        compare::answer(zyron, &counted).await,
    ) else {
        return;
    };
    report.norec_checked += 1;
    if a != b {
        report.find(format!(
            "NoREC: {a:?} rows pass the filter, {b:?} by counting\n      filter: {filtered}\n      count:  {counted}"
        ));
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a number")),
        Err(_) => default,
    }
}

/// Queries of the fixed-seed part; with the fresh part they fit CI's budget.
const DEFAULT_FIXED_QUERIES: u64 = 1_500;
const DEFAULT_FRESH_SECONDS: u64 = 90;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zyron_answers_as_postgresql_15_does() {
    let mut postgres = match zyron_bench::postgres::TempPostgres::init() {
        Ok(cluster) => cluster,
        Err(reason) => {
            eprintln!("differential: skipped, PostgreSQL 15 is not available: {reason}");
            return;
        }
    };
    postgres
        .spawn(&[("fsync", "off")])
        .expect("PostgreSQL starts");
    let postgres_client =
        common::connect_when_ready(postgres.port(), "postgres", Duration::from_secs(60)).await;
    let server = common::TestServer::start().await;
    let peers = Peers {
        zyron: server.connect().await,
        postgres: postgres_client,
    };

    let seed = env_number("ZYRON_DIFF_SEED", 1);
    let queries = env_number("ZYRON_DIFF_QUERIES", DEFAULT_FIXED_QUERIES) as usize;
    let mut fixed = Report::default();
    campaign(&peers, seed, Budget::Queries(queries), &mut fixed).await;
    println!("{}", fixed.summary(&format!("fixed seed {seed}")));

    let fresh_seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let seconds = env_number("ZYRON_DIFF_SECONDS", DEFAULT_FRESH_SECONDS);
    let mut fresh = Report::default();
    campaign(
        &peers,
        fresh_seed,
        Budget::Time(Duration::from_secs(seconds)),
        &mut fresh,
    )
    .await;
    println!(
        "{}",
        fresh.summary(&format!(
            "fresh seed {fresh_seed} (replay: ZYRON_DIFF_SEED={fresh_seed})"
        ))
    );
    // The fresh seed's findings fail the run where ZYRON_DIFF_FRESH_MUST_PASS=1
    // (the full run); in CI they are printed: wrong answers it still finds are
    // being worked on, and a seed-dependent failure must not block every change.
    let fresh_must_pass = env_number("ZYRON_DIFF_FRESH_MUST_PASS", 0) == 1;
    assert!(
        fixed.findings.is_empty() && (fresh.findings.is_empty() || !fresh_must_pass),
        "Zyron and PostgreSQL 15 disagree:\n{}\n{}",
        fixed.summary(&format!("fixed seed {seed}")),
        fresh.summary(&format!("fresh seed {fresh_seed}"))
    );
}
