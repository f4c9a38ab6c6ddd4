//! Tags, branches and the change feed on the local filesystem and on S3
//! (SeaweedFS): a tag reads its version; a branch sees its own writes and
//! not the main line's, merges back with the main line's concurrent commits
//! kept, and conflicts when both deleted the same rows; the change feed
//! lists each version's inserted and deleted rows, skipping OPTIMIZE.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{AsArray, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::kernels::cmp::eq;
use arrow::datatypes::Int64Type;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use zyron_format::{CmpOp, PredicateOp, Scalar};
use zyron_lake::{ChangeKind, FileFilter, LakeTable, Snapshot};

mod common;
use common::*;

on_local_disk_and_s3!(
    tags_name_versions,
    a_branch_merges_back_and_conflicts_on_the_same_rows,
    the_change_feed_lists_inserts_and_deletes_per_version
);

async fn create(store: Arc<dyn ObjectStore>, root: Path) -> LakeTable {
    id_table(store, root, &[]).await
}

async fn append(table: &LakeTable, range: std::ops::Range<i64>) -> Snapshot {
    let mut write = table.begin().await.unwrap();
    write.append(&[ids(range)]).await.unwrap();
    write.commit("append").await.unwrap().snapshot
}

async fn delete(table: &LakeTable, id: i64) -> zyron_common::Result<Snapshot> {
    let mut write = table.begin().await?;
    let mask = move |b: &RecordBatch| -> zyron_common::Result<BooleanArray> {
        Ok(eq(b.column(0), &Int64Array::new_scalar(id)).unwrap())
    };
    let filter = FileFilter::new("id", PredicateOp::Cmp(CmpOp::Eq, Scalar::Int(id.into())));
    write.delete_where(&[filter], &mask).await?;
    Ok(write.commit("delete").await?.snapshot)
}

fn range(r: std::ops::Range<i64>, without: &[i64]) -> Vec<i64> {
    r.filter(|i| !without.contains(i)).collect()
}

async fn tags_name_versions(store: Arc<dyn ObjectStore>, root: Path) {
    let table = create(store, root).await;
    let v1 = append(&table, 0..10).await;
    append(&table, 10..20).await;
    table.create_tag("before-load", v1.version).await.unwrap();
    table.create_tag("v2", 2).await.unwrap();
    assert_eq!(table.tag("before-load").await.unwrap(), 1);
    let tagged = table
        .at_version(table.tag("before-load").await.unwrap())
        .await
        .unwrap();
    assert_eq!(all_ids(&table, &tagged).await, (0..10).collect::<Vec<_>>());
    let err = table.create_tag("v2", 1).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "42710", "{}", err.message());
    let err = table.create_tag("later", 99).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023", "{}", err.message());
    let err = table.create_tag("../escape", 1).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023", "{}", err.message());
    assert_eq!(
        table.tags().await.unwrap(),
        BTreeMap::from([("before-load".to_owned(), 1), ("v2".to_owned(), 2)])
    );
    table.drop_tag("v2").await.unwrap();
    let err = table.tag("v2").await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "42704", "{}", err.message());
}

