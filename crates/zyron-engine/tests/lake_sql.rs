//! Lake tables from SQL: CREATE EXTERNAL TABLE ... STORED AS LAKE, INSERT,
//! UPDATE and DELETE (deletion vectors), SELECT with files pruned, time
//! travel, the change feed, OPTIMIZE, VACUUM, clustering, tags and branches,
//! reopening the table from its location, and clear errors.

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use zyron_engine::{Engine, EngineOptions, Session};

mod common;

use common::{block_on, command, error, rows};

/// The text of a plan `EXPLAIN sql` prints (its physical plan).
async fn physical_plan(session: &mut Session, sql: &str) -> String {
    let batches = rows(session, &format!("EXPLAIN {sql}")).await;
    let mut text = String::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            if b.column(0).as_string::<i32>().value(i) == "physical_plan" {
                text.push_str(b.column(1).as_string::<i32>().value(i));
            }
        }
    }
    text
}

/// The single BIGINT a query answers.
async fn number(session: &mut Session, sql: &str) -> i64 {
    let batches = rows(session, sql).await;
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

/// `(item, value)` rows of a maintenance function, as a lookup.
async fn report(session: &mut Session, sql: &str) -> std::collections::BTreeMap<String, i64> {
    let mut out = std::collections::BTreeMap::new();
    for batch in rows(session, sql).await {
        let items = batch.column(0).as_string::<i32>();
        let values = batch.column(1).as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            out.insert(items.value(i).to_owned(), values.value(i));
        }
    }
    out
}

#[test]
fn lake_tables_from_sql() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("events");
        let engine = Engine::new(EngineOptions::default()).unwrap();
        let mut s = engine.new_session();
        command(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE events (id BIGINT NOT NULL, kind TEXT, amount DOUBLE) \
                 STORED AS LAKE LOCATION '{}' OPTIONS ('inline_max_bytes' '0')",
                location.display()
            ),
        )
        .await;
        // v1, v2: two loads of 10,000 rows each, one file per statement.
        for (lo, hi) in [(1, 10_000), (10_001, 20_000)] {
            let tag = command(
                &mut s,
                &format!(
                    "INSERT INTO events SELECT value AS id, CASE WHEN value % 2 = 0 THEN 'even' ELSE 'odd' END AS kind, \
                     CAST(value AS DOUBLE) AS amount FROM generate_series({lo}, {hi})"
                ),
            )
            .await;
            assert_eq!(tag, "INSERT 0 10000");
        }
        assert_eq!(number(&mut s, "SELECT count(*) FROM events").await, 20_000);
        // v3: DELETE as a deletion vector; v4: UPDATE.
        assert_eq!(
            command(&mut s, "DELETE FROM events WHERE id <= 100").await,
            "DELETE 100"
        );
        assert_eq!(
            command(&mut s, "UPDATE events SET amount = -1 WHERE id > 19990").await,
            "UPDATE 10"
        );
        assert_eq!(number(&mut s, "SELECT count(*) FROM events").await, 19_900);
        assert_eq!(
            number(
                &mut s,
                "SELECT CAST(sum(amount) AS BIGINT) FROM events WHERE amount < 0"
            )
            .await,
            -10
        );
        assert_eq!(
            number(
                &mut s,
                "SELECT count(*) FROM events WHERE id BETWEEN 15000 AND 15009"
            )
            .await,
            10
        );
        // Time travel: version 2 still has every row and no update.
        assert_eq!(
            number(&mut s, "SELECT count(*) FROM lake_version('events', 2)").await,
            20_000
        );
        assert_eq!(
            number(
                &mut s,
                "SELECT count(*) FROM lake_version('events', 2) WHERE amount < 0"
            )
            .await,
            0
        );
        // The change feed of v3..=v4: 100 deletes, then 10 deletes + 10 inserts.
        let changes = rows(
            &mut s,
            "SELECT _commit_version, _change_type, count(*) FROM lake_changes('events', 2, 4) \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .await;
        let summary: Vec<(i64, String, i64)> = changes
            .iter()
            .flat_map(|b| {
                (0..b.num_rows()).map(move |i| {
                    (
                        b.column(0).as_primitive::<Int64Type>().value(i),
                        b.column(1).as_string::<i32>().value(i).to_owned(),
                        b.column(2).as_primitive::<Int64Type>().value(i),
                    )
                })
            })
            .collect();
        assert_eq!(
            summary,
            [
                (3, "delete".into(), 100),
                (4, "delete".into(), 10),
                (4, "insert".into(), 10)
            ]
        );
        // Tags and branches.
        assert_eq!(
            report(&mut s, "SELECT * FROM lake_tag('events', 'loaded', 2)").await["version"],
            2
        );
        let branch = report(&mut s, "SELECT * FROM lake_branch('events', 'fix', 4)").await;
        assert_eq!(branch["version"], 4);
        // OPTIMIZE merges the files and purges deleted rows; rows unchanged.
        let optimized = report(&mut s, "SELECT * FROM lake_optimize('events')").await;
        assert_eq!(optimized["files_removed"], 3, "{optimized:?}");
        assert_eq!(optimized["rows_written"], 19_900);
        assert_eq!(number(&mut s, "SELECT count(*) FROM events").await, 19_900);
        // Clustering by two columns keeps the rows too.
        let clustered = report(
            &mut s,
            "SELECT * FROM lake_cluster('events', 'hilbert', 'id, amount', 2000)",
        )
        .await;
        assert_eq!(clustered["files_added"], 10, "{clustered:?}");
        assert_eq!(number(&mut s, "SELECT count(*) FROM events").await, 19_900);
        // VACUUM with no retention deletes OPTIMIZE's file, which clustering
        // replaced; the tag keeps version 2's two files and the branch the
        // update's file: 10 clustered + 2 + 1 referenced.
        let vacuumed = report(&mut s, "SELECT * FROM lake_vacuum('events', 0)").await;
        assert_eq!(vacuumed["files_deleted"], 1, "{vacuumed:?}");
        assert_eq!(vacuumed["files_referenced"], 13, "{vacuumed:?}");
        assert_eq!(
            number(&mut s, "SELECT count(*) FROM lake_version('events', 2)").await,
            20_000
        );
        // Another engine opens the table from its location alone.
        let other = Engine::new(EngineOptions::default()).unwrap();
        let mut t = other.new_session();
        command(
            &mut t,
            &format!(
                "CREATE EXTERNAL TABLE ev STORED AS LAKE LOCATION '{}'",
                location.display()
            ),
        )
        .await;
        assert_eq!(number(&mut t, "SELECT count(*) FROM ev").await, 19_900);
        assert_eq!(number(&mut t, "SELECT max(id) FROM ev").await, 20_000);
    });
}

