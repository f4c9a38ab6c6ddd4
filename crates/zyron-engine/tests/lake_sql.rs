//! Lake tables from SQL: CREATE EXTERNAL TABLE ... STORED AS LAKE, INSERT,
//! UPDATE and DELETE (deletion vectors), SELECT with files pruned, time
//! travel, the change feed, OPTIMIZE, VACUUM, clustering, tags and branches,
//! reopening the table from its location, and clear errors.

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use zyron_engine::{Engine, EngineOptions, Session};

mod common;

use common::{block_on, command, error, rows};

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
        assert_eq!(branch["from_version"], 4);
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
