//! The store's promises: durability across reopen, snapshot isolation,
//! conflicts, savepoints, checkpoints, garbage collection and limits.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use futures::executor::block_on;
use zyron_common::SqlState;
use zyron_heap::btree;
use zyron_heap::catalog::{DEFAULT_SCHEMA, TableDef};
use zyron_heap::page::PAGE_SLOTS;
use zyron_heap::table::{GcStats, HeapTable};
use zyron_heap::{Durability, Store, StoreOptions, Transaction};
use zyron_txn::Isolation;
use zyron_wal::WalOptions;

fn options(dir: &std::path::Path) -> StoreOptions {
    StoreOptions {
        dir: dir.to_path_buf(),
        wal: WalOptions {
            segment_bytes: 512 << 10,
            max_buffer_bytes: 64 << 10,
            max_record_bytes: 256 << 10,
            ..WalOptions::default()
        },
        memory_budget_bytes: 256 << 20,
    }
}

fn open(dir: &std::path::Path) -> Arc<Store> {
    Store::open(options(dir)).unwrap().0
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]))
}

fn def(name: &str, primary_key: bool) -> TableDef {
    TableDef {
        id: 0,
        schema: DEFAULT_SCHEMA.into(),
        name: name.into(),
        columns: TableDef::columns_from(&schema()),
        primary_key: if primary_key { vec![0] } else { vec![] },
        checks: vec![],
        fillfactor: None,
    }
}

fn batch(ids: impl IntoIterator<Item = i64>, value: &str) -> RecordBatch {
    let ids: Vec<i64> = ids.into_iter().collect();
    let values: Vec<String> = ids.iter().map(|i| format!("{value}{i}")).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(values)),
        ],
    )
    .unwrap()
}

/// Every visible `(id, v)` of `table`, sorted.
fn contents(txn: &Transaction, table: &Arc<HeapTable>) -> Vec<(i64, String)> {
    let mut rows = Vec::new();
    for page in 0..table.page_count() {
        let (_, batch) = table.scan_page(&txn.snapshot(), page, None).unwrap();
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let values = batch.column(1).as_string::<i32>();
        for r in 0..batch.num_rows() {
            rows.push((ids.value(r), values.value(r).to_owned()));
        }
    }
    rows.sort();
    rows
}

fn read(store: &Arc<Store>, name: &str) -> Vec<(i64, String)> {
    let txn = store.begin(Isolation::ReadCommitted);
    let table = txn.table(DEFAULT_SCHEMA, name).expect("table exists");
    contents(&txn, &table)
}

fn slot_of(table: &Arc<HeapTable>, id: i64) -> u64 {
    let key = table.key_codec().unwrap().key(&batch([id], ""), 0);
    table.slot_for_key(&key).expect("key present")
}

/// Sets `v` of row `id` to `value`.
fn set(
    txn: &mut Transaction,
    table: &Arc<HeapTable>,
    id: i64,
    value: &str,
) -> zyron_common::Result<bool> {
    let slot = slot_of(table, id);
    let codec = table.codec().clone();
    let row = codec.encode(&batch([id], value)).unwrap().pop().unwrap();
    block_on(txn.update(table, slot, |_| Ok(Some(row.clone()))))
}

fn create_with_rows(store: &Arc<Store>, name: &str, ids: std::ops::Range<i64>) -> Arc<HeapTable> {
    let mut txn = store.begin(Isolation::ReadCommitted);
    let table = txn.create_table(def(name, true)).unwrap();
    block_on(txn.insert(&table, &batch(ids, "v"))).unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    store.table(DEFAULT_SCHEMA, name).unwrap()
}

#[test]
fn committed_rows_survive_reopen_and_uncommitted_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let table = create_with_rows(&store, "t", 0..1000);
        let mut txn = store.begin(Isolation::ReadCommitted);
        set(&mut txn, &table, 5, "five").unwrap();
        let slot = slot_of(&table, 6);
        assert!(block_on(txn.delete(&table, slot, |_| Ok(true))).unwrap());
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        let mut open_txn = store.begin(Isolation::ReadCommitted);
        block_on(open_txn.insert(&table, &batch(5000..5010, "never"))).unwrap();
        std::mem::forget(open_txn); // neither committed nor rolled back: as if the process died
    }
    let store = open(dir.path());
    let rows = read(&store, "t");
    assert_eq!(rows.len(), 999);
    assert!(rows.contains(&(5, "five5".into())));
    assert!(!rows.iter().any(|(id, _)| *id == 6 || *id >= 5000));
}