#[test]
fn lake_errors_are_clear() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::new(EngineOptions::default()).unwrap();
        let mut s = engine.new_session();
        command(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE t (id BIGINT NOT NULL) STORED AS LAKE LOCATION '{}'",
                dir.path().display()
            ),
        )
        .await;
        let err = error(&mut s, "INSERT INTO t VALUES (NULL)").await;
        assert_eq!(err.sqlstate().code(), "23502", "{err}");
        command(&mut s, "INSERT INTO t VALUES (1), (2)").await;
        // Inside a transaction block a lake write could not roll back.
        command(&mut s, "BEGIN").await;
        let err = error(&mut s, "INSERT INTO t VALUES (3)").await;
        assert_eq!(err.sqlstate().code(), "25001", "{err}");
        command(&mut s, "ROLLBACK").await;
        command(&mut s, "BEGIN").await;
        let err = error(&mut s, "SELECT * FROM lake_optimize('t')").await;
        assert_eq!(err.sqlstate().code(), "25001", "{err}");
        command(&mut s, "ROLLBACK").await;
        // EXPLAIN would run the write while planning it: refused.
        let err = error(&mut s, "EXPLAIN DELETE FROM t WHERE id = 1").await;
        assert_eq!(err.sqlstate().code(), "0A000", "{err}");
        let err = error(&mut s, "EXPLAIN SELECT * FROM lake_vacuum('t', 0)").await;
        assert_eq!(err.sqlstate().code(), "0A000", "{err}");
        let err = error(&mut s, "SELECT * FROM lake_optimize('t', 0)").await;
        assert_eq!(err.sqlstate().code(), "22023", "{err}");
        let err = error(&mut s, "SELECT * FROM lake_version('t', 9)").await;
        assert_eq!(err.sqlstate().code(), "22023", "{err}");
        let err = error(&mut s, "SELECT * FROM lake_version('nope', 1)").await;
        assert_eq!(err.sqlstate().code(), "42P01", "{err}");
        let err = error(&mut s, "SELECT * FROM lake_tag('t', 'a/b', 1)").await;
        assert_eq!(err.sqlstate().code(), "22023", "{err}");
        // The same location with other columns is refused.
        let err = error(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE u (name TEXT) STORED AS LAKE LOCATION '{}'",
                dir.path().display()
            ),
        )
        .await;
        assert_eq!(err.sqlstate().code(), "42804", "{err}");
        assert_eq!(number(&mut s, "SELECT count(*) FROM t").await, 2);
    });
}

