//! Heap tables from SQL: durability across restarts, transactions and
//! savepoints, isolation between sessions, constraints, DDL, and the guard
//! on DML statements whose WHERE clause DataFusion cannot pass down.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::common::ScalarValue;
use futures::TryStreamExt;
use zyron_common::SqlState;
use zyron_engine::{Engine, EngineOptions, Session, StatementResult};

mod common;

use common::{block_on, command as run, error, rows};

fn engine_at(dir: &std::path::Path) -> Arc<Engine> {
    Engine::new(EngineOptions {
        data_dir: Some(dir.to_path_buf()),
        ..EngineOptions::default()
    })
    .unwrap()
}

/// An engine whose scans split over two partitions, whatever the machine's cores.
fn engine_with_two_partitions(dir: &std::path::Path) -> Arc<Engine> {
    Engine::new(EngineOptions {
        data_dir: Some(dir.to_path_buf()),
        target_partitions: 2,
        ..EngineOptions::default()
    })
    .unwrap()
}

/// Rows as `a|b|c` strings, in the order returned.
async fn query(session: &mut Session, sql: &str) -> Vec<String> {
    as_strings(&rows(session, sql).await)
}

/// Rows as `a|b|c` strings, in the order returned.
fn as_strings(batches: &[RecordBatch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            (0..b.num_rows()).map(move |r| {
                (0..b.num_columns())
                    .map(|c| array_value_to_string(b.column(c), r).unwrap())
                    .collect::<Vec<_>>()
                    .join("|")
            })
        })
        .collect()
}

/// The rows of a prepared query run with BIGINT parameters `params`.
async fn query_prepared(
    session: &mut Session,
    prepared: &zyron_engine::PreparedStatement,
    params: &[i64],
) -> zyron_common::Result<Vec<String>> {
    let values = params
        .iter()
        .map(|p| ScalarValue::Int64(Some(*p)))
        .collect();
    let stream = start_prepared(session, prepared, values).await?;
    Ok(as_strings(&stream.try_collect::<Vec<_>>().await.unwrap()))
}

/// The result stream of a prepared query run with `values`, not read yet.
async fn start_prepared(
    session: &mut Session,
    prepared: &zyron_engine::PreparedStatement,
    values: Vec<ScalarValue>,
) -> zyron_common::Result<datafusion::execution::SendableRecordBatchStream> {
    let params =
        datafusion::common::ParamValues::List(values.into_iter().map(Into::into).collect());
    match session.execute_prepared(prepared, Some(params)).await? {
        StatementResult::Rows { stream, .. } => Ok(stream),
        other => panic!("{} returned {other:?}", prepared.sql()),
    }
}

/// The command tag of a prepared statement run with `params`.
async fn run_prepared(
    session: &mut Session,
    sql: &str,
    params: Vec<datafusion::common::ScalarValue>,
) -> String {
    let prepared = session.prepare(sql).await.unwrap();
    let params =
        datafusion::common::ParamValues::List(params.into_iter().map(Into::into).collect());
    match session
        .execute_prepared(&prepared, Some(params))
        .await
        .unwrap()
    {
        StatementResult::Command(tag) => tag.to_string(),
        other => panic!("{sql} returned {other:?}"),
    }
}

/// What `sql` returns once the engine on `dir` is reopened: the caller drops
/// its own engine first, so this reads what recovery brought back.
async fn query_after_restart(dir: &std::path::Path, sql: &str) -> Vec<String> {
    let engine = engine_at(dir);
    let mut s = engine.new_session();
    query(&mut s, sql).await
}

#[test]
fn committed_changes_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE accounts (id INT PRIMARY KEY, owner TEXT NOT NULL, balance BIGINT DEFAULT 100)").await;
        run(
            &mut s,
            "INSERT INTO accounts (id, owner) VALUES (1, 'ann'), (2, 'bob'), (3, 'cy')",
        )
        .await;
        assert_eq!(
            run(
                &mut s,
                "UPDATE accounts SET balance = balance + 5 WHERE id = 2"
            )
            .await,
            "UPDATE 1"
        );
        assert_eq!(
            run(&mut s, "DELETE FROM accounts WHERE owner = 'cy'").await,
            "DELETE 1"
        );
        run(&mut s, "BEGIN").await;
        run(&mut s, "INSERT INTO accounts VALUES (9, 'never', 0)").await;
        // The session ends with the block open: nothing of it may survive.
    });
    block_on(async {
        let engine = engine_at(dir.path());
        assert!(engine.recovery().replayed_commits >= 4);
        let mut s = engine.new_session();
        assert_eq!(
            query(
                &mut s,
                "SELECT id, owner, balance FROM accounts ORDER BY id"
            )
            .await,
            vec!["1|ann|100", "2|bob|105"]
        );
        let err = error(&mut s, "INSERT INTO accounts VALUES (1, 'dup', 0)").await;
        assert_eq!(
            err.sqlstate(),
            SqlState::UNIQUE_VIOLATION,
            "the primary key survived too: {err}"
        );
    });
}

#[test]
fn rollback_and_savepoints_undo_exactly_their_part() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE t (n INT)").await;
        run(&mut s, "BEGIN").await;
        run(&mut s, "INSERT INTO t VALUES (1)").await;
        run(&mut s, "SAVEPOINT a").await;
        run(&mut s, "INSERT INTO t VALUES (2)").await;
        let err = error(&mut s, "INSERT INTO t VALUES (1 / 0)").await;
        assert_eq!(err.sqlstate(), SqlState::DIVISION_BY_ZERO);
        assert_eq!(
            error(&mut s, "SELECT 1").await.sqlstate(),
            SqlState::IN_FAILED_SQL_TRANSACTION
        );
        assert_eq!(run(&mut s, "ROLLBACK TO SAVEPOINT a").await, "ROLLBACK");
        run(&mut s, "INSERT INTO t VALUES (3)").await;
        assert_eq!(
            query(&mut s, "SELECT n FROM t ORDER BY n").await,
            vec!["1", "3"]
        );
        run(&mut s, "COMMIT").await;
        run(&mut s, "BEGIN").await;
        run(&mut s, "DELETE FROM t").await;
        run(&mut s, "ROLLBACK").await;
        assert_eq!(
            query(&mut s, "SELECT n FROM t ORDER BY n").await,
            vec!["1", "3"]
        );
        assert_eq!(
            error(&mut s, "SAVEPOINT x").await.sqlstate(),
            SqlState::NO_ACTIVE_SQL_TRANSACTION
        );
        run(&mut s, "BEGIN").await;
        assert_eq!(
            error(&mut s, "ROLLBACK TO SAVEPOINT nope")
                .await
                .sqlstate()
                .code(),
            "3B001"
        );
        run(&mut s, "ROLLBACK").await;
    });
}

