//! `.zyr` files from SQL: COPY TO, read_zyr, CREATE EXTERNAL TABLE ... STORED AS ZYR, pushdown,
//! statistics, corrupt files, and lossless conversion to and from Parquet.

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use zyron_engine::{Engine, EngineOptions};

mod common;

use common::{block_on, command, error, rows};

fn single_i64(batches: &[RecordBatch]) -> i64 {
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

fn plan_text(batches: &[RecordBatch]) -> String {
    batches
        .iter()
        .map(|b| format!("{:?}", b.column(1)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A fresh engine and a session on it, and the path `t.zyr` in a new temporary directory. The
/// directory and the engine (whose data directory is temporary too) last as long as the guards.
fn session_and_zyr_path() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::sync::Arc<Engine>,
    zyron_engine::Session,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.zyr");
    let engine = Engine::new(EngineOptions::default()).unwrap();
    let session = engine.new_session();
    (dir, path, engine, session)
}

/// `CREATE EXTERNAL TABLE z STORED AS ZYR` over `path`.
async fn create_table_z(s: &mut zyron_engine::Session, path: &std::path::Path) {
    let sql = format!(
        "CREATE EXTERNAL TABLE z STORED AS ZYR LOCATION '{}'",
        path.display()
    );
    command(s, &sql).await;
}

const SOURCE: &str = "SELECT value AS id, value % 7 AS k, concat('name-', value % 100) AS name, CAST(value AS DOUBLE) / 4 AS price FROM generate_series(1, 200000)";

#[test]
fn copy_read_external_table_pushdown_and_statistics() {
    block_on(async {
        let (dir, path, _engine, mut s) = session_and_zyr_path();
        let tag = command(
            &mut s,
            &format!(
                "COPY ({SOURCE}) TO '{}' OPTIONS (bloom_filter_columns 'name')",
                path.display()
            ),
        )
        .await;
        assert_eq!(tag, "COPY 200000");
        let expected =
            single_i64(&rows(&mut s, &format!("SELECT sum(id * k) FROM ({SOURCE})")).await);
        let got = single_i64(
            &rows(
                &mut s,
                &format!("SELECT sum(id * k) FROM read_zyr('{}')", path.display()),
            )
            .await,
        );
        assert_eq!(got, expected);

        create_table_z(&mut s, &path).await;
        let filtered = rows(
            &mut s,
            "SELECT count(*) FROM z WHERE id BETWEEN 1000 AND 1999 AND name = 'name-7'",
        )
        .await;
        assert_eq!(single_i64(&filtered), 10);
        let explain = plan_text(&rows(&mut s, "EXPLAIN SELECT id FROM z WHERE id < 100").await);
        assert!(
            explain.contains("ZyrScanExec") && explain.contains("predicates=1"),
            "{explain}"
        );
        // EXPLAIN ANALYZE shows the reader's work. Ids were written in order, so the zone maps
        // leave only the first vector of 1,024 ids for `id < 100`.
        let analyzed =
            plan_text(&rows(&mut s, "EXPLAIN ANALYZE SELECT id FROM z WHERE id < 100").await);
        let metric = |name: &str| -> u64 {
            let at = [" ", "["]
                .iter()
                .find_map(|before| analyzed.find(&format!("{before}{name}=")))
                .unwrap_or_else(|| panic!("no {name} in {analyzed}"));
            let digits = &analyzed[at + name.len() + 2..];
            let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap();
            digits[..end].parse().unwrap()
        };
        assert_eq!(metric("output_rows"), 99, "{analyzed}");
        assert_eq!(metric("vectors"), 200_000_u64.div_ceil(1024), "{analyzed}");
        assert_eq!(
            metric("vectors_pruned"),
            metric("vectors") - 1,
            "{analyzed}"
        );
        assert_eq!(metric("blocks_pruned") + 1, metric("blocks"), "{analyzed}");

        // COUNT, MIN and MAX come from the file's statistics: no scan in the plan.
        let explain =
            plan_text(&rows(&mut s, "EXPLAIN SELECT count(*), min(id), max(id) FROM z").await);
        assert!(!explain.contains("ZyrScanExec"), "{explain}");
        let stats = rows(&mut s, "SELECT count(*), min(id), max(id) FROM z").await;
        assert_eq!(
            stats[0].column(2).as_primitive::<Int64Type>().value(0),
            200_000
        );

        // To Parquet through DataFusion's COPY, and back to .zyr through ours.
        let parquet = dir.path().join("t.parquet");
        let back = dir.path().join("back.zyr");
        command(
            &mut s,
            &format!("COPY (SELECT * FROM z) TO '{}'", parquet.display()),
        )
        .await;
        command(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE p STORED AS PARQUET LOCATION '{}'",
                parquet.display()
            ),
        )
        .await;
        assert_eq!(
            command(&mut s, &format!("COPY p TO '{}'", back.display())).await,
            "COPY 200000"
        );
        let again = single_i64(
            &rows(
                &mut s,
                &format!("SELECT sum(id * k) FROM read_zyr('{}')", back.display()),
            )
            .await,
        );
        assert_eq!(again, expected);
    });
}

/// Filters the reader evaluates exactly replace DataFusion's FilterExec (so a column used only
/// in the filter is not read), and every filter gives the answer DataFusion gives on the same
/// rows: NULLs, strings, IN, ranges, decimals, and the shapes that stay inexact or unpushed.
#[test]
fn exact_filters_replace_datafusions_filter_and_agree_with_it() {
    block_on(async {
        let (_dir, path, _engine, mut s) = session_and_zyr_path();
        let source = "SELECT value AS id, value % 7 AS k, \
             CASE WHEN value % 10 = 0 THEN NULL ELSE concat('name-', value % 100) END AS name, \
             CAST(value AS DOUBLE) / 4 AS price, CAST(value % 1000 AS DECIMAL(15, 2)) / 8 AS d \
             FROM generate_series(1, 100000)";
        command(&mut s, &format!("COPY ({source}) TO '{}'", path.display())).await;
        command(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE n STORED AS ZYR LOCATION '{}'",
                path.display()
            ),
        )
        .await;
        command(&mut s, &format!("CREATE VIEW v AS {source}")).await;
        // (predicate, whether DataFusion's own filter must be gone from the plan)
        let cases = [
            ("k = 3", true),
            ("k <> 3", true),
            ("name = 'name-7'", true),
            ("name < 'name-5'", true),
            ("name IN ('name-1', 'name-22')", true),
            ("name IS NULL", true),
            ("name IS NOT NULL AND k >= 5", true),
            ("id BETWEEN 10 AND 5000 AND k = 2", true),
            ("d > 60.5", true),
            ("price < 100.0", false),
            ("k = 3 OR k = 4 OR k IN (5, 6)", true),
            ("k = 3 OR id = 4", false),
            ("k = 3 AND name LIKE 'name-1%'", false),
        ];
        for (predicate, exact) in cases {
            let query = |table: &str| {
                format!("SELECT count(*) AS c, sum(id) AS s FROM {table} WHERE {predicate}")
            };
            let ours = rows(&mut s, &query("n")).await;
            let theirs = rows(&mut s, &query("v")).await;
            assert_eq!(
                format!("{ours:?}"),
                format!("{theirs:?}"),
                "{predicate}: .zyr and DataFusion disagree"
            );
            assert!(
                single_i64(&ours) > 0,
                "{predicate} selects nothing: a weak case"
            );
            let plan = plan_text(&rows(&mut s, &format!("EXPLAIN {}", query("n"))).await);
            assert_eq!(
                !plan.contains("FilterExec"),
                exact,
                "{predicate}: exact pushdown expected {exact}\n{plan}"
            );
            if exact {
                assert!(plan.contains("filter=Pushdown"), "{predicate}\n{plan}");
            }
        }
    });
}

#[test]
fn a_corrupt_file_is_reported_as_data_corruption() {
    block_on(async {
        let (_dir, path, _engine, mut s) = session_and_zyr_path();
        command(&mut s, &format!("COPY ({SOURCE}) TO '{}'", path.display())).await;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = error(
            &mut s,
            &format!("SELECT sum(id) FROM read_zyr('{}')", path.display()),
        )
        .await;
        assert_eq!(err.sqlstate().code(), "XX001", "{err}");
        assert!(err.message().contains("checksum"), "{err}");
        let err = s
            .execute_sql("SELECT * FROM read_zyr('/nonexistent/x.zyr')")
            .await
            .unwrap_err();
        assert!(err.message().contains("cannot open"), "{err}");
    });
}

/// Every type, through arrow-rs Parquet and `.zyr` and back, comes out identical.
#[test]
fn parquet_converts_to_zyr_and_back_without_loss() {
    let batch = zyron_format::testing::all_types_batch(3_000);
    let parquet = |b: &RecordBatch| {
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, b.schema(), None).unwrap();
        w.write(b).unwrap();
        w.close().unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(out))
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
    };
    let zyr = |b: &RecordBatch| {
        let mut w =
            zyron_format::ZyrWriter::new(Vec::new(), b.schema(), Default::default()).unwrap();
        w.write(b).unwrap();
        let file = zyron_format::ZyrFile::open(bytes::Bytes::from(w.finish().unwrap().0)).unwrap();
        let all: Vec<usize> = (0..b.num_columns()).collect();
        file.read_rows(&all, 0..b.num_rows() as u64).unwrap()
    };
    let from_parquet = parquet(&batch);
    assert_eq!(from_parquet, batch, "arrow-rs Parquet keeps every type");
    let through_zyr = zyr(&from_parquet);
    assert_eq!(through_zyr, batch);
    assert_eq!(parquet(&through_zyr), batch);
}

