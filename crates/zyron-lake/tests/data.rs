//! Lake data on the local filesystem and on S3 (SeaweedFS): appended rows
//! read back exactly, zone maps in the log prune files, DELETE and UPDATE
//! are deletion vectors (no file rewritten) that time travel sees through,
//! concurrent deletes of different rows both land while deletes of the same
//! rows conflict, and a damaged data file is an error.

use std::sync::Arc;

use arrow::array::{AsArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::compute::kernels::cmp::{eq, gt_eq, lt};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use zyron_format::{CmpOp, PredicateOp, Scalar};
use zyron_lake::{FileFilter, LakeTable, Snapshot, TableMetadata};

mod common;
use common::*;

on_local_disk_and_s3!(
    appended_rows_read_back_and_zone_maps_prune_files,
    deletes_and_updates_are_deletion_vectors,
    deletes_of_different_rows_both_land_and_of_the_same_rows_conflict,
    small_appends_live_in_the_log_until_they_grow,
    optimize_merges_small_files_and_purges_deleted_rows,
    a_damaged_data_file_is_an_error_not_a_panic
);

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Float64, true),
        Field::new("name", DataType::Utf8, false),
    ]))
}

/// Rows `ids` with price = id / 2 (null every 7th) and name = "n<id>".
fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
    let price =
        Float64Array::from_iter(ids.clone().map(|i| (i % 7 != 0).then_some(i as f64 / 2.0)));
    let name = StringArray::from_iter_values(ids.clone().map(|i| format!("n{i}")));
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(price),
            Arc::new(name),
        ],
    )
    .unwrap()
}

async fn create(store: Arc<dyn ObjectStore>, root: Path, checkpoint_interval: u64) -> LakeTable {
    create_with(store, root, checkpoint_interval, &[]).await
}

async fn create_with(
    store: Arc<dyn ObjectStore>,
    root: Path,
    checkpoint_interval: u64,
    properties: &[(&str, &str)],
) -> LakeTable {
    let metadata = TableMetadata {
        schema: serde_json::json!({"columns": ["id", "price", "name"]}),
        checkpoint_interval,
        properties: properties
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    LakeTable::create(store, root, metadata).await.unwrap()
}

/// The ids a snapshot holds, sorted, plus the sum of its non-null prices.
async fn contents(table: &LakeTable, snapshot: &Snapshot) -> (Vec<i64>, f64) {
    let (batches, report) = table.scan(snapshot, None, &[]).await.unwrap();
    let mut ids = Vec::new();
    let mut price_sum = 0.0;
    for batch in &batches {
        ids.extend(batch.column(0).as_primitive::<Int64Type>().values().iter());
        price_sum += batch
            .column(1)
            .as_primitive::<Float64Type>()
            .iter()
            .flatten()
            .sum::<f64>();
        let names = batch.column(2).as_string::<i32>();
        let id = batch.column(0).as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            assert_eq!(
                names.value(i),
                format!("n{}", id.value(i)),
                "row stays whole"
            );
        }
    }
    assert_eq!(report.rows, ids.len() as u64);
    assert_eq!(report.rows, snapshot.rows(), "the log's row count agrees");
    ids.sort_unstable();
    (ids, price_sum)
}

fn id_filter(op: CmpOp, v: i64) -> FileFilter {
    FileFilter::new("id", PredicateOp::Cmp(op, Scalar::Int(v as i128)))
}

fn id_mask(
    f: fn(
        &dyn arrow::array::Datum,
        &dyn arrow::array::Datum,
    ) -> Result<BooleanArray, arrow::error::ArrowError>,
    v: i64,
) -> impl Fn(&RecordBatch) -> zyron_common::Result<BooleanArray> + Sync {
    move |b: &RecordBatch| Ok(f(b.column(0), &Int64Array::new_scalar(v)).unwrap())
}