async fn contents(s: &mut Session) -> Vec<String> {
    query(s, "SELECT n FROM t ORDER BY n").await
}

/// A query of several statements is one transaction, as in PostgreSQL: a failing statement
/// takes back those before it; COMMIT and ROLLBACK end it early, BEGIN makes it explicit.
#[test]
fn a_multi_statement_query_is_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE t (n INT PRIMARY KEY)").await;

        let err = error(&mut s, "INSERT INTO t VALUES (1); INSERT INTO t VALUES (1)").await;
        assert_eq!(err.sqlstate(), SqlState::UNIQUE_VIOLATION);
        assert!(
            contents(&mut s).await.is_empty(),
            "the first insert went back"
        );
        assert!(!s.in_transaction_block());

        let err = error(
            &mut s,
            "INSERT INTO t VALUES (2); SELECT 1 / 0; INSERT INTO t VALUES (3)",
        )
        .await;
        assert_eq!(err.sqlstate(), SqlState::DIVISION_BY_ZERO);
        assert!(contents(&mut s).await.is_empty());

        // The last statement reads the block's own writes; the block commits after it.
        assert_eq!(
            query(
                &mut s,
                "INSERT INTO t VALUES (4), (5); SELECT count(*) FROM t"
            )
            .await,
            vec!["2"]
        );
        let err = error(
            &mut s,
            "INSERT INTO t VALUES (6); SELECT n / (n - 4) FROM t",
        )
        .await;
        assert_eq!(err.sqlstate(), SqlState::DIVISION_BY_ZERO, "{err}");
        assert_eq!(
            contents(&mut s).await,
            vec!["4", "5"],
            "6 went back with the failing read"
        );

        let err = error(
            &mut s,
            "INSERT INTO t VALUES (7); COMMIT; INSERT INTO t VALUES (8); SELECT 1 / 0",
        )
        .await;
        assert_eq!(err.sqlstate(), SqlState::DIVISION_BY_ZERO);
        assert_eq!(
            contents(&mut s).await,
            vec!["4", "5", "7"],
            "COMMIT kept 7, not 8"
        );

        run(
            &mut s,
            "INSERT INTO t VALUES (9); ROLLBACK; INSERT INTO t VALUES (10)",
        )
        .await;
        assert_eq!(contents(&mut s).await, vec!["4", "5", "7", "10"]);

        run(
            &mut s,
            "INSERT INTO t VALUES (11); BEGIN; INSERT INTO t VALUES (12)",
        )
        .await;
        assert!(s.in_transaction_block(), "BEGIN made the block explicit");
        run(&mut s, "ROLLBACK").await;
        assert!(
            !contents(&mut s).await.contains(&"11".to_string()),
            "11 was in the block"
        );

        let err = error(&mut s, "INSERT INTO t VALUES (13); SAVEPOINT a").await;
        assert_eq!(err.sqlstate(), SqlState::NO_ACTIVE_SQL_TRANSACTION);
        let sql = "INSERT INTO t VALUES (13); BEGIN ISOLATION LEVEL REPEATABLE READ";
        assert_eq!(
            error(&mut s, sql).await.sqlstate(),
            SqlState::ACTIVE_SQL_TRANSACTION
        );
        assert!(!contents(&mut s).await.contains(&"13".to_string()));
        assert!(!s.in_transaction_block());

        // A query cancelled while it waits (its future dropped) leaves nothing to commit
        // with the next one.
        let mut holder = engine.new_session();
        run(&mut holder, "BEGIN").await;
        run(&mut holder, "DELETE FROM t WHERE n = 5").await;
        {
            let cancelled = s.execute_sql("INSERT INTO t VALUES (16); DELETE FROM t WHERE n = 5");
            tokio::pin!(cancelled);
            while engine.store().txns().waiting_count() == 0 {
                tokio::select! {
                    _ = &mut cancelled => panic!("the DELETE should wait for the holder"),
                    _ = tokio::task::yield_now() => {}
                }
            }
        }
        run(&mut holder, "ROLLBACK").await;
        assert_eq!(
            contents(&mut s).await,
            vec!["4", "5", "7", "10"],
            "16 went back"
        );
        assert!(!s.in_transaction_block());
    });
}

#[test]
fn a_view_reads_as_the_session_querying_it_sees_the_table_now() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let (mut a, mut b) = (engine.new_session(), engine.new_session());
        run(&mut a, "CREATE TABLE vt (x INT)").await;
        run(&mut a, "INSERT INTO vt VALUES (1)").await;
        run(&mut a, "CREATE VIEW vv AS SELECT x FROM vt").await;
        run(&mut a, "BEGIN").await;
        run(&mut a, "INSERT INTO vt VALUES (666)").await;
        assert_eq!(query(&mut a, "SELECT count(*) FROM vv").await, ["2"]);
        assert_eq!(
            query(&mut b, "SELECT count(*), max(x) FROM vv").await,
            ["1|1"],
            "another session's uncommitted row is invisible through the view too"
        );
        run(&mut a, "ROLLBACK").await;

        run(&mut b, "BEGIN").await;
        run(&mut b, "TRUNCATE vt").await;
        run(&mut b, "INSERT INTO vt VALUES (2)").await;
        assert_eq!(
            query(&mut b, "SELECT count(*), max(x) FROM vv").await,
            ["1|2"]
        );
        assert_eq!(
            query(&mut a, "SELECT count(*), max(x) FROM vv").await,
            ["1|1"]
        );
        run(&mut b, "COMMIT").await;
        assert_eq!(
            query(&mut a, "SELECT count(*), max(x) FROM vv").await,
            ["1|2"]
        );

        run(&mut a, "ALTER TABLE vt ADD PRIMARY KEY (x)").await;
        run(&mut a, "INSERT INTO vt VALUES (3)").await;
        assert_eq!(
            query(&mut b, "SELECT count(*), max(x) FROM vv").await,
            ["2|3"]
        );

        // A view is not transactional: one made on a table whose creation
        // rolls back outlives it, and finds no table.
        run(&mut a, "BEGIN").await;
        run(&mut a, "CREATE TABLE gone (x INT)").await;
        run(&mut a, "CREATE VIEW on_gone AS SELECT x FROM gone").await;
        run(&mut a, "ROLLBACK").await;
        assert_eq!(
            error(&mut b, "SELECT * FROM on_gone").await.sqlstate(),
            SqlState::UNDEFINED_TABLE
        );
        run(&mut a, "CREATE TABLE gone (y TEXT)").await;
        assert_eq!(
            error(&mut b, "SELECT * FROM on_gone").await.sqlstate(),
            SqlState::FEATURE_NOT_SUPPORTED
        );
    });
}

