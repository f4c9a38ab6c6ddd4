//! What every lake test file shares: stores on the local filesystem and on
//! S3 (a SeaweedFS server of its own), and a macro that runs one scenario
//! on both; and what the lake suites share: the points they load and the
//! storages (with delta-rs's matching URIs) they run on.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use zyron_bench::SuiteRun;
use zyron_bench::deltalake;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use zyron_bench::seaweedfs::SeaweedFs;

/// What `Location::parse` gives a local directory: fsynced puts.
pub fn local_store(dir: &tempfile::TempDir) -> Arc<dyn ObjectStore> {
    zyron_lake::Location::parse(dir.path().to_str().unwrap())
        .unwrap()
        .store
}

/// A store on the test process's SeaweedFS S3 gateway (tests keep apart by
/// prefix).
pub fn s3_store() -> Arc<dyn ObjectStore> {
    let server = SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
    let builder = AmazonS3Builder::new()
        .with_endpoint(server.endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("zyron")
        .with_secret_access_key("zyron");
    let location = zyron_lake::location::s3(&server.bucket, "", builder).unwrap();
    location.store
}

/// Each scenario runs on the local filesystem and on S3 (SeaweedFS).
#[macro_export]
macro_rules! on_local_disk_and_s3 {
    ($($scenario:ident),*) => {$(
        mod $scenario {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn local_disk() {
                let dir = tempfile::tempdir().unwrap();
                super::$scenario(local_store(&dir), Path::from("t")).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn seaweedfs_s3() {
                let root = concat!("tables/", stringify!($scenario));
                super::$scenario(s3_store(), Path::from(root)).await;
            }
        }
    )*};
}

/// The largest x and y of [`points`].
pub const MAX_XY: i64 = 1_000_000;

/// Rows `ids` as (x, y, id), x and y scattered by multiplicative hashes so
/// they are uncorrelated with each other and with the id. delta-rs's worker
/// (`zyron_bench::deltalake`) generates the same rows.
pub fn points(ids: std::ops::Range<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, false),
        Field::new("y", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
    ]));
    let scatter = |i: i64, k: u64| ((i as u64).wrapping_mul(k) >> 20) as i64 % MAX_XY;
    let x = Int64Array::from_iter_values(ids.clone().map(|i| scatter(i, 0x9E37_79B9_7F4A_7C15)));
    let y = Int64Array::from_iter_values(ids.clone().map(|i| scatter(i, 0xC2B2_AE3D_27D4_EB4F)));
    let id = Int64Array::from_iter_values(ids);
    RecordBatch::try_new(schema, vec![Arc::new(x), Arc::new(y), Arc::new(id)]).unwrap()
}

/// Where a suite's two sides write, on one kind of storage.
pub struct Storage {
    pub name: &'static str,
    pub zyron: Arc<dyn ObjectStore>,
    /// delta-rs's table URIs are `<delta_base>/<table>`.
    pub delta_base: String,
    pub delta_options: BTreeMap<String, String>,
    /// Whether delta-rs makes a commit durable before reporting it: its
    /// local filesystem store never fsyncs; an S3 server stores durably.
    pub peer_durable: bool,
}

/// The local disk (under `local_dir`) and, when SeaweedFS runs, S3; a
/// storage that cannot run is recorded as skipped in `run`.
pub fn storages(run: &mut SuiteRun, local_dir: &tempfile::TempDir) -> Vec<Storage> {
    let mut storages = vec![Storage {
        name: "local",
        zyron: local_store(local_dir),
        delta_base: local_dir.path().join("delta").display().to_string(),
        delta_options: BTreeMap::new(),
        peer_durable: false,
    }];
    match SeaweedFs::shared() {
        Ok(server) => storages.push(Storage {
            name: "s3",
            zyron: s3_store(),
            delta_base: format!("s3://{}/delta", server.bucket),
            delta_options: deltalake::s3_options(&server.endpoint(), "zyron", "zyron"),
            peer_durable: true,
        }),
        Err(reason) => run.skip(format!("S3 (SeaweedFS): {reason}")),
    }
    storages
}

/// What every lake suite sets up: a runtime for Zyron's side, delta-rs's
/// version (or why it cannot run, recorded in the run as a skip), and the
/// storages both sides write to.
pub struct SuiteSetup {
    pub runtime: tokio::runtime::Runtime,
    pub delta_version: Result<String, String>,
    pub storages: Vec<Storage>,
    _local_dir: tempfile::TempDir,
}

pub fn suite_setup(run: &mut SuiteRun) -> SuiteSetup {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let delta_version = deltalake::version();
    if let Err(reason) = &delta_version {
        run.skip(format!("delta-rs: {reason}"));
    }
    let local_dir = tempfile::tempdir().unwrap();
    let storages = storages(run, &local_dir);
    SuiteSetup {
        runtime,
        delta_version,
        storages,
        _local_dir: local_dir,
    }
}

/// One BIGINT column `id` holding `range`.
pub fn ids(range: std::ops::Range<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(range))]).unwrap()
}

/// A new table of [`ids`] rows (checkpoint every 10 versions).
pub async fn id_table(
    store: Arc<dyn ObjectStore>,
    root: object_store::path::Path,
    properties: &[(&str, &str)],
) -> zyron_lake::LakeTable {
    let metadata = zyron_lake::TableMetadata {
        schema: serde_json::json!({"columns": ["id"]}),
        checkpoint_interval: 10,
        properties: properties
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    zyron_lake::LakeTable::create(store, root, metadata)
        .await
        .unwrap()
}

/// Every id a snapshot of an [`id_table`] holds, sorted.
pub async fn all_ids(table: &zyron_lake::LakeTable, snapshot: &zyron_lake::Snapshot) -> Vec<i64> {
    use arrow::array::AsArray;
    let (batches, _) = table.scan(snapshot, None, &[]).await.unwrap();
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// `lo <= column < hi` for each `(column, lo, hi)`, as file filters.
pub fn range_filters(ranges: &[(&str, i64, i64)]) -> Vec<zyron_lake::FileFilter> {
    use zyron_format::{CmpOp, PredicateOp, Scalar};
    let bound = |column: &str, op, v: i64| {
        zyron_lake::FileFilter::new(column, PredicateOp::Cmp(op, Scalar::Int(v.into())))
    };
    ranges
        .iter()
        .flat_map(|(column, lo, hi)| {
            [
                bound(column, CmpOp::GtEq, *lo),
                bound(column, CmpOp::Lt, *hi),
            ]
        })
        .collect()
}
