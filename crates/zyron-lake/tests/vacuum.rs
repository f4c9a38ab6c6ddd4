//! VACUUM on the local filesystem and on S3 (SeaweedFS): old garbage goes,
//! a file an in-flight writer has not committed yet stays (and its commit
//! then succeeds), files time travel needs stay, a writer racing VACUUM
//! loses nothing, and a commit refuses a file older than the write lease.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use zyron_lake::{Action, DataFile, LakeTable};

mod common;
use common::*;

on_local_disk_and_s3!(
    vacuum_spares_an_in_flight_writer_and_deletes_old_garbage,
    a_writer_racing_vacuum_loses_nothing,
    a_commit_refuses_a_file_older_than_the_write_lease
);

const HOUR_MS: i64 = 3_600_000;

/// A table whose data files are all objects (nothing inline).
async fn create(store: Arc<dyn ObjectStore>, root: Path) -> LakeTable {
    id_table(store, root, &[("inline_max_bytes", "0")]).await
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn data_objects(store: &Arc<dyn ObjectStore>, root: &Path) -> usize {
    let listed: Vec<_> =
        futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(&root.clone().join("data"))))
            .await
            .unwrap();
    listed.len()
}

async fn vacuum_spares_an_in_flight_writer_and_deletes_old_garbage(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store.clone(), root.clone()).await;
    let mut write = table.begin().await.unwrap();
    write.append(&[ids(0..1_000)]).await.unwrap();
    write.append(&[ids(1_000..2_000)]).await.unwrap();
    let two_files = write.commit("append").await.unwrap().snapshot;
    // OPTIMIZE replaces the two files: they are dead but time travel reads them.
    table.optimize(10_000).await.unwrap();
    // Garbage a writer left two hours ago (it crashed before committing).
    let old = format!("data/{:013}-{:032x}.zyr", now_ms() - 2 * HOUR_MS, 7u128);
    store
        .put(&table.data_path(&old), b"abandoned".to_vec().into())
        .await
        .unwrap();
    // A writer in flight: its file is written, its commit not yet made.
    let mut in_flight = table.begin().await.unwrap();
    in_flight.append(&[ids(5_000..5_500)]).await.unwrap();
    assert_eq!(data_objects(&store, &root).await, 5);

    // With an hour's retention the dead files stay for time travel; only
    // the old garbage goes. A dry run says so and deletes nothing.
    let dry = table.vacuum(HOUR_MS, true).await.unwrap();
    assert_eq!((dry.oldest_readable_version, dry.files_deleted), (0, 1));
    assert_eq!(
        data_objects(&store, &root).await,
        5,
        "a dry run deletes nothing"
    );
    let report = table.vacuum(HOUR_MS, false).await.unwrap();
    assert_eq!(report, dry);
    assert_eq!(
        report.files_referenced, 3,
        "the optimized file and the two it replaced"
    );
    assert_eq!(report.files_within_lease, 1, "the in-flight file");
    assert_eq!(report.bytes_deleted, 9);
    assert!(store.head(&table.data_path(&old)).await.is_err());
    let old_ids = all_ids(&table, &table.at_version(two_files.version).await.unwrap()).await;
    assert_eq!(old_ids, (0..2_000).collect::<Vec<_>>());

    // With no retention the replaced files go (they were committed, so no
    // writer holds them); the in-flight file stays.
    let report = table.vacuum(0, false).await.unwrap();
    assert_eq!((report.files_deleted, report.files_within_lease), (2, 1));
    assert_eq!(data_objects(&store, &root).await, 2);
    let old = table.at_version(two_files.version).await.unwrap();
    let err = table.scan(&old, None, &[]).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "58030", "{}", err.message());

    let done = in_flight.commit("append").await.unwrap();
    let mut want: Vec<i64> = (0..2_000).collect();
    want.extend(5_000..5_500);
    assert_eq!(all_ids(&table, &done.snapshot).await, want);
}

async fn a_writer_racing_vacuum_loses_nothing(store: Arc<dyn ObjectStore>, root: Path) {
    const COMMITS: i64 = 15;
    let table = create(store.clone(), root.clone()).await;
    let writer = {
        let table = LakeTable::new(store.clone(), root.clone());
        tokio::spawn(async move {
            let mut snapshot = table.latest().await.unwrap();
            for k in 0..COMMITS {
                let mut write = table.begin_at(snapshot);
                write.append(&[ids(k * 100..(k + 1) * 100)]).await.unwrap();
                // Let the vacuum run between writing the file and committing it.
                tokio::task::yield_now().await;
                snapshot = write.commit("append").await.unwrap().snapshot;
            }
        })
    };
    let vacuum = {
        let table = LakeTable::new(store, root);
        tokio::spawn(async move {
            let mut passes = 0;
            loop {
                table.vacuum(0, false).await.unwrap();
                passes += 1;
                if table.latest().await.unwrap().version == COMMITS as u64 {
                    return passes;
                }
                assert!(passes < 100_000, "the writer stopped committing");
            }
        })
    };
    writer.await.unwrap();
    assert!(vacuum.await.unwrap() >= 1);
    let latest = table.latest().await.unwrap();
    assert_eq!(
        all_ids(&table, &latest).await,
        (0..COMMITS * 100).collect::<Vec<_>>()
    );
}

async fn a_commit_refuses_a_file_older_than_the_write_lease(
    store: Arc<dyn ObjectStore>,
    root: Path,
) {
    let table = create(store, root).await;
    let base = table.latest().await.unwrap();
    let stale = DataFile {
        path: format!("data/{:013}-{:032x}.zyr", now_ms() - 2 * HOUR_MS, 9u128),
        rows: 1,
        bytes: 10,
        stats: Default::default(),
        deleted: Default::default(),
        inline: None,
    };
    let err = table
        .commit(&base, "append", vec![Action::Add(stale)])
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().code(), "40001", "{}", err.message());
    assert!(err.message().contains("write lease"), "{}", err.message());
    assert_eq!(
        table.latest().await.unwrap().version,
        0,
        "nothing committed"
    );
}