async fn appended_rows_read_back_and_zone_maps_prune_files(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root, 100).await;
    // Ten files of 5,000 ids each, in ten commits.
    for k in 0..10 {
        let mut write = table.begin().await.unwrap();
        write
            .append(&[rows(k * 5_000..(k + 1) * 5_000)])
            .await
            .unwrap();
        write.commit("append").await.unwrap();
    }
    let latest = table.latest().await.unwrap();
    assert_eq!(latest.files.len(), 10);
    let (ids, price_sum) = contents(&table, &latest).await;
    assert_eq!(ids, (0..50_000).collect::<Vec<_>>());
    let expected: f64 = (0..50_000)
        .filter(|i| i % 7 != 0)
        .map(|i| i as f64 / 2.0)
        .sum();
    assert_eq!(price_sum, expected);
    // The log holds each file's zone maps: a selective range reads one file.
    let file = latest.files.values().next().unwrap();
    assert_eq!(file.stats["id"].values, 5_000);
    assert!(file.stats["price"].nulls > 0);
    let filters = [id_filter(CmpOp::GtEq, 42_000), id_filter(CmpOp::Lt, 42_100)];
    let (batches, report) = table.scan(&latest, Some(&[0]), &filters).await.unwrap();
    assert_eq!((report.files, report.files_pruned), (10, 9));
    let hits: usize = batches
        .iter()
        .map(|b| {
            b.column(0)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .filter(|v| (42_000..42_100).contains(*v))
                .count()
        })
        .sum();
    assert_eq!(hits, 100);
    assert_eq!(batches[0].num_columns(), 1, "projection applied");
    // Strings prune too: "n9..." sorts after every name in the first file.
    let by_name = FileFilter::new(
        "name",
        PredicateOp::Cmp(CmpOp::Eq, Scalar::Bytes(b"n49999".to_vec())),
    );
    let (_, report) = table.scan(&latest, None, &[by_name]).await.unwrap();
    assert!(report.files_pruned >= 8, "{report:?}");
}

async fn deletes_and_updates_are_deletion_vectors(store: Arc<dyn ObjectStore>, root: Path) {
    let table = create(store.clone(), root, 3).await;
    let mut write = table.begin().await.unwrap();
    write.append(&[rows(0..10_000)]).await.unwrap();
    write.append(&[rows(10_000..20_000)]).await.unwrap();
    let before = write.commit("append").await.unwrap().snapshot;
    let files_before: Vec<String> = before.files.keys().cloned().collect();

    // DELETE WHERE id < 2500: one file is not even read.
    let mut write = table.begin().await.unwrap();
    let mask = id_mask(lt, 2_500);
    let gone = write
        .delete_where(&[id_filter(CmpOp::Lt, 2_500)], &mask)
        .await
        .unwrap();
    assert_eq!(gone.iter().map(|b| b.num_rows()).sum::<usize>(), 2_500);
    let after_delete = write.commit("delete").await.unwrap().snapshot;
    assert_eq!(after_delete.rows(), 17_500);

    // UPDATE SET price = -1 WHERE id >= 19_990: delete plus append, one commit.
    let mut write = table.begin().await.unwrap();
    let mask = id_mask(gt_eq, 19_990);
    let old = write
        .delete_where(&[id_filter(CmpOp::GtEq, 19_990)], &mask)
        .await
        .unwrap();
    let new: Vec<RecordBatch> = old
        .iter()
        .map(|b| {
            let price = Arc::new(Float64Array::from(vec![-1.0; b.num_rows()]));
            RecordBatch::try_new(
                schema(),
                vec![b.column(0).clone(), price, b.column(2).clone()],
            )
            .unwrap()
        })
        .collect();
    write.append(&new).await.unwrap();
    let after_update = write.commit("update").await.unwrap().snapshot;

    // No file was rewritten: the old ones are live with deletion vectors.
    for path in &files_before {
        assert!(after_update.files.contains_key(path), "{path} still live");
    }
    assert_eq!(after_update.files.len(), 3, "the update's new rows only");
    let (ids, price_sum) = contents(&table, &after_update).await;
    assert_eq!(ids, (2_500..20_000).collect::<Vec<_>>());
    let expected: f64 = (2_500..19_990)
        .filter(|i| i % 7 != 0)
        .map(|i| i as f64 / 2.0)
        .sum::<f64>()
        - 10.0;
    assert_eq!(price_sum, expected);

    // Time travel sees through the deletion vectors.
    let (ids, _) = contents(&table, &table.at_version(before.version).await.unwrap()).await;
    assert_eq!(ids.len(), 20_000);
    // Version 3 was checkpointed: the deletion vectors live in it too.
    assert_eq!(after_update.version, 3);
    let reopened = LakeTable::new(store, table.root().clone());
    assert_eq!(reopened.latest().await.unwrap(), after_update);
    // Deleting nothing commits nothing but an empty version.
    let mut write = table.begin().await.unwrap();
    let mask = id_mask(eq, -5);
    assert!(write.delete_where(&[], &mask).await.unwrap().is_empty());
    assert!(write.actions().is_empty());
}