/// Views survive a restart, each created again after what it reads; a table
/// or view that a view reads cannot be dropped or replaced without CASCADE
/// (2BP01), and DROP names the kind it drops (42809), as in PostgreSQL.
#[test]
fn views_survive_a_restart_and_guard_what_they_read() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE zt (k INT PRIMARY KEY, v INT)").await;
        run(&mut s, "INSERT INTO zt VALUES (1, 10), (2, 20), (3, 30)").await;
        // Sorted by name, each view comes before what it reads.
        run(
            &mut s,
            "CREATE VIEW y_big AS SELECT k, v FROM zt WHERE v > 10",
        )
        .await;
        run(
            &mut s,
            "CREATE VIEW a_sum AS SELECT sum(v) AS total FROM y_big",
        )
        .await;
        run(&mut s, "CREATE VIEW dropped_later AS SELECT k FROM zt").await;
        assert_eq!(run(&mut s, "DROP VIEW dropped_later").await, "DROP VIEW");

        let refused = error(&mut s, "DROP TABLE zt").await;
        assert_eq!(refused.sqlstate(), SqlState::DEPENDENT_OBJECTS_STILL_EXIST);
        assert!(
            refused.hint().unwrap().contains("a_sum, y_big"),
            "{refused:?}"
        );
        assert_eq!(
            error(&mut s, "DROP VIEW y_big").await.sqlstate(),
            SqlState::DEPENDENT_OBJECTS_STILL_EXIST
        );
        assert_eq!(
            error(
                &mut s,
                "CREATE OR REPLACE VIEW y_big AS SELECT k, v FROM zt"
            )
            .await
            .sqlstate(),
            SqlState::DEPENDENT_OBJECTS_STILL_EXIST
        );
        assert_eq!(
            error(&mut s, "DROP TABLE a_sum").await.sqlstate(),
            SqlState::WRONG_OBJECT_TYPE
        );
        assert_eq!(
            error(&mut s, "DROP VIEW zt").await.sqlstate(),
            SqlState::WRONG_OBJECT_TYPE
        );
        assert_eq!(
            error(&mut s, "DROP VIEW never").await.sqlstate(),
            SqlState::UNDEFINED_TABLE
        );
        run(&mut s, "DROP VIEW IF EXISTS never").await;
        drop(s);
        drop(engine);

        let engine = engine_at(dir.path());
        assert_eq!(engine.reopen_external_tables_and_views().await, 2);
        let mut s = engine.new_session();
        assert_eq!(query(&mut s, "SELECT total FROM a_sum").await, ["50"]);
        run(&mut s, "INSERT INTO zt VALUES (4, 40)").await;
        assert_eq!(query(&mut s, "SELECT total FROM a_sum").await, ["90"]);
        assert_eq!(
            error(&mut s, "SELECT * FROM dropped_later")
                .await
                .sqlstate(),
            SqlState::UNDEFINED_TABLE
        );
        // Dropping both the table and every view that reads it needs no CASCADE.
        run(&mut s, "CREATE VIEW y_all AS SELECT k FROM zt").await;
        // All or nothing: the missing name leaves the other one in place.
        assert_eq!(
            error(&mut s, "DROP VIEW y_big, a_sum, never")
                .await
                .sqlstate(),
            SqlState::UNDEFINED_TABLE
        );
        assert_eq!(query(&mut s, "SELECT total FROM A_Sum").await, ["90"]);
        assert_eq!(run(&mut s, "DROP VIEW A_Sum, y_big").await, "DROP VIEW");
        run(
            &mut s,
            "CREATE VIEW a_sum AS SELECT sum(v) AS total FROM zt",
        )
        .await;
        assert_eq!(run(&mut s, "DROP TABLE zt CASCADE").await, "DROP TABLE");
        for gone in ["zt", "a_sum", "y_all"] {
            assert_eq!(
                error(&mut s, &format!("SELECT * FROM {gone}"))
                    .await
                    .sqlstate(),
                SqlState::UNDEFINED_TABLE
            );
        }
        // A view left reading nothing (made on a table whose creation rolled
        // back) does not open at the next start, and is still a view to DROP.
        run(&mut s, "BEGIN").await;
        run(&mut s, "CREATE TABLE rolled_back (x INT)").await;
        run(&mut s, "CREATE VIEW dangling AS SELECT x FROM rolled_back").await;
        run(&mut s, "ROLLBACK").await;
        drop(s);
        drop(engine);

        let engine = engine_at(dir.path());
        assert_eq!(engine.reopen_external_tables_and_views().await, 0);
        let mut s = engine.new_session();
        assert_eq!(
            error(&mut s, "DROP TABLE dangling").await.sqlstate(),
            SqlState::WRONG_OBJECT_TYPE
        );
        assert_eq!(run(&mut s, "DROP VIEW dangling").await, "DROP VIEW");
        let listed = std::fs::read_to_string(dir.path().join("external_tables.json")).unwrap();
        assert!(!listed.contains("dangling"), "{listed}");
    });
}

/// A view does not keep a truncated table's rows in memory: its plan holds
/// the table's provider, which does not hold the table.
#[test]
fn a_view_does_not_keep_a_truncated_tables_memory() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE big (k INT PRIMARY KEY, pad TEXT)").await;
        run(
            &mut s,
            "INSERT INTO big SELECT value, repeat('x', 200) FROM generate_series(1, 20000)",
        )
        .await;
        run(&mut s, "CREATE VIEW big_keys AS SELECT k FROM big").await;
        assert_eq!(
            query(&mut s, "SELECT count(*) FROM big_keys").await,
            ["20000"]
        );
        let loaded = engine.store().memory().used_bytes();
        assert!(loaded > 4 << 20, "the rows take memory: {loaded}");
        drop(s);

        let mut other = engine.new_session();
        run(&mut other, "TRUNCATE big").await;
        let after = engine.store().memory().used_bytes();
        assert!(after < loaded / 20, "{after} bytes still held of {loaded}");
        assert_eq!(
            query(&mut other, "SELECT count(*) FROM big_keys").await,
            ["0"]
        );
    });
}