#[test]
fn snapshots_are_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..10);
    let mut repeatable = store.begin(Isolation::RepeatableRead);
    let mut committed = store.begin(Isolation::ReadCommitted);
    let mut writer = store.begin(Isolation::ReadCommitted);
    set(&mut writer, &table, 1, "new").unwrap();
    block_on(writer.insert(&table, &batch([100], "x"))).unwrap();
    // Uncommitted: nobody else sees it; the writer does.
    assert_eq!(contents(&committed, &table).len(), 10);
    assert_eq!(contents(&writer, &table).len(), 11);
    block_on(writer.commit(Durability::Synchronous)).unwrap();
    repeatable.begin_statement();
    committed.begin_statement();
    assert_eq!(
        contents(&repeatable, &table).len(),
        10,
        "REPEATABLE READ keeps its snapshot"
    );
    assert!(contents(&repeatable, &table).contains(&(1, "v1".into())));
    assert_eq!(
        contents(&committed, &table).len(),
        11,
        "READ COMMITTED sees the commit at the next statement"
    );
    // Writing a row changed after the snapshot is the SI conflict.
    let err = set(&mut repeatable, &table, 1, "mine").unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE);
}

#[test]
fn a_second_writer_waits_then_fails_or_follows_by_isolation() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..10);
    for isolation in [Isolation::RepeatableRead, Isolation::ReadCommitted] {
        let mut first = store.begin(Isolation::ReadCommitted);
        set(&mut first, &table, 3, "first").unwrap();
        let (store2, table2) = (store.clone(), table.clone());
        let (id_tx, id_rx) = std::sync::mpsc::channel();
        let second = std::thread::spawn(move || {
            let mut txn = store2.begin(isolation);
            id_tx.send(txn.id()).unwrap();
            let slot = slot_of(&table2, 3);
            let codec = table2.codec().clone();
            // Appends "+second" to whatever the newest version says.
            let result = block_on(txn.update(&table2, slot, |current| {
                let row = codec.decode(&[current], None).unwrap();
                let v = row.column(1).as_string::<i32>().value(0).to_owned();
                Ok(Some(
                    codec
                        .encode(&batch([3], &format!("{v}+second")))
                        .unwrap()
                        .pop()
                        .unwrap(),
                ))
            }));
            let outcome = result.map(|_| ());
            if outcome.is_ok() {
                block_on(txn.commit(Durability::Synchronous)).unwrap();
            }
            outcome
        });
        // The second writer blocks on the first: it cannot finish while the row is held.
        let second_id = id_rx.recv().unwrap();
        while !store.txns().is_waiting(second_id) {
            std::thread::yield_now();
        }
        assert!(
            !second.is_finished(),
            "the second writer waits for the first"
        );
        block_on(first.commit(Durability::Synchronous)).unwrap();
        let outcome = second.join().unwrap();
        match isolation {
            Isolation::RepeatableRead => assert_eq!(
                outcome.unwrap_err().sqlstate(),
                SqlState::SERIALIZATION_FAILURE
            ),
            Isolation::ReadCommitted => {
                outcome.unwrap();
                assert!(
                    read(&store, "t").contains(&(3, "first3+second3".into())),
                    "{:?}",
                    read(&store, "t")
                );
            }
        }
    }
}

#[test]
fn deadlocks_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..10);
    let mut a = store.begin(Isolation::ReadCommitted);
    let mut b = store.begin(Isolation::ReadCommitted);
    set(&mut a, &table, 1, "a").unwrap();
    set(&mut b, &table, 2, "b").unwrap();
    let table2 = table.clone();
    let a_id = a.id();
    let waiter = std::thread::spawn(move || {
        let result = set(&mut a, &table2, 2, "a");
        (a, result)
    });
    while !store.txns().is_waiting(a_id) {
        std::thread::yield_now();
    }
    let err = set(&mut b, &table, 1, "b").unwrap_err();
    assert_eq!(err.sqlstate().code(), "40P01");
    b.rollback();
    let (a, result) = waiter.join().unwrap();
    assert!(result.unwrap());
    block_on(a.commit(Durability::Synchronous)).unwrap();
    assert!(read(&store, "t").contains(&(2, "a2".into())));
}

#[test]
fn primary_keys_are_unique_among_live_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..10);
    let mut txn = store.begin(Isolation::ReadCommitted);
    let err = block_on(txn.insert(&table, &batch([4], "dup"))).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::UNIQUE_VIOLATION);
    assert!(err.message().contains("t_pkey"));
    // Delete then insert the same key in one transaction: allowed.
    let slot = slot_of(&table, 4);
    assert!(block_on(txn.delete(&table, slot, |_| Ok(true))).unwrap());
    block_on(txn.insert(&table, &batch([4], "again"))).unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    assert!(read(&store, "t").contains(&(4, "again4".into())));
}