async fn deletes_of_different_rows_both_land_and_of_the_same_rows_conflict(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root, 100).await;
    let mut write = table.begin().await.unwrap();
    write.append(&[rows(0..1_000)]).await.unwrap();
    let base = write.commit("append").await.unwrap().snapshot;
    let delete_one = |id: i64| {
        let table = &table;
        let base = base.clone();
        async move {
            let mut write = table.begin_at(base);
            let mask = id_mask(eq, id);
            let gone = write
                .delete_where(&[id_filter(CmpOp::Eq, id)], &mask)
                .await?;
            assert_eq!(gone.len(), 1);
            write.commit("delete").await
        }
    };
    // Same base, same file, different rows: the second lands after the first.
    delete_one(10).await.unwrap();
    let second = delete_one(20).await.unwrap();
    assert_eq!(second.attempts, 2);
    assert_eq!(second.snapshot.rows(), 998);
    // Same row: the loser gets 40001 and nothing of it is written.
    let err = delete_one(10).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "40001", "{}", err.message());
    assert!(err.message().contains("same rows"), "{}", err.message());
    let latest = table.latest().await.unwrap();
    assert_eq!(latest.version, second.version);
    let (ids, _) = contents(&table, &latest).await;
    assert!(!ids.contains(&10) && !ids.contains(&20) && ids.len() == 998);
}

async fn small_appends_live_in_the_log_until_they_grow(store: Arc<dyn ObjectStore>, root: Path) {
    let table = create(store.clone(), root.clone(), 7).await;
    let mut snapshot = table.latest().await.unwrap();
    for id in 0..12 {
        let mut write = table.begin_at(snapshot);
        write.append(&[rows(id..id + 1)]).await.unwrap();
        snapshot = write.commit("append").await.unwrap().snapshot;
    }
    // A big append goes to storage.
    let mut write = table.begin_at(snapshot);
    write.append(&[rows(1_000..101_000)]).await.unwrap();
    snapshot = write.commit("append").await.unwrap().snapshot;
    let inline = snapshot
        .files
        .values()
        .filter(|f| f.inline.is_some())
        .count();
    assert_eq!((inline, snapshot.files.len()), (12, 13));
    let objects: Vec<_> =
        futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(&root.clone().join("data"))))
            .await
            .unwrap();
    assert_eq!(objects.len(), 1, "only the big file is an object");
    // Inline files are read, deleted from and checkpointed like the others.
    let mut write = table.begin_at(snapshot);
    let mask = id_mask(eq, 7);
    let gone = write
        .delete_where(&[id_filter(CmpOp::Eq, 7)], &mask)
        .await
        .unwrap();
    assert_eq!(gone.len(), 1);
    let after = write.commit("delete").await.unwrap().snapshot;
    assert_eq!(after.version, 14, "a checkpoint version");
    let reopened = LakeTable::new(store, root).latest().await.unwrap();
    assert_eq!(reopened, after);
    let (ids, _) = contents(&table, &reopened).await;
    let mut want: Vec<i64> = (0..12).filter(|i| *i != 7).collect();
    want.extend(1_000..101_000);
    assert_eq!(ids, want);
}