#[test]
fn sessions_are_isolated_and_conflicts_are_40001() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let (mut a, mut b) = (engine.new_session(), engine.new_session());
        run(&mut a, "CREATE TABLE kv (k INT PRIMARY KEY, v INT)").await;
        run(&mut a, "INSERT INTO kv VALUES (1, 10), (2, 20)").await;
        run(&mut a, "BEGIN").await;
        run(&mut a, "UPDATE kv SET v = 11 WHERE k = 1").await;
        assert_eq!(
            query(&mut b, "SELECT v FROM kv WHERE k = 1").await,
            vec!["10"],
            "uncommitted is invisible"
        );
        run(&mut b, "BEGIN ISOLATION LEVEL REPEATABLE READ").await;
        assert_eq!(
            query(&mut b, "SELECT v FROM kv WHERE k = 1").await,
            vec!["10"]
        );
        run(&mut a, "COMMIT").await;
        assert_eq!(
            query(&mut b, "SELECT v FROM kv WHERE k = 1").await,
            vec!["10"],
            "REPEATABLE READ keeps its snapshot"
        );
        let err = error(&mut b, "UPDATE kv SET v = 12 WHERE k = 1").await;
        assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE);
        run(&mut b, "ROLLBACK").await;
        assert_eq!(
            query(&mut b, "SELECT v FROM kv WHERE k = 1").await,
            vec!["11"]
        );
    });
}

#[test]
fn a_blocked_writer_waits_then_applies_to_the_newest_row() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut a = engine.new_session();
        run(&mut a, "CREATE TABLE c (id INT PRIMARY KEY, n INT)").await;
        run(&mut a, "INSERT INTO c VALUES (1, 0)").await;
        run(&mut a, "BEGIN").await;
        run(&mut a, "UPDATE c SET n = n + 1 WHERE id = 1").await;
        let mut b = engine.new_session();
        let writer = tokio::spawn(async move {
            let tag = run(&mut b, "UPDATE c SET n = n + 10 WHERE id = 1").await;
            (b, tag)
        });
        while engine.store().txns().waiting_count() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(
            !writer.is_finished(),
            "the second UPDATE waits for the first transaction"
        );
        run(&mut a, "COMMIT").await;
        let (_, tag) = writer.await.unwrap();
        assert_eq!(tag, "UPDATE 1");
        assert_eq!(
            query(&mut a, "SELECT n FROM c").await,
            vec!["11"],
            "READ COMMITTED re-reads the newest version"
        );
    });
}

#[test]
fn constraints_and_ddl_behave_like_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE items (id INT NOT NULL, qty INT CHECK (qty >= 0), note TEXT) WITH (fillfactor = 90)").await;
        let err = error(&mut s, "INSERT INTO items VALUES (NULL, 1, 'x')").await;
        assert_eq!(err.sqlstate(), SqlState::NOT_NULL_VIOLATION, "{err}");
        assert!(err.message().contains("\"id\""), "{err}");
        let err = error(&mut s, "INSERT INTO items VALUES (1, -1, 'x')").await;
        assert_eq!(err.sqlstate().code(), "23514");
        assert!(err.message().contains("items_qty_check"), "{err}");
        run(
            &mut s,
            "INSERT INTO items VALUES (1, 1, 'a'), (1, 2, 'b'), (2, 3, 'c')",
        )
        .await;
        assert_eq!(
            error(&mut s, "UPDATE items SET qty = -5 WHERE id = 2")
                .await
                .sqlstate()
                .code(),
            "23514"
        );
        assert_eq!(
            error(&mut s, "ALTER TABLE items ADD PRIMARY KEY (id)")
                .await
                .sqlstate(),
            SqlState::UNIQUE_VIOLATION
        );
        run(&mut s, "DELETE FROM items WHERE note = 'b'").await;
        assert_eq!(
            run(&mut s, "ALTER TABLE items ADD PRIMARY KEY (id)").await,
            "ALTER TABLE"
        );
        assert_eq!(
            error(&mut s, "INSERT INTO items VALUES (2, 0, 'dup')")
                .await
                .sqlstate(),
            SqlState::UNIQUE_VIOLATION
        );
        let plan = query(&mut s, "EXPLAIN SELECT note FROM items WHERE id = 2")
            .await
            .join("\n");
        assert!(plan.contains("index lookup"), "{plan}");
        assert_eq!(
            query(&mut s, "SELECT note FROM items WHERE id = 2").await,
            vec!["c"]
        );
        assert_eq!(run(&mut s, "TRUNCATE items").await, "TRUNCATE TABLE");
        assert!(query(&mut s, "SELECT * FROM items").await.is_empty());
        assert_eq!(
            error(&mut s, "CREATE TABLE bad (x INT) WITH (fillfactor = 5)")
                .await
                .sqlstate()
                .code(),
            "22023"
        );
        run(&mut s, "CREATE TABLE a (x INT); CREATE TABLE b (x INT)").await;
        assert_eq!(
            run(&mut s, "DROP TABLE IF EXISTS a, b, never_existed").await,
            "DROP TABLE"
        );
        assert_eq!(
            error(&mut s, "SELECT * FROM a").await.sqlstate(),
            SqlState::UNDEFINED_TABLE
        );
        // DDL is transactional.
        run(&mut s, "BEGIN").await;
        run(&mut s, "CREATE TABLE temp_work (x INT)").await;
        run(&mut s, "INSERT INTO temp_work VALUES (1)").await;
        run(&mut s, "ROLLBACK").await;
        assert_eq!(
            error(&mut s, "SELECT * FROM temp_work").await.sqlstate(),
            SqlState::UNDEFINED_TABLE
        );
    });
}

#[test]
fn dml_never_loses_its_where_clause() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE t (n INT); CREATE TABLE other (n INT)").await;
        run(
            &mut s,
            "INSERT INTO t VALUES (1), (2), (3); INSERT INTO other VALUES (2)",
        )
        .await;
        assert_eq!(run(&mut s, "DELETE FROM t WHERE 1 = 0").await, "DELETE 0");
        assert_eq!(
            run(&mut s, "UPDATE t SET n = 0 WHERE false").await,
            "UPDATE 0"
        );
        let err = error(&mut s, "DELETE FROM t WHERE n IN (SELECT n FROM other)").await;
        assert_eq!(err.sqlstate(), SqlState::FEATURE_NOT_SUPPORTED);
        assert_eq!(query(&mut s, "SELECT count(*) FROM t").await, vec!["3"]);
        assert_eq!(
            run(&mut s, "CREATE TABLE copy AS SELECT n * 2 AS m FROM t").await,
            "SELECT 3"
        );
        assert_eq!(query(&mut s, "SELECT sum(m) FROM copy").await, vec!["12"]);
    });
}