#[test]
fn savepoints_undo_exactly_what_followed_them_even_after_spilling() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let table = create_with_rows(&store, "t", 0..10);
        let mut txn = store.begin(Isolation::ReadCommitted);
        block_on(txn.insert(&table, &batch(100..110, "kept"))).unwrap();
        txn.savepoint("s1");
        // About 2 MiB of rows: the transaction spills to the WAL before committing.
        let big = "x".repeat(1000);
        block_on(txn.insert(&table, &batch(1000..3000, &big))).unwrap();
        set(&mut txn, &table, 1, "changed").unwrap();
        txn.rollback_to_savepoint("s1").unwrap();
        txn.savepoint("s2");
        // The keys the rollback undid are free again (and these rows go with s2's release
        // staying: they are among the 25 below).
        block_on(txn.insert(&table, &batch(1000..1003, "again"))).unwrap();
        block_on(txn.insert(&table, &batch(200..202, "after"))).unwrap();
        txn.release_savepoint("s2").unwrap();
        assert_eq!(
            txn.rollback_to_savepoint("s2").unwrap_err().sqlstate(),
            SqlState::INVALID_SAVEPOINT_SPECIFICATION
        );
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        let rows = read(&store, "t");
        assert_eq!(rows.len(), 25);
        assert!(rows.contains(&(1, "v1".into())));
    }
    let rows = read(&open(dir.path()), "t");
    assert_eq!(rows.len(), 25, "replay honours the logged rollback");
    assert_eq!(rows.iter().filter(|(id, _)| *id >= 1000).count(), 3);
}

/// A bulk insert is kept as runs of slots, not a write per row: rolling one back still
/// removes every row and frees every key, and committing one stamps every row.
#[test]
fn a_rolled_back_bulk_insert_frees_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..10);
    for _ in 0..2 {
        let mut txn = store.begin(Isolation::ReadCommitted);
        block_on(txn.insert(&table, &batch(10..5000, "gone"))).unwrap();
        block_on(txn.insert(&table, &batch(6000..6100, "gone"))).unwrap();
        txn.rollback();
        assert_eq!(read(&store, "t").len(), 10);
    }
    let mut txn = store.begin(Isolation::ReadCommitted);
    block_on(txn.insert(&table, &batch(10..5000, "kept"))).unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    let rows = read(&store, "t");
    assert_eq!(rows.len(), 5000);
    assert!(rows.contains(&(4999, "kept4999".into())));
}

#[test]
fn checkpoints_bound_replay_and_keep_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let expected;
    {
        let store = open(dir.path());
        let table = create_with_rows(&store, "t", 0..5000);
        for round in 0..40 {
            let mut txn = store.begin(Isolation::ReadCommitted);
            for id in 0..200 {
                set(
                    &mut txn,
                    &table,
                    id,
                    &format!("r{round}-{}", "x".repeat(100)),
                )
                .unwrap();
            }
            block_on(txn.commit(Durability::Synchronous)).unwrap();
        }
        let stats = store.checkpoint().unwrap();
        assert_eq!(stats.rows, 5000);
        assert!(stats.segments_released > 0, "{stats:?}");
        let mut txn = store.begin(Isolation::ReadCommitted);
        block_on(txn.insert(&table, &batch(9000..9100, "after"))).unwrap();
        let slot = slot_of(&table, 4999);
        block_on(txn.delete(&table, slot, |_| Ok(true))).unwrap();
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        let mut dropped = store.begin(Isolation::ReadCommitted);
        let other = dropped.create_table(def("other", false)).unwrap();
        block_on(dropped.insert(&other, &batch(0..3, "o"))).unwrap();
        block_on(dropped.commit(Durability::Synchronous)).unwrap();
        expected = read(&store, "t");
    }
    let (store, report) = Store::open(options(dir.path())).unwrap();
    assert_eq!(report.image_rows, 5000);
    assert!(report.replayed_commits <= 3, "{report:?}");
    assert_eq!(read(&store, "t"), expected);
    assert_eq!(read(&store, "other").len(), 3);
}

#[test]
fn vacuum_reclaims_versions_no_snapshot_needs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..100);
    let old_reader = store.begin(Isolation::RepeatableRead);
    for round in 0..5 {
        let mut txn = store.begin(Isolation::ReadCommitted);
        for id in 0..100 {
            set(&mut txn, &table, id, &format!("{round}-")).unwrap();
        }
        block_on(txn.commit(Durability::Synchronous)).unwrap();
    }
    let pinned = store.vacuum();
    assert_eq!(pinned.versions_examined, 600);
    assert!(
        pinned.versions_removed < 500,
        "the old snapshot still needs its versions: {pinned:?}"
    );
    assert_eq!(contents(&old_reader, &table).len(), 100);
    assert!(contents(&old_reader, &table).contains(&(7, "v7".into())));
    let before = store.memory().used_bytes();
    drop(old_reader);
    let freed = store.vacuum();
    assert_eq!(freed.versions_removed + pinned.versions_removed, 500);
    assert!(store.memory().used_bytes() < before);
    assert_eq!(read(&store, "t").len(), 100);
}

