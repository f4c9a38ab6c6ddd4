//! The PostgreSQL protocol as drivers use it: extended protocol with
//! parameters, text and binary formats for each type, SQLSTATE errors,
//! connection limits and graceful shutdown.

mod common;

use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use common::{TestServer, simple_rows, sqlstate};

const TYPES_DDL: &str = "CREATE TABLE typed (
    i2 SMALLINT, i4 INT, i8 BIGINT, f4 REAL, f8 DOUBLE PRECISION, num NUMERIC(12, 3),
    t TEXT, v VARCHAR, b BOOLEAN, d DATE, ts TIMESTAMP, tstz TIMESTAMPTZ, bin BYTEA)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_round_trips_in_binary_and_text() {
    let server = TestServer::start().await;
    let client = server.connect().await;
    client.batch_execute(TYPES_DDL).await.unwrap();

    let date = NaiveDate::from_ymd_opt(2026, 11, 29).unwrap();
    let ts: NaiveDateTime = date.and_hms_micro_opt(20, 15, 1, 123_456).unwrap();
    let tstz: DateTime<Utc> = ts.and_utc();
    // Parameters are sent in binary, typed from the server's ParameterDescription.
    let inserted = client
        .execute(
            "INSERT INTO typed (i2, i4, i8, f4, f8, t, v, b, d, ts, tstz, bin) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                &-7i16,
                &2_000_000_000i32,
                &-9_000_000_000_000i64,
                &1.5f32,
                &-2.25f64,
                &"text ü",
                &"varchar",
                &true,
                &date,
                &ts,
                &tstz,
                &vec![0u8, 1, 255],
            ],
        )
        .await
        .unwrap();
    assert_eq!(inserted, 1);
    client
        .batch_execute("INSERT INTO typed (num) VALUES (12345.678)")
        .await
        .unwrap();

    // Binary results (the extended protocol asks for binary).
    let row = client
        .query_one(
            "SELECT i2, i4, i8, f4, f8, t, v, b, d, ts, tstz, bin FROM typed WHERE i4 IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i16>(0), -7);
    assert_eq!(row.get::<_, i32>(1), 2_000_000_000);
    assert_eq!(row.get::<_, i64>(2), -9_000_000_000_000);
    assert_eq!(row.get::<_, f32>(3), 1.5);
    assert_eq!(row.get::<_, f64>(4), -2.25);
    assert_eq!(row.get::<_, String>(5), "text ü");
    assert_eq!(row.get::<_, String>(6), "varchar");
    assert!(row.get::<_, bool>(7));
    assert_eq!(row.get::<_, NaiveDate>(8), date);
    assert_eq!(row.get::<_, NaiveDateTime>(9), ts);
    assert_eq!(row.get::<_, DateTime<Utc>>(10), tstz);
    assert_eq!(row.get::<_, Vec<u8>>(11), vec![0u8, 1, 255]);

    // The wire types are PostgreSQL's.
    let types: Vec<String> = row
        .columns()
        .iter()
        .map(|c| c.type_().name().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "int2",
            "int4",
            "int8",
            "float4",
            "float8",
            "text",
            "text",
            "bool",
            "date",
            "timestamp",
            "timestamptz",
            "bytea"
        ]
    );

    // Text results (the simple protocol).
    let rows = simple_rows(
        client
            .simple_query("SELECT i2, i8, f8, b, d, bin FROM typed WHERE i4 IS NOT NULL")
            .await
            .unwrap(),
    );
    assert_eq!(
        rows,
        vec![vec![
            Some("-7".to_owned()),
            Some("-9000000000000".to_owned()),
            Some("-2.25".to_owned()),
            Some("t".to_owned()),
            Some("2026-11-29".to_owned()),
            Some("\\x0001ff".to_owned()),
        ]]
    );
    let numeric = simple_rows(
        client
            .simple_query("SELECT num FROM typed WHERE num IS NOT NULL")
            .await
            .unwrap(),
    );
    assert_eq!(numeric[0][0].as_deref(), Some("12345.678"));
    let numeric = client
        .query_one("SELECT num FROM typed WHERE num IS NOT NULL", &[])
        .await
        .unwrap();
    assert_eq!(numeric.columns()[0].type_().name(), "numeric");
    assert_eq!(
        numeric.get::<_, rust_decimal::Decimal>(0),
        "12345.678".parse::<rust_decimal::Decimal>().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_take_parameters_and_errors_keep_the_session() {
    let server = TestServer::start().await;
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE kv (k INT, v TEXT); INSERT INTO kv VALUES (1, 'one'), (2, 'two'), (3, 'three')")
        .await
        .unwrap();
    let by_key = client
        .prepare("SELECT v FROM kv WHERE k = $1")
        .await
        .unwrap();
    assert_eq!(by_key.params()[0].name(), "int4");
    for (k, expected) in [(1, "one"), (3, "three")] {
        let row = client.query_one(&by_key, &[&k]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), expected);
    }
    let range = client
        .query(
            "SELECT k FROM kv WHERE k BETWEEN $1 AND $2 ORDER BY k",
            &[&2i32, &3i32],
        )
        .await
        .unwrap();
    assert_eq!(
        range.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(),
        vec![2, 3]
    );

    for (sql, code) in [
        ("SELEC 1", "42601"),
        ("SELECT * FROM nowhere", "42P01"),
        ("SELECT nope FROM kv", "42703"),
        ("SELECT k / 0 FROM kv", "22012"),
    ] {
        let err = client.query(sql, &[]).await.expect_err(sql);
        assert_eq!(sqlstate(&err), code, "{sql}");
        let err = client.simple_query(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&err), code, "{sql} (simple)");
    }
    // Still usable after every error.
    let row = client
        .query_one("SELECT count(*) FROM kv", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 3);
}