#[test]
fn the_heap_memory_budget_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = Engine::new(EngineOptions {
            data_dir: Some(dir.path().to_path_buf()),
            heap_memory_budget_bytes: 1 << 20,
            ..EngineOptions::default()
        })
        .unwrap();
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE big (s TEXT)").await;
        let err = error(
            &mut s,
            "INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 5000)",
        )
        .await;
        assert_eq!(err.sqlstate(), SqlState::OUT_OF_MEMORY, "{err}");
        assert!(
            query(&mut s, "SELECT * FROM big").await.is_empty(),
            "the failed statement left nothing"
        );
        run(&mut s, "INSERT INTO big VALUES ('small')").await;
    });
}

/// Point statements (primary-key SELECT, UPDATE, DELETE, INSERT ... VALUES)
/// skip DataFusion's planner; what they answer and write must not change.
/// Each is checked against the same question asked in a shape the point
/// path does not take (ORDER BY, a function call), which DataFusion plans.
#[test]
fn point_statements_answer_as_the_planner_does() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(
            &mut s,
            "CREATE TABLE acct (k INT PRIMARY KEY, v INT NOT NULL, note TEXT, at TIMESTAMP, \
             CHECK (v < 1000))",
        )
        .await;
        assert_eq!(
            run(
                &mut s,
                "INSERT INTO acct VALUES (1, 10, 'a', CURRENT_TIMESTAMP)"
            )
            .await,
            "INSERT 0 1"
        );
        assert_eq!(
            run(
                &mut s,
                "INSERT INTO acct (v, k) VALUES (20, 2), (-(30), 1 + 2)"
            )
            .await,
            "INSERT 0 2"
        );
        let code = |e: zyron_common::ZyronError| e.sqlstate().code().to_owned();
        assert_eq!(
            code(error(&mut s, "INSERT INTO acct VALUES (1, 1, 'dup', NULL)").await),
            "23505"
        );
        assert_eq!(
            code(error(&mut s, "INSERT INTO acct (k) VALUES (9)").await),
            "23502"
        );
        assert_eq!(
            code(error(&mut s, "INSERT INTO acct (k, v) VALUES (9, 5000)").await),
            "23514"
        );
        // An INTEGER column given a value it cannot hold is an error, never NULL.
        error(&mut s, "INSERT INTO acct (k, v) VALUES (3000000000, 1)").await;

        let everything = "SELECT k, v, note, at IS NOT NULL FROM acct ORDER BY k";
        assert_eq!(
            query(&mut s, everything).await,
            ["1|10|a|true", "2|20||false", "3|-30||false"]
        );
        assert_eq!(
            query(&mut s, "SELECT v, note FROM acct WHERE k = 1").await,
            ["10|a"]
        );
        assert_eq!(
            query(
                &mut s,
                "SELECT acct.v AS value, * FROM public.acct WHERE acct.k = 2"
            )
            .await[0]
                .split('|')
                .take(3)
                .collect::<Vec<_>>(),
            ["20", "2", "20"]
        );
        assert!(
            query(&mut s, "SELECT * FROM acct WHERE k = 99")
                .await
                .is_empty()
        );
        assert!(
            query(&mut s, "SELECT * FROM acct WHERE k = 1 AND v = 11")
                .await
                .is_empty()
        );

        assert_eq!(
            run(&mut s, "UPDATE acct SET v = v + 5 WHERE k = 2").await,
            "UPDATE 1"
        );
        assert_eq!(
            run(&mut s, "UPDATE acct AS x SET v = x.v * 2 WHERE x.k = 3").await,
            "UPDATE 1"
        );
        assert_eq!(
            run(&mut s, "UPDATE acct SET v = 0 WHERE k = 42").await,
            "UPDATE 0"
        );
        assert_eq!(
            code(error(&mut s, "UPDATE acct SET v = v + 2000 WHERE k = 2").await),
            "23514"
        );
        assert_eq!(
            code(error(&mut s, "UPDATE acct SET v = NULL WHERE k = 2").await),
            "23502"
        );
        assert_eq!(
            code(error(&mut s, "UPDATE acct SET nope = 1 WHERE k = 2").await),
            "42703"
        );
        assert_eq!(
            query(&mut s, "SELECT k, v FROM acct WHERE abs(k) > 1 ORDER BY k").await,
            ["2|25", "3|-60"]
        );

        // Inside a block, the point path writes through the block's transaction.
        run(&mut s, "BEGIN").await;
        run(&mut s, "UPDATE acct SET v = 999 WHERE k = 1").await;
        assert_eq!(
            query(&mut s, "SELECT v FROM acct WHERE k = 1").await,
            ["999"]
        );
        run(&mut s, "ROLLBACK").await;
        assert_eq!(
            query(&mut s, "SELECT v FROM acct WHERE k = 1").await,
            ["10"]
        );

        // Prepared, with parameters, as pgbench -M prepared runs it.
        let int = |v| datafusion::common::ScalarValue::Int32(Some(v));
        assert_eq!(
            run_prepared(
                &mut s,
                "UPDATE acct SET v = v + $1 WHERE k = $2",
                vec![int(7), int(1)]
            )
            .await,
            "UPDATE 1"
        );
        let select = s.prepare("SELECT v FROM acct WHERE k = $1").await.unwrap();
        let params = datafusion::common::ParamValues::List(vec![
            datafusion::common::ScalarValue::Int32(Some(1)).into(),
        ]);
        let StatementResult::Rows { schema, stream } =
            s.execute_prepared(&select, Some(params)).await.unwrap()
        else {
            panic!("SELECT returned no rows")
        };
        assert_eq!(schema.as_ref(), select.result_schema().as_ref());
        let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
        assert_eq!(
            array_value_to_string(batches[0].column(0), 0).unwrap(),
            "17"
        );

        assert_eq!(
            run(&mut s, "DELETE FROM acct WHERE k = 3").await,
            "DELETE 1"
        );
        assert_eq!(
            query(&mut s, "SELECT k, v FROM acct ORDER BY k").await,
            ["1|17", "2|25"]
        );
        drop(s);
        drop(engine);
        // What the point path wrote is durable like anything else.
        assert_eq!(
            query_after_restart(dir.path(), "SELECT k, v FROM acct ORDER BY k").await,
            ["1|17", "2|25"]
        );
    });
}