/// Rows whose every version is dead (deleted, updated first) give back their slot and key.
#[test]
fn vacuum_frees_the_slots_and_keys_of_deleted_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..100);
    let mut txn = store.begin(Isolation::ReadCommitted);
    for id in 0..10 {
        set(&mut txn, &table, id, "x").unwrap();
    }
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    let deleted: Vec<u64> = (0..20).map(|id| slot_of(&table, id)).collect();
    let mut txn = store.begin(Isolation::ReadCommitted);
    for slot in &deleted {
        assert!(block_on(txn.delete(&table, *slot, |_| Ok(true))).unwrap());
    }
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    let before = store.memory().used_bytes();
    let stats = store.vacuum();
    assert_eq!(stats.versions_examined, 110);
    assert_eq!(stats.versions_removed, 30, "{stats:?}");
    assert_eq!(stats.slots_freed, 20, "{stats:?}");
    assert!(store.memory().used_bytes() < before);
    let key = |id: i64| table.key_codec().unwrap().key(&batch([id], ""), 0);
    assert!((0..20).all(|id| table.slot_for_key(&key(id)).is_none()));
    assert!((20..100).all(|id| table.slot_for_key(&key(id)).is_some()));
    // The keys are free again, and new rows reuse the freed slots.
    let mut txn = store.begin(Isolation::ReadCommitted);
    block_on(txn.insert(&table, &batch(0..20, "back"))).unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    let mut reused: Vec<u64> = (0..20).map(|id| slot_of(&table, id)).collect();
    reused.sort_unstable();
    let mut freed = deleted.clone();
    freed.sort_unstable();
    assert_eq!(reused, freed);
    let rows = read(&store, "t");
    assert_eq!(rows.len(), 100);
    assert!(rows.contains(&(3, "back3".into())) && rows.contains(&(50, "v50".into())));
}

/// A pass looks only at slots where a version ended since the last pass: once all is
/// reclaimed a pass looks at nothing, and an update or a delete brings back its slot alone.
#[test]
fn vacuum_looks_only_at_slots_where_versions_ended() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let rows = 3 * PAGE_SLOTS as i64;
    let table = create_with_rows(&store, "t", 0..rows);
    assert_eq!(store.vacuum().versions_removed, 0);
    assert_eq!(store.vacuum(), GcStats::default(), "inserts end no version");

    let mut txn = store.begin(Isolation::ReadCommitted);
    set(&mut txn, &table, 5, "x").unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    let updated = store.vacuum();
    assert_eq!(updated.versions_removed, 1);
    assert_eq!(
        updated.versions_examined, 2,
        "the updated row's two versions"
    );
    assert_eq!(store.vacuum(), GcStats::default());

    let mut txn = store.begin(Isolation::ReadCommitted);
    let slot = slot_of(&table, rows - 1);
    assert!(block_on(txn.delete(&table, slot, |_| Ok(true))).unwrap());
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    let deleted = store.vacuum();
    assert_eq!((deleted.versions_removed, deleted.slots_freed), (1, 1));
    assert_eq!(deleted.versions_examined, 1);
    assert_eq!(read(&store, "t").len(), rows as usize - 1);
    assert!(read(&store, "t").contains(&(5, "x5".into())));
}

#[test]
fn ddl_is_transactional() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut creator = store.begin(Isolation::ReadCommitted);
    creator.create_table(def("fresh", true)).unwrap();
    let other = store.begin(Isolation::ReadCommitted);
    assert!(other.table(DEFAULT_SCHEMA, "fresh").is_none());
    let mut rival = store.begin(Isolation::ReadCommitted);
    assert_eq!(
        rival
            .create_table(def("fresh", true))
            .unwrap_err()
            .sqlstate(),
        SqlState::DUPLICATE_TABLE
    );
    creator.rollback();
    assert!(store.table(DEFAULT_SCHEMA, "fresh").is_none());
    rival.create_table(def("fresh", false)).unwrap();
    block_on(rival.commit(Durability::Synchronous)).unwrap();
    assert!(store.table(DEFAULT_SCHEMA, "fresh").is_some());

    // ADD PRIMARY KEY checks the rows already there.
    let table = store.table(DEFAULT_SCHEMA, "fresh").unwrap();
    let mut loader = store.begin(Isolation::ReadCommitted);
    block_on(loader.insert(&table, &batch([1, 2, 2], "x"))).unwrap();
    let err = loader
        .redefine_table(
            &table,
            TableDef {
                primary_key: vec![0],
                ..table.def().clone()
            },
        )
        .unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::UNIQUE_VIOLATION);
    loader.rollback();
    let mut txn = store.begin(Isolation::ReadCommitted);
    block_on(txn.insert(&table, &batch([1, 2, 3], "x"))).unwrap();
    let keyed = txn
        .redefine_table(
            &table,
            TableDef {
                primary_key: vec![0],
                ..table.def().clone()
            },
        )
        .unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    assert!(keyed.key_codec().is_some());
    let mut txn = store.begin(Isolation::ReadCommitted);
    let keyed = txn.table(DEFAULT_SCHEMA, "fresh").unwrap();
    assert_eq!(
        block_on(txn.insert(&keyed, &batch([3], "dup")))
            .unwrap_err()
            .sqlstate(),
        SqlState::UNIQUE_VIOLATION
    );
    txn.drop_table(&keyed).unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    assert!(store.table(DEFAULT_SCHEMA, "fresh").is_none());
}