/// The names PostgreSQL 15 gives these columns (its answer to the same query).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_columns_have_postgresql_names_even_when_repeated() {
    let server = TestServer::start().await;
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE kv (k INT, v TEXT); INSERT INTO kv VALUES (1, 'one')")
        .await
        .unwrap();
    let query = "SELECT count(*), 1, NULL, NULL, k + 1, k::int, 1::int, true, \
        CASE WHEN k > 1 THEN 1 END, max(k) AS m, upper(v), COUNT(k), (SELECT count(*) FROM kv), \
        session_user, session_user, k, kv.k, k, 'a'::text, coalesce(k, 0), -k \
        FROM kv GROUP BY k, v";
    let expected = [
        "count",
        "?column?",
        "?column?",
        "?column?",
        "?column?",
        "k",
        "int4",
        "?column?",
        "case",
        "m",
        "upper",
        "count",
        "count",
        "session_user",
        "session_user",
        "k",
        "k",
        "k",
        "text",
        "coalesce",
        "?column?",
    ];
    let prepared = client.prepare(query).await.unwrap();
    let names: Vec<&str> = prepared.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, expected, "described by the extended protocol");
    let rows = client.query(&prepared, &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    let messages = client.simple_query(query).await.unwrap();
    for message in messages {
        if let tokio_postgres::SimpleQueryMessage::RowDescription(columns) = message {
            let names: Vec<&str> = columns.iter().map(|c| c.name()).collect();
            assert_eq!(names, expected, "described by the simple protocol");
        }
    }
    // Repeated aliases, and a derived table's columns named as PostgreSQL names them.
    let rows = simple_rows(
        client
            .simple_query("SELECT DISTINCT -k AS v, v AS v FROM kv")
            .await
            .unwrap(),
    );
    assert_eq!(
        rows,
        vec![vec![Some("-1".to_owned()), Some("one".to_owned())]]
    );
    let rows = simple_rows(
        client
            .simple_query("SELECT count FROM (SELECT count(*) FROM kv) s")
            .await
            .unwrap(),
    );
    assert_eq!(rows, vec![vec![Some("1".to_owned())]]);

    // A USING join lists its merged column first, once; a column named beside
    // `*` keeps its name (it was `__alias_k`).
    client
        .batch_execute(
            "CREATE TABLE left_side (v text, k int); CREATE TABLE right_side (k int, w int)",
        )
        .await
        .unwrap();
    for (query, expected) in [
        (
            "SELECT * FROM left_side FULL JOIN right_side USING (k)",
            &["k", "v", "w"][..],
        ),
        ("SELECT *, k FROM kv", &["k", "v", "k"][..]),
        (
            "SELECT *, k FROM left_side RIGHT JOIN right_side USING (k)",
            &["k", "v", "w", "k"][..],
        ),
    ] {
        let prepared = client.prepare(query).await.unwrap();
        let names: Vec<&str> = prepared.columns().iter().map(|c| c.name()).collect();
        assert_eq!(names, expected, "{query}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_refused_with_53300() {
    let server = TestServer::start_with(|c| c.max_connections = 1, None).await;
    let first = server.connect().await;
    let err = tokio_postgres::connect(
        &common::connection_string(server.addr()),
        tokio_postgres::NoTls,
    )
    .await
    .err()
    .expect("second connection refused");
    assert_eq!(sqlstate(&err), "53300");
    assert_eq!(
        first
            .query_one("SELECT 1", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        1
    );
}

/// Settings a client gives when it connects: startup parameters (`application_name`) and
/// `options='-c name=value'` (libpq's `PGOPTIONS`, JDBC's `options`) apply to the session;
/// an unknown setting in `options` refuses the connection with 42704, and the server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_options_set_the_session_and_bad_ones_refuse_it() {
    let server = TestServer::start().await;
    let with_options = |options: &str| {
        format!(
            "{} application_name=wire_test options='{options}'",
            common::connection_string(server.addr())
        )
    };
    let (client, connection) = tokio_postgres::connect(
        &with_options("-c synchronous_commit=off --statement-timeout=5s"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connects with options");
    tokio::spawn(connection);
    for (name, expected) in [
        ("synchronous_commit", "off"),
        ("statement_timeout", "5s"),
        ("application_name", "wire_test"),
    ] {
        let rows = simple_rows(client.simple_query(&format!("SHOW {name}")).await.unwrap());
        assert_eq!(rows, vec![vec![Some(expected.to_owned())]], "{name}");
    }
    let err = tokio_postgres::connect(&with_options("-c no_such_setting=1"), tokio_postgres::NoTls)
        .await
        .err()
        .expect("an unknown setting refuses the connection");
    assert_eq!(sqlstate(&err), "42704");
    let err = tokio_postgres::connect(
        &with_options("-c TimeZone=Mars/Olympus"),
        tokio_postgres::NoTls,
    )
    .await
    .err()
    .expect("a time zone Arrow cannot use refuses the connection");
    assert_eq!(sqlstate(&err), "22023");
    let other = server.connect().await;
    let err = other
        .simple_query("SET TimeZone = 'Mars/Olympus'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
    other
        .simple_query("SET TimeZone = 'Europe/Paris'")
        .await
        .unwrap();
    let rows = simple_rows(other.simple_query("SHOW synchronous_commit").await.unwrap());
    assert_eq!(
        rows,
        vec![vec![Some("on".to_owned())]],
        "options are per session"
    );
}

/// A query slow enough to be in flight when shutdown starts, and cancellable.
const SLOW_COUNT: &str =
    "SELECT count(*) FROM generate_series(1, 20000) a, generate_series(1, 20000) b";
const ENDLESS_COUNT: &str =
    "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b";

async fn wait_for_in_flight(server: &TestServer, count: usize) {
    for _ in 0..10_000 {
        if server.server.queries_in_flight() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("query never started");
}

/// Runs a transaction on `client` until the server's threads are pinned to
/// its CPU; fails after 10,000 tries.
async fn transact_until_pinned(server: &TestServer, client: &tokio_postgres::Client) -> usize {
    for _ in 0..10_000 {
        client.batch_execute("BEGIN; COMMIT").await.unwrap();
        if let Some(cpu) = server.server.client_cpu() {
            return cpu;
        }
    }
    panic!("a lone connection's threads were never pinned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_connection_is_served_on_its_clients_cpu_until_another_opens() {
    let server = TestServer::start().await;
    let first = server.connect().await;
    transact_until_pinned(&server, &first).await;

    // Opening a second connection releases the pinning before it is served...
    let second = server.connect().await;
    assert_eq!(server.server.client_cpu(), None);
    // ...and nothing is pinned while both are open (two transactions: the
    // first one's follow-up has run by the time the second one answers).
    for client in [&first, &second, &first] {
        client.batch_execute("BEGIN; COMMIT").await.unwrap();
        client.batch_execute("BEGIN; COMMIT").await.unwrap();
        assert_eq!(server.server.client_cpu(), None);
    }

    drop(second);
    transact_until_pinned(&server, &first).await;
    drop(first);
    server.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_the_clients_cpu_can_be_turned_off() {
    let server = TestServer::start_with(|c| c.follow_client_cpu = false, None).await;
    let client = server.connect().await;
    for _ in 0..100 {
        client.batch_execute("BEGIN; COMMIT").await.unwrap();
    }
    assert_eq!(server.server.client_cpu(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_in_flight_queries_finish_and_closes_idle_sessions() {
    let server = TestServer::start_with(|c| c.shutdown_grace_ms = 120_000, None).await;
    let (_idle, idle_connection) = common::connect_watching(server.addr()).await;
    let busy = server.connect().await;
    let query = tokio::spawn(async move { busy.query_one(SLOW_COUNT, &[]).await });
    wait_for_in_flight(&server, 1).await;

    let stats = server.server.shutdown().await.unwrap();
    let row = query.await.unwrap().expect("the in-flight query finished");
    assert_eq!(row.get::<_, i64>(0), 400_000_000);
    assert_eq!(stats.queries_drained, 1);
    assert_eq!(stats.queries_cancelled, 0);
    // The idle session was told why it was closed.
    let ended = idle_connection
        .await
        .unwrap()
        .expect_err("the server closed the session");
    assert_eq!(sqlstate(&ended), "57P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_queries_that_outlive_the_grace_period() {
    let server = TestServer::start_with(|c| c.shutdown_grace_ms = 0, None).await;
    let (busy, busy_connection) = common::connect_watching(server.addr()).await;
    let query = tokio::spawn(async move { busy.query_one(ENDLESS_COUNT, &[]).await });
    wait_for_in_flight(&server, 1).await;
    let stats = server.server.shutdown().await.unwrap();
    assert_eq!(stats.queries_cancelled, 1);
    // The client waiting for rows is told why they will not come.
    let err = query.await.unwrap().expect_err("the query was cancelled");
    assert_eq!(sqlstate(&err), "57P01");
    let _ = busy_connection.await.unwrap();
}

/// `.zyr` files from a client: COPY TO writes one, read_zyr and an external table read it,
/// with filters pushed down; a damaged file answers XX001 and the session carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zyr_files_are_written_and_queried_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.zyr");
    let server = TestServer::start().await;
    let client = server.connect().await;
    let copied = client
        .execute(&format!("COPY (SELECT value AS id, concat('c', value % 10) AS customer FROM generate_series(1, 50000)) TO '{}'", path.display()), &[])
        .await
        .unwrap();
    assert_eq!(copied, 50_000);
    let rows = simple_rows(
        client
            .simple_query(&format!("SELECT count(*), min(id), max(id) FROM read_zyr('{}') WHERE customer = 'c3' AND id > 100", path.display()))
            .await
            .unwrap(),
    );
    assert_eq!(
        rows,
        vec![vec![
            Some("4990".into()),
            Some("103".into()),
            Some("49993".into())
        ]]
    );
    client
        .batch_execute(&format!(
            "CREATE EXTERNAL TABLE orders STORED AS ZYR LOCATION '{}'",
            path.display()
        ))
        .await
        .unwrap();
    let row = client
        .query_one("SELECT count(*) FROM orders WHERE id = $1", &[&77i64])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);

    let mut bytes = std::fs::read(&path).unwrap();
    bytes[40] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();
    let err = client
        .simple_query(&format!(
            "SELECT sum(id) FROM read_zyr('{}')",
            path.display()
        ))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "XX001", "{err}");
    assert!(
        client.simple_query("SELECT 1").await.is_ok(),
        "the session survives a damaged file"
    );
}

/// COPY FROM STDIN started through the extended protocol (as rust-postgres,
/// and drivers that pipeline, start it): the CopyInResponse must leave at
/// once, since the client sends no data until it arrives and the Sync it
/// pipelined is ignored during copy-in. A bad row fails the COPY with 22P02
/// and loads nothing; the connection carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_through_the_extended_protocol() {
    use futures::SinkExt;
    let server = TestServer::start().await;
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE loaded (id BIGINT PRIMARY KEY, name TEXT)")
        .await
        .unwrap();
    let copy = |data: &'static str| {
        let client = &client;
        async move {
            let sink = client.copy_in("COPY loaded FROM STDIN").await?;
            let mut sink = std::pin::pin!(sink);
            sink.send(bytes::Bytes::from_static(data.as_bytes()))
                .await?;
            sink.as_mut().finish().await
        }
    };
    let loaded = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        copy("1\tone\n2\ttwo\n3\t\\N\n"),
    )
    .await
    .expect("COPY does not stall")
    .unwrap();
    assert_eq!(loaded, 3);
    let err = copy("4\tfour\nfive\t5\n").await.unwrap_err();
    assert_eq!(sqlstate(&err), "22P02", "{err}");
    let row = client
        .query_one("SELECT count(*), count(name) FROM loaded", &[])
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (3, 2));
}

/// A lake table on S3 (SeaweedFS) over the wire: created with its S3
/// settings as options, written with INSERT, UPDATE and DELETE, read with
/// a parameter, at an old version and as a change feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lake_tables_on_s3_over_the_wire() {
    let s3 = zyron_bench::seaweedfs::SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
    let server = TestServer::start().await;
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE EXTERNAL TABLE trips (id BIGINT NOT NULL, city TEXT, km DOUBLE) \
             STORED AS LAKE LOCATION 's3://{}/wire/trips' \
             OPTIONS ('aws.endpoint' '{}', 'aws.allow_http' 'true', 'aws.region' 'us-east-1', \
                      'aws.access_key_id' 'zyron', 'aws.secret_access_key' 'zyron')",
            s3.bucket,
            s3.endpoint()
        ))
        .await
        .unwrap();
    let inserted = client
        .execute(
            "INSERT INTO trips SELECT value AS id, concat('c', value % 5) AS city, \
             CAST(value AS DOUBLE) AS km FROM generate_series(1, 5000)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(inserted, 5_000);
    let deleted = client
        .execute("DELETE FROM trips WHERE city = 'c0'", &[])
        .await
        .unwrap();
    assert_eq!(deleted, 1_000);
    let updated = client
        .execute("UPDATE trips SET km = km * 2 WHERE id <= 10", &[])
        .await
        .unwrap();
    assert_eq!(updated, 8, "ids 5 and 10 were deleted");
    let row = client
        .query_one(
            "SELECT count(*), sum(km) FROM trips WHERE id <= $1",
            &[&10i64],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 8);
    assert_eq!(
        row.get::<_, f64>(1),
        2.0 * (1 + 2 + 3 + 4 + 6 + 7 + 8 + 9) as f64
    );
    let rows = simple_rows(
        client
            .simple_query(
                "SELECT (SELECT count(*) FROM lake_version('trips', 1)) AS at_v1, \
                 (SELECT count(*) FROM lake_changes('trips', 1, 3) WHERE _change_type = 'delete') AS deletes",
            )
            .await
            .unwrap(),
    );
    assert_eq!(rows, vec![vec![Some("5000".into()), Some("1008".into())]]);
    let err = client
        .simple_query("SELECT * FROM lake_version('trips', 99)")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22023", "{err}");

    // COPY FROM STDIN: one commit for the whole copy; a bad row commits nothing.
    use futures::SinkExt;
    let copy = |data: &'static str| {
        let client = &client;
        async move {
            let sink = client.copy_in("COPY trips FROM STDIN").await?;
            let mut sink = std::pin::pin!(sink);
            sink.send(bytes::Bytes::from_static(data.as_bytes()))
                .await?;
            sink.as_mut().finish().await
        }
    };
    assert_eq!(copy("9001\tc1\t1.5\n9002\t\\N\t2.5\n").await.unwrap(), 2);
    let err = copy("9003\tc1\t1.5\nnine\tc2\t2\n").await.unwrap_err();
    assert_eq!(sqlstate(&err), "22P02", "{err}");
    let err = copy("\\N\tc1\t1.5\n").await.unwrap_err();
    assert_eq!(sqlstate(&err), "23502", "{err}");
    let rows = simple_rows(
        client
            .simple_query("SELECT count(*), CAST(sum(km) AS BIGINT) FROM trips WHERE id > 9000")
            .await
            .unwrap(),
    );
    assert_eq!(rows, vec![vec![Some("2".into()), Some("4".into())]]);
    let latest = simple_rows(
        client
            .simple_query("SELECT count(*) FROM lake_changes('trips', 3, 4)")
            .await
            .unwrap(),
    );
    assert_eq!(
        latest,
        vec![vec![Some("2".into())]],
        "the copy is version 4, one commit"
    );

    // The lake statements, through the extended protocol too: OPTIMIZE
    // answers its figures as rows, the ALTER TABLE forms with their tag.
    client
        .batch_execute("ALTER TABLE trips CREATE TAG before_optimize")
        .await
        .unwrap();
    let figures = client.query("OPTIMIZE trips", &[]).await.unwrap();
    let figure = |name: &str| {
        figures
            .iter()
            .find(|r| r.get::<_, &str>(0) == name)
            .map(|r| r.get::<_, i64>(1))
    };
    assert_eq!(figure("rows_written"), Some(4_002), "{figures:?}");
    assert_eq!(figure("deleted_rows_purged"), Some(1_008), "{figures:?}");
    let counts = simple_rows(
        client
            .simple_query(
                "SELECT (SELECT count(*) FROM trips) AS now, \
                 (SELECT count(*) FROM lake_version('trips', 'before_optimize')) AS before",
            )
            .await
            .unwrap(),
    );
    assert_eq!(counts, vec![vec![Some("4002".into()), Some("4002".into())]]);
    let err = client
        .simple_query("ALTER TABLE trips CREATE TAG before_optimize")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "42710", "{err}");
}