/// `UPDATE t SET c = c + v WHERE key = k` changes the row's bytes in place
/// (`heap/point/row_update.rs`). Each statement runs on two twin tables, one
/// with an always-true CHECK that keeps it on the general path, and both must
/// end with the same rows; overflow is PostgreSQL's 22003 on the byte path.
#[test]
fn row_level_updates_answer_as_the_general_path_does() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        let columns = "id INT, part BIGINT, small SMALLINT, n INT, big BIGINT, note TEXT, \
                       PRIMARY KEY (id, part)";
        run(&mut s, &format!("CREATE TABLE fast ({columns})")).await;
        run(
            &mut s,
            &format!("CREATE TABLE slow ({columns}, CHECK (id > -1000))"),
        )
        .await;
        let rows = "(1, 10, 1, 100, 1000, 'one'), (2, 20, NULL, NULL, NULL, 'two'), \
                    (3, 30, -5, -50, -500, NULL)";
        for table in ["fast", "slow"] {
            run(&mut s, &format!("INSERT INTO {table} VALUES {rows}")).await;
        }
        let updates = [
            (
                "UPDATE {t} SET n = n + 5, big = big - -7, small = 9 WHERE id = 1 AND part = 10",
                1,
            ),
            ("UPDATE {t} SET n = (3 + n) WHERE (part = 20) AND 2 = id", 1),
            (
                "UPDATE {t} SET n = 42, small = -(3), big = 0 WHERE id = 2 AND part = 20",
                1,
            ),
            ("UPDATE {t} SET big = big - 1 WHERE id = 3 AND part = 30", 1),
            ("UPDATE {t} SET n = n + 1 WHERE id = 3 AND part = 31", 0),
            (
                "UPDATE {t} SET n = n + 1 WHERE id = 4000000000 AND part = 30",
                0,
            ),
        ];
        for (update, count) in updates {
            for table in ["fast", "slow"] {
                let sql = update.replace("{t}", table);
                assert_eq!(run(&mut s, &sql).await, format!("UPDATE {count}"), "{sql}");
            }
        }
        let all = |t: &str| format!("SELECT * FROM {t} ORDER BY id");
        let fast = query(&mut s, &all("fast")).await;
        assert_eq!(fast, query(&mut s, &all("slow")).await);
        assert_eq!(
            fast,
            [
                "1|10|9|105|1007|one",
                "2|20|-3|42|0|two",
                "3|30|-5|-50|-501|"
            ]
        );

        for (sql, message) in [
            (
                "UPDATE fast SET n = n + 2147483600 WHERE id = 1 AND part = 10",
                "integer out of range",
            ),
            (
                "UPDATE fast SET small = 40000 WHERE id = 1 AND part = 10",
                "smallint out of range",
            ),
            (
                "UPDATE fast SET big = big + 9223372036854775807 WHERE id = 1 AND part = 10",
                "bigint out of range",
            ),
        ] {
            let e = error(&mut s, sql).await;
            assert_eq!(e.sqlstate(), SqlState::NUMERIC_VALUE_OUT_OF_RANGE, "{sql}");
            assert_eq!(e.message(), message, "{sql}");
        }
        assert_eq!(
            query(&mut s, &all("fast")).await,
            fast,
            "a failed UPDATE changes nothing"
        );

        // Parameters, as pgbench -M prepared sends them.
        let (int, bigint) = (
            |v| datafusion::common::ScalarValue::Int32(Some(v)),
            |v| datafusion::common::ScalarValue::Int64(Some(v)),
        );
        assert_eq!(
            run_prepared(
                &mut s,
                "UPDATE fast SET n = n + $1 WHERE id = $2 AND part = $3",
                vec![int(-5), int(1), bigint(10)]
            )
            .await,
            "UPDATE 1"
        );
        assert_eq!(
            query(&mut s, "SELECT n FROM fast WHERE id = 1 AND part = 10").await,
            ["100"]
        );
        drop(s);
        drop(engine);
        // What the byte path wrote is in the WAL like any other update.
        assert_eq!(
            query_after_restart(dir.path(), "SELECT * FROM fast ORDER BY id").await,
            [
                "1|10|9|100|1007|one",
                "2|20|-3|42|0|two",
                "3|30|-5|-50|-501|"
            ]
        );
    });
}

/// A primary key added by ALTER TABLE indexes each slot by its newest
/// version, so an older snapshot may find, under a key, a version that held
/// another key: the lookup by key must still answer as the WHERE clause does.
#[test]
fn a_key_lookup_never_returns_a_version_with_another_key() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let (mut a, mut b) = (engine.new_session(), engine.new_session());
        run(&mut a, "CREATE TABLE moved (id INT NOT NULL, v INT)").await;
        run(&mut a, "INSERT INTO moved VALUES (1, 10)").await;
        run(&mut b, "BEGIN ISOLATION LEVEL REPEATABLE READ").await;
        assert_eq!(query(&mut b, "SELECT id, v FROM moved").await, ["1|10"]);
        run(&mut a, "UPDATE moved SET id = 2 WHERE id = 1").await;
        run(&mut a, "ALTER TABLE moved ADD PRIMARY KEY (id)").await;
        assert!(
            query(&mut b, "SELECT v FROM moved WHERE id = 2")
                .await
                .is_empty(),
            "b's snapshot holds id 1 only"
        );
        assert_eq!(
            run(&mut b, "UPDATE moved SET v = v + 1 WHERE id = 2").await,
            "UPDATE 0"
        );
        // The index, built after b's snapshot, holds each row's newest key only: b scans
        // instead, and finds id 1 as PostgreSQL does (its index is unused by older snapshots).
        for sql in [
            "SELECT v FROM moved WHERE id = 1",
            "SELECT v FROM moved WHERE id IN (1, 3)",
            "SELECT v FROM moved WHERE id >= 1 AND id < 2",
        ] {
            assert_eq!(query(&mut b, sql).await, ["10"], "{sql}");
        }
        // The row changed after b's snapshot: under REPEATABLE READ that is 40001.
        let err = error(&mut b, "UPDATE moved SET v = v + 1 WHERE id = 1").await;
        assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE);
        run(&mut b, "ROLLBACK").await;
        // A snapshot taken after the ALTER uses the index.
        run(&mut b, "BEGIN ISOLATION LEVEL REPEATABLE READ").await;
        assert!(
            query(&mut b, "SELECT v FROM moved WHERE id = 1")
                .await
                .is_empty()
        );
        assert_eq!(
            run(&mut b, "UPDATE moved SET v = v + 1 WHERE id = 2").await,
            "UPDATE 1"
        );
        run(&mut b, "ROLLBACK").await;
        assert_eq!(
            query(&mut b, "SELECT v FROM moved WHERE id = 2").await,
            ["10"]
        );
    });
}