#[test]
fn the_memory_budget_is_enforced_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreOptions {
        memory_budget_bytes: 64 << 10,
        ..options(dir.path())
    })
    .unwrap()
    .0;
    let mut txn = store.begin(Isolation::ReadCommitted);
    let table = txn.create_table(def("t", false)).unwrap();
    let err = block_on(txn.insert(&table, &batch(0..10_000, "row"))).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::OUT_OF_MEMORY);
    assert!(err.message().contains("memory budget"), "{err}");
    txn.rollback();
    assert_eq!(
        store.memory().used_bytes(),
        0,
        "a rolled-back transaction gives its memory back"
    );
}

/// The primary-key index counts against the budget what its tree allocates: charged as keys
/// go in, given back as a rolled-back insert or VACUUM removes them (merging nodes) and when
/// the table goes.
#[test]
fn the_memory_budget_counts_the_primary_key_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let used = || store.memory().used_bytes();
    let create = |name: &str, keyed: bool| {
        let mut txn = store.begin(Isolation::ReadCommitted);
        txn.create_table(def(name, keyed)).unwrap();
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        store.table(DEFAULT_SCHEMA, name).unwrap()
    };
    let (plain, keyed) = (create("plain", false), create("keyed", true));
    let index = || keyed.index_allocated_bytes() as i64;
    // A BIGINT key is a marker byte and eight value bytes.
    let key_bytes = btree::entry_bytes(9);
    let inserting = |table: &Arc<HeapTable>| {
        let before = used();
        let mut txn = store.begin(Isolation::ReadCommitted);
        block_on(txn.insert(table, &batch(0..1_000, "v"))).unwrap();
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        used() as i64 - before as i64
    };
    let index_cost = inserting(&keyed) - inserting(&plain);
    assert_eq!(index_cost, index());
    // The estimate the budget checks an insert against is close to what the tree takes.
    let estimate = 1_000 * key_bytes as i64;
    assert!(
        (estimate / 2..=estimate).contains(&index_cost),
        "{index_cost} bytes for 1,000 keys"
    );

    let (before, index_before) = (used() as i64, index());
    let mut txn = store.begin(Isolation::ReadCommitted);
    block_on(txn.insert(&keyed, &batch(1_000..1_500, "v"))).unwrap();
    assert!(index() - index_before > 500 * 16, "the keys are counted");
    assert!(
        used() as i64 - before > index() - index_before,
        "and the rows"
    );
    txn.rollback();
    assert_eq!(used() as i64 - before, index() - index_before);
    assert!(
        index() - index_before < 100 * key_bytes as i64,
        "an undone insert gives back its keys' memory: {} bytes stay",
        index() - index_before
    );

    // The same rows sit in the same slots of both tables: the first 100 go from each.
    let vacuuming = |table: &Arc<HeapTable>| {
        let mut txn = store.begin(Isolation::ReadCommitted);
        for slot in 0..100 {
            assert!(block_on(txn.delete(table, slot, |_| Ok(true))).unwrap());
        }
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        let before = used();
        assert_eq!(store.vacuum().slots_freed, 100);
        before as i64 - used() as i64
    };
    let index_before = index();
    let given_back = vacuuming(&keyed) - vacuuming(&plain);
    assert_eq!(given_back, index_before - index());
    assert!(
        given_back >= 100 * 16,
        "at least the keys' own memory comes back: {given_back}"
    );

    let mut txn = store.begin(Isolation::ReadCommitted);
    txn.drop_table(&plain).unwrap();
    txn.drop_table(&keyed).unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    drop((plain, keyed));
    store.checkpoint().unwrap();
    assert_eq!(used(), 0, "dropped tables give back rows and indexes");
}