/// A selective range inside one block is shared by both partitions; a plain scan is split at
/// block boundaries. Either way the partitions together read every row once and count every
/// vector and block once.
#[test]
fn partitions_share_the_candidates_of_a_block() {
    use datafusion::catalog::TableProvider;
    use datafusion::physical_plan::{ExecutionPlanProperties, collect_partitioned};
    use datafusion::prelude::{SessionConfig, SessionContext, col, lit};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ids.zyr");
    let rows = 200_000i64;
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
        datafusion::arrow::datatypes::Field::new(
            "id",
            datafusion::arrow::datatypes::DataType::Int64,
            false,
        ),
    ]));
    let ids = datafusion::arrow::array::Int64Array::from_iter_values(0..rows);
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)]).unwrap();
    let mut w = zyron_format::ZyrWriter::new(Vec::new(), schema, Default::default()).unwrap();
    w.write(&batch).unwrap();
    std::fs::write(&path, w.finish().unwrap().0).unwrap();

    block_on(async {
        let table = zyron_engine::zyr::ZyrTable::open(path.to_str().unwrap()).unwrap();
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        // 1,000 <= id < 40,000: vectors 0 to 39 of the first block of 65,536 rows.
        let in_first_block = col("id")
            .gt_eq(lit(1_000i64))
            .and(col("id").lt(lit(40_000i64)));
        for (filters, expected_rows) in [(vec![in_first_block], 39_000), (vec![], rows)] {
            let plan = table
                .scan(&ctx.state(), None, &filters, None)
                .await
                .unwrap();
            assert_eq!(plan.output_partitioning().partition_count(), 2);
            let parts = collect_partitioned(plan.clone(), ctx.task_ctx())
                .await
                .unwrap();
            let counts: Vec<usize> = parts
                .iter()
                .map(|p| p.iter().map(|b| b.num_rows()).sum())
                .collect();
            assert!(counts.iter().all(|n| *n > 0), "{filters:?}: {counts:?}");
            let ids: Vec<i64> = parts
                .iter()
                .flatten()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            assert_eq!(ids.len(), expected_rows as usize, "{filters:?}");
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "partitions in order, no row twice"
            );
            let metrics = plan.metrics().unwrap();
            let sum = |name: &str| metrics.sum_by_name(name).unwrap().as_usize();
            assert_eq!(sum("vectors"), 196, "{filters:?}");
            assert_eq!(sum("blocks"), 4, "{filters:?}");
            let (vectors_pruned, blocks_pruned) = match filters.len() {
                0 => (0, 0),
                _ => (196 - 40, 3),
            };
            assert_eq!(sum("vectors_pruned"), vectors_pruned, "{filters:?}");
            assert_eq!(sum("blocks_pruned"), blocks_pruned, "{filters:?}");
        }
    });
}