/// A scan of a few keys stays in one partition with one aggregate step (its row estimate is
/// under a batch), while a full scan is still spread over the configured partitions; both
/// answer alike.
#[test]
fn a_few_keys_are_scanned_in_one_partition() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with_two_partitions(dir.path());
    let mut s = engine.new_session();
    block_on(async {
        run(&mut s, "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)").await;
        run(
            &mut s,
            "INSERT INTO t SELECT value, value * 2 FROM generate_series(1, 20000)",
        )
        .await;
        let explain = |sql: &str| format!("EXPLAIN {sql}");
        let range = "SELECT count(*), sum(v) FROM t WHERE id BETWEEN 101 AND 200";
        let plan = query(&mut s, &explain(range)).await.join("\n");
        assert!(plan.contains("index lookup of 100 keys"), "{plan}");
        assert!(plan.contains("mode=Single"), "{plan}");
        assert!(!plan.contains("RepartitionExec"), "{plan}");
        assert_eq!(query(&mut s, range).await, vec!["100|30100"]);

        let full = "SELECT count(*), sum(v) FROM t";
        let plan = query(&mut s, &explain(full)).await.join("\n");
        assert!(plan.contains("mode=Partial"), "{plan}");
        assert_eq!(query(&mut s, full).await, vec!["20000|400020000"]);
    });
}

/// A prepared query keeps its optimized plan between executions and still sees rows written
/// since; it plans again when a table it reads is replaced or the session runs a SET, and a
/// query the optimizer would freeze (`now()`) is never kept.
#[test]
fn a_prepared_query_keeps_its_plan_until_what_it_reads_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE kept (k BIGINT PRIMARY KEY, v BIGINT)").await;
        run(&mut s, "INSERT INTO kept VALUES (1, 10), (2, 20), (3, 30)").await;
        let sum = s
            .prepare("SELECT count(*), sum(v) FROM kept WHERE k BETWEEN $1 AND $1 + 1")
            .await
            .unwrap();
        assert_eq!(query_prepared(&mut s, &sum, &[1]).await.unwrap(), ["2|30"]);
        assert_eq!(query_prepared(&mut s, &sum, &[2]).await.unwrap(), ["2|50"]);
        assert_eq!(s.kept_plan_executions(), 1);

        // The plan is kept, the snapshot is not: a row inserted since is counted.
        run(&mut s, "INSERT INTO kept VALUES (4, 40)").await;
        assert_eq!(query_prepared(&mut s, &sum, &[3]).await.unwrap(), ["2|70"]);
        assert_eq!(s.kept_plan_executions(), 2);

        // Another table under the same name: planned again, and its rows answer.
        run(&mut s, "DROP TABLE kept").await;
        run(&mut s, "CREATE TABLE kept (k BIGINT PRIMARY KEY, v BIGINT)").await;
        run(&mut s, "INSERT INTO kept VALUES (3, 300), (4, 400)").await;
        assert_eq!(query_prepared(&mut s, &sum, &[3]).await.unwrap(), ["2|700"]);
        assert_eq!(s.kept_plan_executions(), 2);
        assert_eq!(query_prepared(&mut s, &sum, &[3]).await.unwrap(), ["2|700"]);
        assert_eq!(s.kept_plan_executions(), 3);

        // TRUNCATE puts an empty table in its place (twice named, truncated once):
        // planned again, and the old rows are gone.
        run(&mut s, "TRUNCATE kept, kept").await;
        run(&mut s, "INSERT INTO kept VALUES (4, 4)").await;
        assert_eq!(query_prepared(&mut s, &sum, &[3]).await.unwrap(), ["1|4"]);
        assert_eq!(s.kept_plan_executions(), 3);

        // A SET may change how the query plans: planned again.
        run(&mut s, "SET TimeZone = 'UTC'").await;
        assert_eq!(query_prepared(&mut s, &sum, &[4]).await.unwrap(), ["1|4"]);
        assert_eq!(s.kept_plan_executions(), 3);

        // The optimizer folds now() into a constant, so this plan is never kept.
        let clock = s
            .prepare("SELECT count(*) FROM kept WHERE k >= $1 AND now() > CAST('2000-01-01' AS TIMESTAMP)")
            .await
            .unwrap();
        for _ in 0..2 {
            assert_eq!(query_prepared(&mut s, &clock, &[4]).await.unwrap(), ["1"]);
        }
        assert_eq!(s.kept_plan_executions(), 3);

        // The table gone: the error a fresh plan gives, not the old table's rows.
        run(&mut s, "DROP TABLE kept").await;
        let err = query_prepared(&mut s, &sum, &[3]).await.unwrap_err();
        assert!(err.to_string().contains("kept"), "{err}");
    });
}