async fn a_branch_merges_back_and_conflicts_on_the_same_rows(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root).await;
    let start = append(&table, 0..100).await;
    let dev = table.create_branch("dev", start.version).await.unwrap();
    let err = table.create_branch("dev", start.version).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "42710");
    // The branch's writes: an append and a delete from a shared file.
    append(&dev, 1_000..1_100).await;
    delete(&dev, 5).await.unwrap();
    // Meanwhile on main: an append, and a delete of another row of that file.
    append(&table, 2_000..2_100).await;
    delete(&table, 6).await.unwrap();
    let dev_view = all_ids(&dev, &dev.latest().await.unwrap()).await;
    let mut want = range(0..100, &[5]);
    want.extend(1_000..1_100);
    assert_eq!(dev_view, want, "the branch sees its writes only");
    let main_view = all_ids(&table, &table.latest().await.unwrap()).await;
    assert!(!main_view.contains(&1_000) && main_view.contains(&5));

    let merged = table.merge_branch("dev").await.unwrap().unwrap();
    let mut want = range(0..100, &[5, 6]);
    want.extend(1_000..1_100);
    want.extend(2_000..2_100);
    assert_eq!(all_ids(&table, &merged.snapshot).await, want);
    assert_eq!(table.branches().await.unwrap(), ["dev"]);
    // Merging it again would add its files twice: refused, main readable.
    let err = table.merge_branch("dev").await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "40001", "{}", err.message());
    assert_eq!(table.latest().await.unwrap().version, merged.version);

    // Both lines delete row 7: the merge is refused and main is unchanged.
    let fix = table.create_branch("fix", merged.version).await.unwrap();
    delete(&fix, 7).await.unwrap();
    let main_before = delete(&table, 7).await.unwrap();
    let err = table.merge_branch("fix").await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "40001", "{}", err.message());
    assert_eq!(table.latest().await.unwrap().version, main_before.version);
    // A branch with no changes merges to nothing; dropping removes it.
    table
        .create_branch("idle", main_before.version)
        .await
        .unwrap();
    assert!(table.merge_branch("idle").await.unwrap().is_none());
    // A drop cut short (version 0 gone, a later entry left) blocks a new
    // branch of that name until it is dropped again.
    let idle = table.branch("idle");
    append(&idle, 5_000..5_001).await;
    idle.store()
        .delete(
            &idle
                .log_root()
                .clone()
                .join("_zyron_log")
                .join(format!("{:020}.json", 0)),
        )
        .await
        .unwrap();
    let err = table
        .create_branch("idle", main_before.version)
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().code(), "42710", "{}", err.message());
    table.drop_branch("idle").await.unwrap();
    table
        .create_branch("idle", main_before.version)
        .await
        .unwrap();
    table.drop_branch("idle").await.unwrap();
    let err = table.drop_branch("idle").await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "42704", "{}", err.message());
    table.drop_branch("fix").await.unwrap();
    assert_eq!(table.branches().await.unwrap(), ["dev"]);
    let err = table.branch("idle").latest().await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "42P01", "{}", err.message());
}

async fn the_change_feed_lists_inserts_and_deletes_per_version(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root).await;
    append(&table, 0..50).await; // v1
    append(&table, 50..100).await; // v2
    delete(&table, 10).await.unwrap(); // v3
    table.optimize(1_000).await.unwrap(); // v4: same rows, no changes
    // v5: an UPDATE of id 20 to 20_000: delete plus insert in one version.
    let mut write = table.begin().await.unwrap();
    let mask = |b: &RecordBatch| -> zyron_common::Result<BooleanArray> {
        Ok(eq(b.column(0), &Int64Array::new_scalar(20)).unwrap())
    };
    write.delete_where(&[], &mask).await.unwrap();
    write.append(&[ids(20_000..20_001)]).await.unwrap();
    let last = write.commit("update").await.unwrap();
    assert_eq!(last.version, 5);

    let changes = table.changes(1, 5).await.unwrap();
    let summary: Vec<(u64, ChangeKind, Vec<i64>)> = changes
        .iter()
        .map(|c| {
            let ids = c
                .rows
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec();
            (c.version, c.kind, ids)
        })
        .collect();
    assert_eq!(
        summary,
        [
            (2, ChangeKind::Insert, (50..100).collect()),
            (3, ChangeKind::Delete, vec![10]),
            (5, ChangeKind::Delete, vec![20]),
            (5, ChangeKind::Insert, vec![20_000]),
        ]
    );
    let v5_time = table.entry(5).await.unwrap().timestamp_ms;
    assert!(
        changes
            .iter()
            .filter(|c| c.version == 5)
            .all(|c| c.timestamp_ms == v5_time)
    );
    let err = table.changes(5, 1).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023");
    let err = table.changes(1, 9).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023", "{}", err.message());
}
