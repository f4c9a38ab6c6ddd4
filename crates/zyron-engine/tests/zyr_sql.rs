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

const SOURCE: &str = "SELECT value AS id, value % 7 AS k, concat('name-', value % 100) AS name, CAST(value AS DOUBLE) / 4 AS price FROM generate_series(1, 200000)";

#[test]
fn copy_read_external_table_pushdown_and_statistics() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.zyr");
        let engine = Engine::new(EngineOptions::default()).unwrap();
        let mut s = engine.new_session();
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

        command(
            &mut s,
            &format!(
                "CREATE EXTERNAL TABLE z STORED AS ZYR LOCATION '{}'",
                path.display()
            ),
        )
        .await;
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

#[test]
fn a_corrupt_file_is_reported_as_data_corruption() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.zyr");
        let engine = Engine::new(EngineOptions::default()).unwrap();
        let mut s = engine.new_session();
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