#[test]
fn lake_statements_and_planner_statistics() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("points");
        let engine = Engine::new(EngineOptions::default()).unwrap();
        let mut s = engine.new_session();
        command(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE points (id BIGINT NOT NULL, x BIGINT, y BIGINT) \
                 STORED AS LAKE LOCATION '{}' OPTIONS ('inline_max_bytes' '0')",
                location.display()
            ),
        )
        .await;
        // v1..v4: four files of 5,000 rows; x runs with id, y is scattered.
        for part in 0..4 {
            let (lo, hi) = (part * 5_000 + 1, part * 5_000 + 5_000);
            command(
                &mut s,
                &format!(
                    "INSERT INTO points SELECT value AS id, value AS x, (value * 7919) % 20000 AS y \
                     FROM generate_series({lo}, {hi})"
                ),
            )
            .await;
        }
        // OPTIONS reach the table: with inline_max_bytes 0 every load is a
        // file under data/, none kept in the log.
        let data_files = std::fs::read_dir(location.join("data")).unwrap().count();
        assert_eq!(data_files, 4);
        // The planner knows the row count and each column's range from the
        // log: count, min and max are answered without a scan.
        let aggregate = "SELECT count(*), min(id), max(x) FROM points";
        let plan = physical_plan(&mut s, aggregate).await;
        assert!(!plan.contains("LakeScanExec"), "{plan}");
        let batch = &rows(&mut s, aggregate).await[0];
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 20_000);
        assert_eq!(batch.column(1).as_primitive::<Int64Type>().value(0), 1);
        assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(0), 20_000);
        // Statistics line up with the projected columns: y's range is its own.
        let batch = &rows(&mut s, "SELECT max(y), min(y), max(id) FROM points").await[0];
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 19_999);
        assert_eq!(batch.column(1).as_primitive::<Int64Type>().value(0), 0);
        assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(0), 20_000);
        // A filter on x prunes three of the four files before any is read.
        let plan = physical_plan(&mut s, "SELECT * FROM points WHERE x BETWEEN 100 AND 200").await;
        assert!(plan.contains("files=1, pruned=3"), "{plan}");

        // After a DELETE the counts stay exact (the log knows deleted rows)
        // but min and max need the data.
        command(&mut s, "DELETE FROM points WHERE id = 1").await;
        let plan = physical_plan(&mut s, "SELECT count(*) FROM points").await;
        assert!(!plan.contains("LakeScanExec"), "{plan}");
        assert_eq!(number(&mut s, "SELECT count(*) FROM points").await, 19_999);
        let plan = physical_plan(&mut s, "SELECT min(id) FROM points").await;
        assert!(plan.contains("LakeScanExec"), "{plan}");
        assert_eq!(number(&mut s, "SELECT min(id) FROM points").await, 2);

        // Tags and branches as statements.
        assert_eq!(
            command(&mut s, "ALTER TABLE points CREATE TAG before_fix").await,
            "ALTER TABLE"
        );
        command(
            &mut s,
            "ALTER TABLE points CREATE TAG first AS OF VERSION 1",
        )
        .await;
        command(&mut s, "ALTER TABLE points CREATE BRANCH fix").await;
        command(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE points_fix STORED AS LAKE LOCATION '{}' \
                 OPTIONS ('branch' 'fix')",
                location.display()
            ),
        )
        .await;
        command(&mut s, "INSERT INTO points_fix VALUES (1, 1, 7919)").await;
        command(&mut s, "DELETE FROM points_fix WHERE id = 20000").await;
        assert_eq!(number(&mut s, "SELECT count(*) FROM points").await, 19_999);
        assert_eq!(
            number(&mut s, "SELECT count(*) FROM points_fix").await,
            19_999
        );
        assert_eq!(number(&mut s, "SELECT min(id) FROM points_fix").await, 1);
        assert_eq!(
            number(&mut s, "SELECT min(id) FROM points").await,
            2,
            "main unchanged"
        );
        assert_eq!(number(&mut s, "SELECT max(id) FROM points").await, 20_000);
        // Versioning belongs to the main line, not to a table opened on a branch.
        let err = error(&mut s, "ALTER TABLE points_fix CREATE BRANCH inner").await;
        assert_eq!(err.sqlstate().code(), "0A000", "{err}");
        let err = error(&mut s, "SELECT * FROM lake_version('points_fix', 'first')").await;
        assert_eq!(err.sqlstate().code(), "0A000", "{err}");
        command(&mut s, "ALTER TABLE points MERGE BRANCH fix").await;
        assert_eq!(number(&mut s, "SELECT min(id) FROM points").await, 1);
        assert_eq!(number(&mut s, "SELECT max(id) FROM points").await, 19_999);
        command(&mut s, "ALTER TABLE points DROP BRANCH fix").await;
        // Time travel by tag name.
        assert_eq!(
            number(
                &mut s,
                "SELECT count(*) FROM lake_version('points', 'first')"
            )
            .await,
            5_000
        );
        assert_eq!(
            number(
                &mut s,
                "SELECT min(id) FROM lake_version('points', 'before_fix')"
            )
            .await,
            2
        );
        command(&mut s, "ALTER TABLE points DROP TAG first").await;
        let err = error(&mut s, "SELECT * FROM lake_version('points', 'first')").await;
        assert_eq!(err.sqlstate().code(), "42704", "{err}");

        // CLUSTER BY is remembered, with an expression as a key; OPTIMIZE
        // applies it. Before, y (scattered) prunes nothing.
        let by_y = "SELECT count(*) FROM points WHERE y BETWEEN 1000 AND 1100";
        let expected = number(&mut s, by_y).await;
        // (The branch's one-row file is pruned; the four loads are not.)
        let plan = physical_plan(&mut s, by_y).await;
        assert!(plan.contains("files=4, pruned=1"), "{plan}");
        command(&mut s, "ALTER TABLE points CLUSTER BY HILBERT (y / 100, x)").await;
        let optimized = report(&mut s, "OPTIMIZE points").await;
        assert_eq!(optimized["rows_written"], 19_999, "{optimized:?}");
        // One file of 2^20 rows: cluster into small files to see pruning.
        let clustered = report(
            &mut s,
            "SELECT * FROM lake_cluster('points', 'hilbert', 'y / 100', 1000)",
        )
        .await;
        assert_eq!(clustered["files_added"], 20, "{clustered:?}");
        assert_eq!(number(&mut s, by_y).await, expected);
        let plan = physical_plan(&mut s, by_y).await;
        assert!(
            plan.contains("files=1, pruned=19") || plan.contains("files=2, pruned=18"),
            "{plan}"
        );
        let zordered = report(&mut s, "OPTIMIZE points ZORDER BY (x, y)").await;
        assert_eq!(zordered["rows_written"], 19_999, "{zordered:?}");
        command(&mut s, "ALTER TABLE points CLUSTER BY NONE").await;
        let compacted = report(&mut s, "OPTIMIZE points").await;
        assert_eq!(
            compacted["files_removed"], 0,
            "one file already: {compacted:?}"
        );

        // VACUUM: PostgreSQL's form keeps 7 days; RETAIN 0 HOURS deletes the
        // files no version, tag or branch still reads.
        assert_eq!(command(&mut s, "VACUUM points").await, "VACUUM");
        let dry = report(&mut s, "VACUUM points RETAIN 0 HOURS DRY RUN").await;
        assert!(dry["files_deleted"] > 0, "{dry:?}");
        let done = report(&mut s, "VACUUM points RETAIN 0 HOURS").await;
        assert_eq!(done["files_deleted"], dry["files_deleted"], "{done:?}");
        assert_eq!(number(&mut s, "SELECT count(*) FROM points").await, 19_999);
        assert_eq!(
            number(
                &mut s,
                "SELECT min(id) FROM lake_version('points', 'before_fix')"
            )
            .await,
            2
        );

        // Errors: unknown keys, bad syntax, blocks, non-lake tables.
        let err = error(&mut s, "OPTIMIZE points ZORDER BY (nope)").await;
        assert_eq!(err.sqlstate().code(), "42703", "{err}");
        let err = error(&mut s, "ALTER TABLE points CREATE TAG t AS OF VERSION x").await;
        assert_eq!(err.sqlstate().code(), "42601", "{err}");
        let err = error(&mut s, "ALTER TABLE points CREATE TAG before_fix").await;
        assert_eq!(err.sqlstate().code(), "42710", "{err}");
        let err = error(&mut s, "OPTIMIZE nope").await;
        assert_eq!(err.sqlstate().code(), "42P01", "{err}");
        command(&mut s, "BEGIN").await;
        let err = error(&mut s, "ALTER TABLE points CREATE TAG later").await;
        assert_eq!(err.sqlstate().code(), "25001", "{err}");
        command(&mut s, "ROLLBACK").await;
        let err = error(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE nob STORED AS LAKE LOCATION '{}' OPTIONS ('branch' 'nob')",
                location.display()
            ),
        )
        .await;
        assert_eq!(err.sqlstate().code(), "42704", "{err}");
    });
}