/// Like DataFusion's Parquet tables, a `.zyr` table hands strings out as `Utf8View` (its
/// dictionary blocks as views into their values) unless the session turns
/// `datafusion.execution.parquet.schema_force_view_types` off; the rows are the same either way,
/// filtered or not.
#[test]
fn zyr_tables_return_strings_as_views_as_parquet_tables_do() {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::prelude::{SessionConfig, SessionContext};
    block_on(async {
        let (_dir, path, _engine, mut s) = session_and_zyr_path();
        // `name` has 100 values (dictionary blocks), `note` one per row (not a dictionary).
        let source = format!(
            "SELECT *, concat('a note longer than twelve bytes ', id) AS note FROM ({SOURCE})"
        );
        command(&mut s, &format!("COPY ({source}) TO '{}'", path.display())).await;
        create_table_z(&mut s, &path).await;
        let typed = rows(
            &mut s,
            "SELECT arrow_typeof(name), arrow_typeof(note) FROM z LIMIT 1",
        )
        .await;
        for column in typed[0].columns() {
            let type_name = datafusion::arrow::util::display::array_value_to_string(column, 0);
            assert_eq!(type_name.unwrap(), "Utf8View");
        }

        let mut answers = vec![];
        for views in [true, false] {
            let config = SessionConfig::new().set_bool(
                "datafusion.execution.parquet.schema_force_view_types",
                views,
            );
            let ctx = SessionContext::new_with_config(config);
            let table = zyron_engine::zyr::ZyrTable::open_for(path.to_str().unwrap(), &ctx.state())
                .unwrap();
            let expected = if views {
                DataType::Utf8View
            } else {
                DataType::Utf8
            };
            use datafusion::catalog::TableProvider;
            assert_eq!(
                table.schema().field_with_name("name").unwrap().data_type(),
                &expected
            );
            ctx.register_table("t", std::sync::Arc::new(table)).unwrap();
            for sql in [
                "SELECT id, name, note FROM t ORDER BY id",
                "SELECT id, name, note FROM t WHERE name = 'name-42' ORDER BY id",
            ] {
                let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
                let batch =
                    datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches)
                        .unwrap();
                assert_eq!(batch.column(1).data_type(), &expected, "{sql}");
                assert_eq!(batch.column(2).data_type(), &expected, "{sql}");
                let as_utf8: Vec<_> = batch
                    .columns()
                    .iter()
                    .map(|c| {
                        datafusion::arrow::compute::cast(
                            c,
                            &match c.data_type() {
                                DataType::Utf8View => DataType::Utf8,
                                other => other.clone(),
                            },
                        )
                        .unwrap()
                    })
                    .collect();
                answers.push((sql, batch.num_rows(), as_utf8));
            }
        }
        assert_eq!(answers[0].1, 200_000);
        assert_eq!(answers[1].1, 2_000);
        assert_eq!(answers[0], answers[2]);
        assert_eq!(answers[1], answers[3]);
    })
}