/// Replay loads what committed even past a (lowered) budget: rows and a primary key added by
/// ALTER TABLE alike, so the server still starts.
#[test]
fn replay_loads_a_redefined_table_past_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let mut txn = store.begin(Isolation::ReadCommitted);
        let table = txn.create_table(def("t", false)).unwrap();
        block_on(txn.insert(&table, &batch(0..1_000, "v"))).unwrap();
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        let mut txn = store.begin(Isolation::ReadCommitted);
        let keyed = TableDef {
            primary_key: vec![0],
            ..table.def().clone()
        };
        txn.redefine_table(&table, keyed).unwrap();
        block_on(txn.commit(Durability::Synchronous)).unwrap();
    }
    let store = Store::open(StoreOptions {
        memory_budget_bytes: 4 << 10,
        ..options(dir.path())
    })
    .unwrap()
    .0;
    assert!(store.memory().used_bytes() > 1_000 * btree::entry_bytes(9));
    let table = store.table(DEFAULT_SCHEMA, "t").unwrap();
    assert_eq!(read(&store, "t").len(), 1_000);
    assert!(
        table
            .slot_for_key(&table.key_codec().unwrap().key(&batch([7], ""), 0))
            .is_some()
    );
}

#[test]
fn nulls_in_not_null_columns_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut txn = store.begin(Isolation::ReadCommitted);
    let table = txn.create_table(def("t", false)).unwrap();
    let nullable = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("v", DataType::Utf8, true),
    ]));
    let bad = RecordBatch::try_new(
        nullable,
        vec![
            Arc::new(Int64Array::from(vec![None, Some(1)])),
            Arc::new(StringArray::from(vec![Some("a"), None])),
        ],
    )
    .unwrap();
    let err = block_on(txn.insert(&table, &bad)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::NOT_NULL_VIOLATION);
    assert!(bad.column(0).is_null(0));
}

/// Polls a commit once: it logs its record, then waits for fdatasync (`Pending`)
/// and has not yet made its changes visible.
fn start_commit<F: std::future::Future>(commit: std::pin::Pin<&mut F>) {
    let waker = futures::task::noop_waker();
    let polled = commit.poll(&mut std::task::Context::from_waker(&waker));
    assert!(
        polled.is_pending(),
        "the commit should wait for its fdatasync"
    );
}

/// A write that commits after a concurrent DROP took its timestamp must fail: its
/// record would follow the DROP in the WAL, and replay would find no table for it.
#[test]
fn a_write_ordered_after_a_concurrent_drop_fails_and_the_log_still_replays() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let table = create_with_rows(&store, "t", 0..10);
        let mut writer = store.begin(Isolation::ReadCommitted);
        block_on(writer.insert(&table, &batch(100..110, "late"))).unwrap();
        let mut dropper = store.begin(Isolation::ReadCommitted);
        dropper.drop_table(&table).unwrap();
        let drop_commit = dropper.commit(Durability::Synchronous);
        let mut drop_commit = std::pin::pin!(drop_commit);
        start_commit(drop_commit.as_mut());
        let err = block_on(writer.commit(Durability::Synchronous)).unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
        block_on(drop_commit).unwrap();
        assert!(store.table(DEFAULT_SCHEMA, "t").is_none());
    }
    let store = open(dir.path());
    assert!(store.table(DEFAULT_SCHEMA, "t").is_none());
}

#[test]
fn truncate_replaces_the_table_with_an_empty_one_transactionally() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let table = create_with_rows(&store, "t", 0..1000);

        // Rolled back, whole or to a savepoint: every row is back.
        let mut txn = store.begin(Isolation::ReadCommitted);
        txn.truncate_table(&table).unwrap();
        txn.rollback();
        assert_eq!(read(&store, "t").len(), 1000);
        let mut txn = store.begin(Isolation::ReadCommitted);
        txn.savepoint("s");
        let empty = txn.truncate_table(&table).unwrap();
        assert!(contents(&txn, &empty).is_empty());
        txn.rollback_to_savepoint("s").unwrap();
        let again = txn.table(DEFAULT_SCHEMA, "t").unwrap();
        assert!(Arc::ptr_eq(&again, &table));
        assert_eq!(contents(&txn, &again).len(), 1000);
        txn.rollback();

        // Rows written before the TRUNCATE in the same transaction go with it; keys of
        // the old rows are free again at once.
        let mut txn = store.begin(Isolation::ReadCommitted);
        block_on(txn.insert(&table, &batch(2000..2010, "gone"))).unwrap();
        let empty = txn.truncate_table(&table).unwrap();
        assert_ne!(empty.id(), table.id());
        block_on(txn.insert(&empty, &batch(5..8, "new"))).unwrap();
        let other = store.begin(Isolation::ReadCommitted);
        assert_eq!(contents(&other, &table).len(), 1000, "not committed yet");
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        let expected: Vec<(i64, String)> = (5..8).map(|i| (i, format!("new{i}"))).collect();
        assert_eq!(read(&store, "t"), expected);
        let mut dup = store.begin(Isolation::ReadCommitted);
        let current = dup.table(DEFAULT_SCHEMA, "t").unwrap();
        let err = block_on(dup.insert(&current, &batch([6], "dup"))).unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::UNIQUE_VIOLATION);
    }
    let store = open(dir.path());
    let expected: Vec<(i64, String)> = (5..8).map(|i| (i, format!("new{i}"))).collect();
    assert_eq!(read(&store, "t"), expected);
}