#[test]
fn lake_tables_survive_a_restart() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let location = dir.path().join("lake");
        let options = || EngineOptions {
            data_dir: Some(data_dir.clone()),
            ..EngineOptions::default()
        };
        {
            let engine = Engine::new(options()).unwrap();
            let mut s = engine.new_session();
            for (name, extra) in [("kept", ""), ("gone", "2")] {
                command(
                    &mut s,
                    &format!(
                        "CREATE EXTERNAL TABLE {name} (id BIGINT NOT NULL, note TEXT) \
                         STORED AS LAKE LOCATION '{}{extra}' OPTIONS ('inline_max_bytes' '0')",
                        location.display()
                    ),
                )
                .await;
            }
            command(&mut s, "INSERT INTO kept VALUES (1, 'a'), (2, 'b')").await;
            command(&mut s, "ALTER TABLE kept CREATE TAG two_rows").await;
            // A table on a branch keeps its OPTIONS across the restart.
            command(&mut s, "ALTER TABLE kept CREATE BRANCH side").await;
            command(
                &mut s,
                &format!(
                    "CREATE EXTERNAL TABLE \"Kept Side\" STORED AS LAKE LOCATION '{}' \
                     OPTIONS ('branch' 'side')",
                    location.display()
                ),
            )
            .await;
            command(&mut s, "INSERT INTO \"Kept Side\" VALUES (10, 'side')").await;
            // A .zyr table is kept too.
            let zyr = dir.path().join("three.zyr");
            command(
                &mut s,
                &format!(
                    "COPY (SELECT value AS v FROM generate_series(1, 3)) TO '{}'",
                    zyr.display()
                ),
            )
            .await;
            command(
                &mut s,
                &format!(
                    "CREATE EXTERNAL TABLE three STORED AS ZYR LOCATION '{}'",
                    zyr.display()
                ),
            )
            .await;
            // IF NOT EXISTS on a taken name changes nothing, here or after.
            command(
                &mut s,
                &format!(
                    "CREATE EXTERNAL TABLE IF NOT EXISTS kept STORED AS LAKE LOCATION '{}2'",
                    location.display()
                ),
            )
            .await;
            assert_eq!(command(&mut s, "DROP TABLE gone").await, "DROP TABLE");
        }
        let engine = Engine::new(options()).unwrap();
        assert_eq!(engine.reopen_external_tables_and_views().await, 3);
        let mut s = engine.new_session();
        assert_eq!(number(&mut s, "SELECT count(*) FROM kept").await, 2);
        assert_eq!(
            number(&mut s, "SELECT max(id) FROM \"Kept Side\"").await,
            10
        );
        assert_eq!(number(&mut s, "SELECT sum(v) FROM three").await, 6);
        let listed = std::fs::read_to_string(data_dir.join("external_tables.json")).unwrap();
        assert!(
            !listed.contains("lake2"),
            "IF NOT EXISTS kept the first: {listed}"
        );
        assert_eq!(
            number(
                &mut s,
                "SELECT count(*) FROM lake_version('kept', 'two_rows')"
            )
            .await,
            2
        );
        command(&mut s, "INSERT INTO kept VALUES (3, 'c')").await;
        assert_eq!(number(&mut s, "SELECT max(id) FROM kept").await, 3);
        let err = error(&mut s, "SELECT * FROM gone").await;
        assert_eq!(err.sqlstate().code(), "42P01", "{err}");
    });
}
