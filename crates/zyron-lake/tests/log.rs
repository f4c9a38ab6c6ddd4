//! The lake log through object_store, each scenario on the local filesystem
//! and on S3 (a SeaweedFS server started for the test): concurrent
//! writers lose no commit, real conflicts fail with 40001, checkpoints bound
//! what opening reads, time travel by version and by time.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use zyron_lake::{Action, DataFile, LakeTable, RemovedFile, Snapshot, TableMetadata};

mod common;
use common::*;

on_local_disk_and_s3!(
    concurrent_appenders_lose_no_commit,
    removing_the_same_file_twice_is_a_conflict,
    opening_reads_one_checkpoint_plus_the_tail,
    time_travel_by_version_and_by_time,
    a_damaged_entry_is_an_error_not_a_panic
);

fn metadata(checkpoint_interval: u64) -> TableMetadata {
    TableMetadata {
        schema: serde_json::json!({"columns": [{"name": "id", "type": "int64"}]}),
        checkpoint_interval,
        properties: BTreeMap::new(),
    }
}

fn file(path: &str, rows: u64) -> DataFile {
    DataFile {
        path: path.to_owned(),
        rows,
        bytes: rows * 8,
        stats: BTreeMap::new(),
        deleted: Default::default(),
        inline: None,
    }
}

fn add(path: &str, rows: u64) -> Vec<Action> {
    vec![Action::Add(file(path, rows))]
}

async fn concurrent_appenders_lose_no_commit(store: Arc<dyn ObjectStore>, root: Path) {
    const WRITERS: usize = 8;
    const COMMITS: usize = 200;
    LakeTable::create(store.clone(), root.clone(), metadata(50))
        .await
        .unwrap();
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        // Each writer has its own handle, as separate processes would.
        let table = LakeTable::new(store.clone(), root.clone());
        writers.push(tokio::spawn(async move {
            let mut retries = 0;
            let mut snapshot = table.latest().await.unwrap();
            for seq in 0..COMMITS {
                let path = format!("data/w{writer}-{seq}.zyr");
                let done = table
                    .commit(&snapshot, "append", add(&path, 1 + seq as u64))
                    .await
                    .unwrap();
                retries += done.attempts - 1;
                snapshot = done.snapshot;
            }
            retries
        }));
    }
    let mut retries = 0;
    for writer in writers {
        retries += writer.await.unwrap();
    }
    let table = LakeTable::new(store, root);
    let latest = table.latest().await.unwrap();
    assert_eq!(latest.version, (WRITERS * COMMITS) as u64);
    assert_eq!(
        latest.files.len(),
        WRITERS * COMMITS,
        "every commit present"
    );
    for writer in 0..WRITERS {
        for seq in 0..COMMITS {
            let path = format!("data/w{writer}-{seq}.zyr");
            assert_eq!(latest.files[&path].rows, 1 + seq as u64, "{path} once");
        }
    }
    // The races were real: with 8 writers on one log some attempts lost.
    assert!(retries > 0, "no writer ever lost a race");
    // Every version exists exactly once and times increase with versions.
    let mut last_time = i64::MIN;
    for version in 0..=latest.version {
        let entry = table.entry(version).await.unwrap();
        assert!(entry.timestamp_ms > last_time, "version {version}");
        last_time = entry.timestamp_ms;
    }
    for version in [1, 777, 1599] {
        let snapshot = table.at_version(version).await.unwrap();
        assert_eq!(snapshot.files.len() as u64, version);
    }
}

async fn removing_the_same_file_twice_is_a_conflict(store: Arc<dyn ObjectStore>, root: Path) {
    let table = LakeTable::create(store, root, metadata(10)).await.unwrap();
    let start = table.latest().await.unwrap();
    let base = table
        .commit(&start, "append", add("data/a.zyr", 10))
        .await
        .unwrap()
        .snapshot;
    let remove = || {
        vec![Action::Remove(RemovedFile {
            path: "data/a.zyr".into(),
        })]
    };
    // Two writers start from the same snapshot; the first to commit wins.
    let first = table.commit(&base, "delete", remove()).await.unwrap();
    assert_eq!(first.attempts, 1);
    let err = table.commit(&base, "delete", remove()).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "40001", "{}", err.message());
    assert!(err.message().contains("data/a.zyr"), "{}", err.message());
    // An append racing the delete is no conflict: it lands after it.
    let appended = table
        .commit(&base, "append", add("data/b.zyr", 5))
        .await
        .unwrap();
    assert_eq!(appended.attempts, 2);
    let latest = table.latest().await.unwrap();
    assert_eq!(latest.files.keys().collect::<Vec<_>>(), ["data/b.zyr"]);
    // A schema change conflicts with any concurrent commit.
    let err = table
        .commit(&base, "alter", vec![Action::Metadata(metadata(20))])
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().code(), "40001");
    // Removing a file the table does not hold is refused before any write.
    let err = table.commit(&latest, "delete", remove()).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023", "{}", err.message());
    assert_eq!(table.latest().await.unwrap().version, latest.version);
}