#[test]
fn truncate_orders_against_concurrent_writers_and_truncates() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..10);

    // A write committed before the TRUNCATE's commit is truncated with the rest,
    // as if the two had run one after the other.
    let mut early = store.begin(Isolation::ReadCommitted);
    block_on(early.insert(&table, &batch(100..105, "early"))).unwrap();
    let mut truncater = store.begin(Isolation::ReadCommitted);
    truncater.truncate_table(&table).unwrap();
    block_on(early.commit(Durability::Synchronous)).unwrap();
    block_on(truncater.commit(Durability::Synchronous)).unwrap();
    assert!(read(&store, "t").is_empty());

    // A write, or a second TRUNCATE, that would commit after it fails with 40001.
    let table = store.table(DEFAULT_SCHEMA, "t").unwrap();
    block_on(async {
        let mut seed = store.begin(Isolation::ReadCommitted);
        seed.insert(&table, &batch(0..3, "kept")).await.unwrap();
        seed.commit(Durability::Synchronous).await.unwrap();
    });
    let mut late = store.begin(Isolation::ReadCommitted);
    block_on(late.insert(&table, &batch(200..205, "late"))).unwrap();
    let mut rival = store.begin(Isolation::ReadCommitted);
    let mut truncater = store.begin(Isolation::ReadCommitted);
    truncater.truncate_table(&table).unwrap();
    let err = rival.truncate_table(&table).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
    rival.rollback();
    let commit = truncater.commit(Durability::Synchronous);
    let mut commit = std::pin::pin!(commit);
    start_commit(commit.as_mut());
    let err = block_on(late.commit(Durability::Synchronous)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
    block_on(commit).unwrap();
    assert!(read(&store, "t").is_empty());
    let mut after = store.begin(Isolation::ReadCommitted);
    let current = after.table(DEFAULT_SCHEMA, "t").unwrap();
    after.truncate_table(&current).unwrap();
    block_on(after.commit(Durability::Synchronous)).unwrap();
}

/// ALTER TABLE ... ADD PRIMARY KEY builds a new version of the table from the rows
/// there when it runs: a write committed meanwhile would be missing from it, so the
/// ALTER fails with 40001; a write to the old version committed after the ALTER fails.
#[test]
fn a_redefinition_fails_rather_than_lose_a_write_committed_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut creator = store.begin(Isolation::ReadCommitted);
    let table = creator.create_table(def("t", false)).unwrap();
    block_on(creator.insert(&table, &batch(0..10, "v"))).unwrap();
    block_on(creator.commit(Durability::Synchronous)).unwrap();
    let keyed = |t: &Arc<HeapTable>| TableDef {
        primary_key: vec![0],
        ..t.def().clone()
    };

    let mut alter = store.begin(Isolation::ReadCommitted);
    alter.redefine_table(&table, keyed(&table)).unwrap();
    let mut writer = store.begin(Isolation::ReadCommitted);
    let many = PAGE_SLOTS as i64 * 3;
    block_on(writer.insert(&table, &batch(10..10 + many, "meanwhile"))).unwrap();
    block_on(writer.commit(Durability::Synchronous)).unwrap();
    let err = block_on(alter.commit(Durability::Synchronous)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
    assert_eq!(read(&store, "t").len(), 10 + many as usize);

    let mut late = store.begin(Isolation::ReadCommitted);
    block_on(late.insert(&table, &batch([-1], "late"))).unwrap();
    let mut alter = store.begin(Isolation::ReadCommitted);
    alter.redefine_table(&table, keyed(&table)).unwrap();
    block_on(alter.commit(Durability::Synchronous)).unwrap();
    let err = block_on(late.commit(Durability::Synchronous)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
    assert_eq!(read(&store, "t").len(), 10 + many as usize);
    assert!(
        store
            .table(DEFAULT_SCHEMA, "t")
            .unwrap()
            .key_codec()
            .is_some()
    );
}

/// A truncated table's memory is back when the TRUNCATE commits (or, if a snapshot
/// still needed the old table then, at the next VACUUM, which the maintenance
/// thread runs every few seconds), not only at the next checkpoint: a reload after
/// a TRUNCATE fits in the budget the first load filled.
#[test]
fn a_truncated_tables_memory_is_back_when_the_truncate_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreOptions {
        memory_budget_bytes: 4 << 20,
        ..options(dir.path())
    })
    .unwrap()
    .0;
    let load = |store: &Arc<Store>| {
        let mut txn = store.begin(Isolation::ReadCommitted);
        let table = txn.table(DEFAULT_SCHEMA, "t").unwrap();
        block_on(txn.insert(&table, &batch(0..20_000, "row"))).unwrap();
        block_on(txn.commit(Durability::Synchronous)).unwrap();
    };
    let mut txn = store.begin(Isolation::ReadCommitted);
    txn.create_table(def("t", true)).unwrap();
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    load(&store);
    let loaded = store.memory().used_bytes();
    assert!(
        loaded > 2 << 20,
        "the load fills most of the budget: {loaded}"
    );

    let mut txn = store.begin(Isolation::ReadCommitted);
    let table = txn.table(DEFAULT_SCHEMA, "t").unwrap();
    txn.truncate_table(&table).unwrap();
    drop(table);
    block_on(txn.commit(Durability::Synchronous)).unwrap();
    let after = store.memory().used_bytes();
    assert!(after < loaded / 20, "{after} bytes still held of {loaded}");
    load(&store);
    assert_eq!(read(&store, "t").len(), 20_000);
}