async fn optimize_merges_small_files_and_purges_deleted_rows(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root, 100).await;
    let mut snapshot = table.latest().await.unwrap();
    for k in 0..20 {
        let mut write = table.begin_at(snapshot);
        write.append(&[rows(k * 500..(k + 1) * 500)]).await.unwrap();
        snapshot = write.commit("append").await.unwrap().snapshot;
    }
    let mut write = table.begin_at(snapshot);
    let mask = id_mask(lt, 700);
    write
        .delete_where(&[id_filter(CmpOp::Lt, 700)], &mask)
        .await
        .unwrap();
    let before = write.commit("delete").await.unwrap().snapshot;
    let (ids_before, sum_before) = contents(&table, &before).await;

    let report = table.optimize(4_000).await.unwrap();
    assert_eq!(report.files_removed, 20);
    assert_eq!(report.files_added, 3, "{report:?}");
    assert_eq!(report.deleted_rows_purged, 700);
    assert_eq!(report.rows_written, 9_300);
    let after = table.latest().await.unwrap();
    assert_eq!(Some(after.version), report.version);
    assert!(
        after
            .files
            .values()
            .all(|f| f.deleted.is_empty() && f.inline.is_none())
    );
    assert_eq!(
        contents(&table, &after).await,
        (ids_before.clone(), sum_before)
    );
    // The old files still serve time travel.
    let (old_ids, _) = contents(&table, &table.at_version(before.version).await.unwrap()).await;
    assert_eq!(old_ids, ids_before);
    // Nothing left to do: no commit. A target of 0 rows is an error.
    assert_eq!(table.optimize(4_000).await.unwrap().version, None);
    let err = table.optimize(0).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023", "{}", err.message());
    // A delete that raced an OPTIMIZE of its file conflicts: one merged
    // file is small (1,000 rows), and so is a new append.
    let small = after.files.values().find(|f| f.rows < 2_000).unwrap();
    let batches = table.read_file(small, Some(&[0]), &[]).await.unwrap();
    let victim = batches[0].column(0).as_primitive::<Int64Type>().value(0);
    let mut racing = table.begin_at(after.clone());
    let mask = id_mask(eq, victim);
    racing
        .delete_where(&[id_filter(CmpOp::Eq, victim)], &mask)
        .await
        .unwrap();
    let mut append = table.begin_at(after);
    append.append(&[rows(20_000..20_010)]).await.unwrap();
    append.commit("append").await.unwrap();
    assert_eq!(table.optimize(4_000).await.unwrap().files_removed, 2);
    let err = racing.commit("delete").await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "40001", "{}", err.message());
}

async fn a_damaged_data_file_is_an_error_not_a_panic(store: Arc<dyn ObjectStore>, root: Path) {
    // Nothing inline: the file must be an object to damage it.
    let table = create_with(store.clone(), root, 100, &[("inline_max_bytes", "0")]).await;
    let mut write = table.begin().await.unwrap();
    write.append(&[rows(0..3_000)]).await.unwrap();
    let snapshot = write.commit("append").await.unwrap().snapshot;
    let file = snapshot.files.values().next().unwrap();
    let path = table.data_path(&file.path);
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    // Flip one byte in the middle (column data): the checksum catches it.
    let mut damaged = bytes.to_vec();
    damaged[bytes.len() / 3] ^= 0x5a;
    store.put(&path, damaged.into()).await.unwrap();
    let err = table.scan(&snapshot, None, &[]).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "XX001", "{}", err.message());
    // A missing file is an I/O error naming it.
    store.delete(&path).await.unwrap();
    let err = table.scan(&snapshot, None, &[]).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "58030", "{}", err.message());
    assert!(err.message().contains(&file.path), "{}", err.message());
}