async fn opening_reads_one_checkpoint_plus_the_tail(store: Arc<dyn ObjectStore>, root: Path) {
    let table = LakeTable::create(store.clone(), root.clone(), metadata(100))
        .await
        .unwrap();
    let mut snapshot = table.latest().await.unwrap();
    let mut checkpoints = Vec::new();
    for i in 0..250 {
        let done = table
            .commit(&snapshot, "append", add(&format!("data/{i}.zyr"), 1))
            .await
            .unwrap();
        if done.checkpointed {
            checkpoints.push(done.version);
        }
        snapshot = done.snapshot;
    }
    assert_eq!(checkpoints, [100, 200]);
    // Delete the entries the checkpoint covers: opening must not need them.
    for version in 1..=200u64 {
        let path = root
            .clone()
            .join("_zyron_log")
            .join(format!("{version:020}.json"));
        store.delete(&path).await.unwrap();
    }
    let latest = table.latest().await.unwrap();
    assert_eq!(latest, snapshot, "checkpoint 200 plus entries 201..250");
    assert_eq!(latest.rows(), 250);
    // Time travel before the newest checkpoint needs the entries it covers.
    assert_eq!(table.at_version(230).await.unwrap().files.len(), 230);
    let err = table.at_version(150).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "XX001", "{}", err.message());
}

async fn time_travel_by_version_and_by_time(store: Arc<dyn ObjectStore>, root: Path) {
    let table = LakeTable::create(store, root.clone(), metadata(4))
        .await
        .unwrap();
    let mut snapshots: Vec<Snapshot> = vec![table.latest().await.unwrap()];
    for i in 0..12 {
        let last = snapshots.last().unwrap();
        let done = table
            .commit(last, "append", add(&format!("data/{i}.zyr"), 10))
            .await
            .unwrap();
        snapshots.push(done.snapshot);
    }
    for expected in &snapshots {
        assert_eq!(&table.at_version(expected.version).await.unwrap(), expected);
        let by_time = table.at_timestamp(expected.timestamp_ms).await.unwrap();
        assert_eq!(by_time.version, expected.version);
    }
    // Between two commits: the earlier one.
    let between = snapshots[5].timestamp_ms;
    assert!(snapshots[6].timestamp_ms > between);
    assert_eq!(table.at_timestamp(between).await.unwrap().version, 5);
    let err = table.at_version(99).await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023");
    let err = table
        .at_timestamp(snapshots[0].timestamp_ms - 1)
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().code(), "22023");
    // Creating a table where one exists is refused.
    let err = LakeTable::create(table.store().clone(), root, metadata(4))
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().code(), "42P07");
}

async fn a_damaged_entry_is_an_error_not_a_panic(store: Arc<dyn ObjectStore>, root: Path) {
    let table = LakeTable::create(store.clone(), root.clone(), metadata(100))
        .await
        .unwrap();
    let start = table.latest().await.unwrap();
    table
        .commit(&start, "append", add("data/a.zyr", 1))
        .await
        .unwrap();
    let path = root
        .clone()
        .join("_zyron_log")
        .join("00000000000000000001.json");
    store
        .put(&path, b"{\"format\":[1,0],\"vers".to_vec().into())
        .await
        .unwrap();
    let err = table.latest().await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "XX001", "{}", err.message());
    let newer = br#"{"format":[2,0],"version":1,"timestamp_ms":1,"operation":"append",
        "read_version":0,"commit_id":"x","actions":[]}"#;
    store.put(&path, newer.to_vec().into()).await.unwrap();
    let err = table.latest().await.unwrap_err();
    assert_eq!(err.sqlstate().code(), "0A000", "{}", err.message());
}