/// DDL races found in review: each loser fails with 40001 (or 42P07), none wins
/// over a version of the table it never saw.
#[test]
fn ddl_races_fail_rather_than_replace_a_version_they_never_saw() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let keyed = |t: &Arc<HeapTable>| TableDef {
        primary_key: vec![0],
        ..t.def().clone()
    };
    let plain = |name: &str| {
        let mut txn = store.begin(Isolation::ReadCommitted);
        let table = txn.create_table(def(name, false)).unwrap();
        block_on(txn.insert(&table, &batch(0..10, "v"))).unwrap();
        block_on(txn.commit(Durability::Synchronous)).unwrap();
        table
    };

    // Two ALTERs copy the table before and after a write commits: the second to
    // commit loses, though the counter it saw matches the first ALTER's fresh one.
    let table = plain("a");
    let mut early = store.begin(Isolation::ReadCommitted);
    early.redefine_table(&table, keyed(&table)).unwrap();
    let mut writer = store.begin(Isolation::ReadCommitted);
    block_on(writer.insert(&table, &batch(10..10 + PAGE_SLOTS as i64 * 2, "w"))).unwrap();
    block_on(writer.commit(Durability::Synchronous)).unwrap();
    let mut late = store.begin(Isolation::ReadCommitted);
    late.redefine_table(&table, keyed(&table)).unwrap();
    block_on(late.commit(Durability::Synchronous)).unwrap();
    let err = block_on(early.commit(Durability::Synchronous)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
    assert_eq!(read(&store, "a").len(), 10 + PAGE_SLOTS * 2);

    // A TRUNCATE begun before an ALTER committed would put back the old definition.
    let table = plain("b");
    let mut truncater = store.begin(Isolation::ReadCommitted);
    truncater.truncate_table(&table).unwrap();
    let mut alter = store.begin(Isolation::ReadCommitted);
    alter.redefine_table(&table, keyed(&table)).unwrap();
    block_on(alter.commit(Durability::Synchronous)).unwrap();
    let err = block_on(truncater.commit(Durability::Synchronous)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
    let b = store.table(DEFAULT_SCHEMA, "b").unwrap();
    assert!(b.key_codec().is_some(), "the ALTER's primary key stays");
    assert_eq!(read(&store, "b").len(), 10);

    // Rolling back a TRUNCATE to a savepoint keeps the name of a table created before it.
    let mut creator = store.begin(Isolation::ReadCommitted);
    let created = creator.create_table(def("c", false)).unwrap();
    creator.savepoint("s");
    creator.truncate_table(&created).unwrap();
    creator.rollback_to_savepoint("s").unwrap();
    let mut rival = store.begin(Isolation::ReadCommitted);
    let err = rival.create_table(def("c", false)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::DUPLICATE_TABLE);
    rival.rollback();
    block_on(creator.commit(Durability::Synchronous)).unwrap();
}

/// A transaction still writing to a truncated table keeps it from being forgotten:
/// its uncommitted rows' memory goes back once, through its own rollback.
#[test]
fn vacuum_keeps_a_dropped_table_that_a_transaction_still_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let table = create_with_rows(&store, "t", 0..10);
    let baseline = store.memory().used_bytes();
    let mut writer = store.begin(Isolation::ReadCommitted);
    block_on(writer.insert(&table, &batch(100..5000, "open"))).unwrap();
    let mut truncater = store.begin(Isolation::ReadCommitted);
    truncater.truncate_table(&table).unwrap();
    block_on(truncater.commit(Durability::Synchronous)).unwrap();
    writer.begin_statement(); // a new snapshot: it no longer holds the GC horizon back
    store.vacuum();
    let err = block_on(writer.commit(Durability::Synchronous)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::SERIALIZATION_FAILURE, "{err}");
    drop(table);
    store.vacuum();
    let used = store.memory().used_bytes();
    assert!(
        used < baseline,
        "{used} bytes in use, {baseline} before: counted once"
    );
}