/// A kept physical plan runs each execution with that execution's parameters
/// and snapshot: key ranges follow the values, rows written since are read,
/// a transaction sees its own writes, NULL finds nothing, and a full scan split
/// over partitions covers pages added since it was planned. An execution while
/// another's stream is still open plans the usual way, and both answer right.
#[test]
fn a_kept_physical_plan_reads_each_executions_parameters_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with_two_partitions(dir.path());
    let mut s = engine.new_session();
    block_on(async {
        run(&mut s, "CREATE TABLE r (k BIGINT PRIMARY KEY, v BIGINT)").await;
        run(
            &mut s,
            "INSERT INTO r SELECT value, value * 2 FROM generate_series(1, 5000)",
        )
        .await;
        let range = s
            .prepare("SELECT count(*), sum(v) FROM r WHERE k BETWEEN $1 AND $2")
            .await
            .unwrap();
        // sum of 2k over [lo, hi]
        let expect = |lo: i64, hi: i64| {
            let n = (hi - lo + 1).max(0);
            let sum = if n == 0 {
                "".to_owned()
            } else {
                (n * (lo + hi)).to_string()
            };
            vec![format!("{n}|{sum}")]
        };
        for (lo, hi) in [(1, 100), (4001, 5000), (2500, 2500), (10, 9), (4990, 6000)] {
            let got = query_prepared(&mut s, &range, &[lo, hi]).await.unwrap();
            assert_eq!(got, expect(lo, hi.min(5000)), "[{lo}, {hi}]");
        }
        assert_eq!(s.kept_physical_executions(), 4);

        // Rows written since the plan was made are read.
        run(
            &mut s,
            "INSERT INTO r SELECT value, value * 2 FROM generate_series(5001, 30000)",
        )
        .await;
        assert_eq!(
            query_prepared(&mut s, &range, &[4990, 6000]).await.unwrap(),
            expect(4990, 6000)
        );
        // A transaction's own delete is seen by it, and by no one else until it commits.
        let mut other = engine.new_session();
        let other_range = other.prepare(range.sql()).await.unwrap();
        for _ in 0..2 {
            let got = query_prepared(&mut other, &other_range, &[1, 10])
                .await
                .unwrap();
            assert_eq!(got, expect(1, 10));
        }
        run(&mut s, "BEGIN").await;
        run(&mut s, "DELETE FROM r WHERE k = 5").await;
        assert_eq!(
            query_prepared(&mut s, &range, &[1, 10]).await.unwrap(),
            ["9|100"]
        );
        assert_eq!(
            query_prepared(&mut other, &other_range, &[1, 10])
                .await
                .unwrap(),
            expect(1, 10)
        );
        run(&mut s, "COMMIT").await;
        assert_eq!(
            query_prepared(&mut other, &other_range, &[1, 10])
                .await
                .unwrap(),
            ["9|100"]
        );
        run(&mut s, "INSERT INTO r VALUES (5, 10)").await;

        // NULL bounds select nothing.
        let stream = start_prepared(
            &mut s,
            &range,
            vec![ScalarValue::Int64(None), ScalarValue::Int64(Some(9))],
        )
        .await
        .unwrap();
        assert_eq!(
            as_strings(&stream.try_collect::<Vec<_>>().await.unwrap()),
            ["0|"]
        );

        // A bound computed from a parameter (the index is looked up for 11..=20).
        let computed = s
            .prepare("SELECT count(*), sum(v) FROM r WHERE k BETWEEN $1 AND $1 + 9")
            .await
            .unwrap();
        for lo in [1, 11, 29_995] {
            let got = query_prepared(&mut s, &computed, &[lo]).await.unwrap();
            assert_eq!(got, expect(lo, (lo + 9).min(30_000)), "from {lo}");
        }

        // Parameters outside the key, in the projection, over a scan of every page.
        let scaled = s
            .prepare("SELECT count(*), sum(v * $1) FROM r WHERE v > $2")
            .await
            .unwrap();
        let physical_before = s.kept_physical_executions();
        let mut rows_in_table = 30_000;
        for (factor, above) in [(1, 0), (3, 59_000), (2, 0)] {
            let got = query_prepared(&mut s, &scaled, &[factor, above])
                .await
                .unwrap();
            let rows: Vec<i64> = (1..=rows_in_table).filter(|k| k * 2 > above).collect();
            let sum: i64 = rows.iter().map(|k| k * 2 * factor).sum();
            assert_eq!(
                got,
                [format!("{}|{sum}", rows.len())],
                "x{factor} above {above}"
            );
            if factor == 3 {
                // More pages than when the plan was made.
                run(
                    &mut s,
                    "INSERT INTO r SELECT value, value * 2 FROM generate_series(30001, 60000)",
                )
                .await;
                rows_in_table = 60_000;
            }
        }
        assert_eq!(s.kept_physical_executions(), physical_before + 2);

        // A second execution while the first one's rows are unread: planned apart.
        let physical_before = s.kept_physical_executions();
        let first = start_prepared(
            &mut s,
            &range,
            vec![ScalarValue::Int64(Some(1)), ScalarValue::Int64(Some(10))],
        )
        .await
        .unwrap();
        let second = query_prepared(&mut s, &range, &[11, 20]).await.unwrap();
        assert_eq!(second, expect(11, 20));
        assert_eq!(
            as_strings(&first.try_collect::<Vec<_>>().await.unwrap()),
            expect(1, 10)
        );
        assert_eq!(s.kept_physical_executions(), physical_before + 1);
        assert_eq!(
            query_prepared(&mut s, &range, &[21, 30]).await.unwrap(),
            expect(21, 30)
        );
        assert_eq!(s.kept_physical_executions(), physical_before + 2);

        // Kept plans hold no snapshot: with no transaction open, nothing holds
        // garbage collection below the newest commit.
        run(&mut s, "UPDATE r SET v = v + 1 WHERE k = 1").await;
        let txns = engine.store().txns();
        assert_eq!(txns.gc_horizon(), txns.visible_ts());
    });
}

/// The future of a statement is moved by value at every async layer between
/// the wire and the heap, and a move copies its whole size. DataFusion's
/// planning futures made a statement's future 7.7 kB, so the session boxes
/// them: BEGIN, COMMIT and point statements, which never plan, must not pay
/// to copy them (memmove was 8% of the server's CPU on 16 clients running
/// empty transactions). The point path's and the commit's futures are boxed
/// too: at 2.2 kB, memcpy was still 13% of the instructions of a pgbench
/// transaction; at 0.85 kB, 7%.
#[test]
fn statements_that_never_plan_have_small_futures() {
    const LIMIT_BYTES: usize = 1536;
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let engine = engine_at(dir.path());
        let mut s = engine.new_session();
        run(
            &mut s,
            "CREATE TABLE small (k BIGINT PRIMARY KEY, v BIGINT)",
        )
        .await;
        let begin = s.prepare("BEGIN").await.unwrap();
        let point = s.prepare("SELECT v FROM small WHERE k = $1").await.unwrap();
        let begin_bytes = std::mem::size_of_val(&s.execute_prepared(&begin, None));
        let point_bytes = std::mem::size_of_val(&s.execute_prepared(&point, None));
        let script_bytes = std::mem::size_of_val(&s.execute_script("COMMIT"));
        eprintln!(
            "future sizes: BEGIN {begin_bytes} B, point SELECT {point_bytes} B, script {script_bytes} B"
        );
        for bytes in [begin_bytes, point_bytes, script_bytes] {
            assert!(
                bytes <= LIMIT_BYTES,
                "a statement's future is {bytes} B, over {LIMIT_BYTES}"
            );
        }
    });
}

/// The hook runs before statements DataFusion plans, whose plans may use every
/// worker thread, and not before point statements or transaction control.
#[test]
fn the_planning_hook_runs_before_planned_statements_only() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_at(dir.path());
    block_on(async {
        let mut s = engine.new_session();
        run(&mut s, "CREATE TABLE hooked (id INT PRIMARY KEY, v INT)").await;
        run(&mut s, "INSERT INTO hooked VALUES (1, 10), (2, 20)").await;
        let planned = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&planned);
        s.before_planning(Arc::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        let count = || planned.load(std::sync::atomic::Ordering::SeqCst);
        run(&mut s, "BEGIN").await;
        run(&mut s, "UPDATE hooked SET v = v + 1 WHERE id = 1").await;
        assert_eq!(
            query(&mut s, "SELECT v FROM hooked WHERE id = 1").await,
            ["11"]
        );
        run(&mut s, "COMMIT").await;
        assert_eq!(
            count(),
            0,
            "point statements and BEGIN/COMMIT are not planned"
        );
        assert_eq!(query(&mut s, "SELECT sum(v) FROM hooked").await, ["31"]);
        assert_eq!(count(), 1, "an aggregate goes to DataFusion");
    });
}
