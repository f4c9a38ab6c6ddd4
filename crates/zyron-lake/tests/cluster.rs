//! Clustering on the local filesystem and on S3 (SeaweedFS): after CLUSTER
//! BY two columns (Z-order or Hilbert) or a derived key, a selective range
//! query on one column skips most files by the zone maps in the log, while
//! the table's rows stay exactly the same; loading with clustering does
//! the same at write time.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::compute::kernels::numeric::div;
use arrow::datatypes::Int64Type;
use object_store::ObjectStore;
use object_store::path::Path;
use zyron_format::{CmpOp, PredicateOp, Scalar};
use zyron_lake::{ClusterKey, ClusterSpec, Curve, FileFilter, LakeTable, Snapshot, TableMetadata};

mod common;
use common::*;

on_local_disk_and_s3!(
    clustering_by_two_columns_prunes_a_range_on_either,
    loading_with_a_derived_key_clusters_at_write_time
);

const ROWS: i64 = 40_000;
const MAX_X: i64 = MAX_XY;

async fn create(store: Arc<dyn ObjectStore>, root: Path) -> LakeTable {
    let metadata = TableMetadata {
        schema: serde_json::json!({"columns": ["x", "y"]}),
        checkpoint_interval: 100,
        properties: BTreeMap::new(),
    };
    LakeTable::create(store, root, metadata).await.unwrap()
}

/// The fraction of files a query for `lo <= column < hi` skips, after
/// checking its answer against the generator.
async fn pruned(table: &LakeTable, snapshot: &Snapshot, column: &str, lo: i64, hi: i64) -> f64 {
    let filters = [
        FileFilter::new(
            column,
            PredicateOp::Cmp(CmpOp::GtEq, Scalar::Int(lo.into())),
        ),
        FileFilter::new(column, PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(hi.into()))),
    ];
    let (batches, report) = table.scan(snapshot, None, &filters).await.unwrap();
    let index = usize::from(column == "y");
    let hits = batches
        .iter()
        .flat_map(|b| {
            b.column(index)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .filter(|v| (lo..hi).contains(v))
        .count();
    let all = points(0..ROWS);
    let want = all
        .column(index)
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .filter(|v| (lo..hi).contains(*v))
        .count();
    assert_eq!(hits, want, "{column} in [{lo}, {hi})");
    report.files_pruned as f64 / report.files as f64
}

/// Sum of x and of y over the table: clustering must not change them.
async fn sums(table: &LakeTable, snapshot: &Snapshot) -> (u64, i64, i64) {
    let (batches, report) = table.scan(snapshot, None, &[]).await.unwrap();
    let sum = |c: usize| -> i64 {
        batches
            .iter()
            .map(|b| {
                b.column(c)
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .sum::<i64>()
            })
            .sum()
    };
    (report.rows, sum(0), sum(1))
}

async fn clustering_by_two_columns_prunes_a_range_on_either(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root).await;
    let mut write = table.begin().await.unwrap();
    for k in 0..20 {
        write
            .append(&[points(k * 2_000..(k + 1) * 2_000)])
            .await
            .unwrap();
    }
    let unclustered = write.commit("append").await.unwrap().snapshot;
    let expected = sums(&table, &unclustered).await;
    assert_eq!(expected.0, ROWS as u64);
    // Unclustered, every file spans almost every x: nothing is skipped.
    let narrow = MAX_X / 40;
    assert_eq!(
        pruned(&table, &unclustered, "x", 500_000, 500_000 + narrow).await,
        0.0
    );
    for curve in [Curve::ZOrder, Curve::Hilbert] {
        let spec = ClusterSpec {
            curve,
            keys: vec![
                ClusterKey::Column("x".into()),
                ClusterKey::Column("y".into()),
            ],
            target_file_rows: 1_000,
        };
        let report = table.cluster(&spec).await.unwrap();
        assert_eq!((report.files_added, report.rows_written), (40, ROWS as u64));
        let clustered = table.latest().await.unwrap();
        assert_eq!(
            sums(&table, &clustered).await,
            expected,
            "{curve:?} keeps every row"
        );
        for column in ["x", "y"] {
            let fraction = pruned(&table, &clustered, column, 500_000, 500_000 + narrow).await;
            // 40 files on a 2-D curve: a 1/40 slab crosses about sqrt(40).
            assert!(fraction >= 0.7, "{curve:?} on {column}: {fraction}");
        }
    }
}

async fn loading_with_a_derived_key_clusters_at_write_time(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root).await;
    // One derived key, x / 1000 (what `CLUSTER BY (x / 1000)` would pass).
    let per_thousand = |batch: &RecordBatch| -> zyron_common::Result<ArrayRef> {
        div(batch.column(0), &Int64Array::new_scalar(1_000))
            .map_err(|e| zyron_common::ZyronError::internal(e.to_string()))
    };
    let spec = ClusterSpec {
        curve: Curve::Hilbert,
        keys: vec![ClusterKey::Derived {
            name: "x / 1000".into(),
            eval: Arc::new(per_thousand),
        }],
        target_file_rows: 1_000,
    };
    let mut write = table.begin().await.unwrap();
    write
        .append_clustered(&[points(0..ROWS)], &spec)
        .await
        .unwrap();
    let snapshot = write.commit("append").await.unwrap().snapshot;
    assert_eq!(snapshot.files.len(), 40);
    assert_eq!(sums(&table, &snapshot).await.0, ROWS as u64);
    let fraction = pruned(&table, &snapshot, "x", 300_000, 300_000 + MAX_X / 100).await;
    assert!(fraction >= 0.9, "{fraction}");
    // A key that names no column is a clear error.
    let bad = ClusterSpec {
        keys: vec![ClusterKey::Column("nope".into())],
        ..spec
    };
    let err = table.cluster(&bad).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "42703", "{}", err.message());
}
