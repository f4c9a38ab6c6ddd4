//! A lake table: its log on an object store, opened as snapshots and
//! changed by optimistic commits.
//!
//! ```
//! # tokio_test_block_on(async {
//! use std::sync::Arc;
//! use object_store::{memory::InMemory, path::Path};
//! use zyron_lake::{Action, DataFile, LakeTable, TableMetadata};
//!
//! let store = Arc::new(InMemory::new());
//! let metadata = TableMetadata { schema: serde_json::json!({"a": "int64"}),
//!                                checkpoint_interval: 100, properties: Default::default() };
//! let table = LakeTable::create(store, Path::from("t"), metadata).await.unwrap();
//! let start = table.latest().await.unwrap();
//! let file = DataFile { path: "data/1.zyr".into(), rows: 10, bytes: 100,
//!                        stats: Default::default(), deleted: Default::default(), inline: None };
//! let done = table.commit(&start, "append", vec![Action::Add(file)]).await.unwrap();
//! assert_eq!(done.version, 1);
//! assert_eq!(table.latest().await.unwrap().rows(), 10);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     futures::executor::block_on(f)
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};
use serde::Serialize;
use serde::de::DeserializeOwned;
use zyron_common::{Result, SqlState, ZyronError};

use crate::log::{
    Action, CHECKPOINT_DIR, Checkpoint, Commit, DataFile, DeletedRows, FORMAT_MAJOR, FORMAT_MINOR,
    LOG_DIR, LastCheckpoint, TableMetadata, check_format, checkpoint_path, entry_path,
    last_checkpoint_path, version_of,
};
use crate::snapshot::{Snapshot, delete_rows_of};

/// A writer that loses the race this many times in a row gives up (with
/// 40001) rather than spin; each loss means another commit landed, so the
/// table made progress.
pub const MAX_COMMIT_ATTEMPTS: usize = 1_000;

/// Log entries fetched at once while opening a table.
const CONCURRENT_ENTRY_READS: usize = 16;

#[derive(Debug, Clone)]
pub struct LakeTable {
    store: Arc<dyn ObjectStore>,
    root: Path,
    log_root: Path,
}

/// How a commit is made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommitOptions {
    /// False for OPTIMIZE and clustering: the rows stay the same.
    pub data_change: bool,
    /// Refuse data files older than the write lease (off for a merge of a
    /// branch, whose files VACUUM keeps while the branch references them).
    pub check_write_lease: bool,
}

impl Default for CommitOptions {
    fn default() -> Self {
        CommitOptions {
            data_change: true,
            check_write_lease: true,
        }
    }
}

/// The outcome of a commit.
#[derive(Debug, Clone)]
pub struct Committed {
    pub version: u64,
    /// 1 when nobody else committed meanwhile.
    pub attempts: usize,
    /// The table right after this commit.
    pub snapshot: Snapshot,
    /// Whether this commit also wrote a checkpoint.
    pub checkpointed: bool,
}

impl LakeTable {
    /// A handle on the table at `root`; nothing is read until asked.
    pub fn new(store: Arc<dyn ObjectStore>, root: Path) -> LakeTable {
        LakeTable {
            store,
            log_root: root.clone(),
            root,
        }
    }

    /// A handle on the log at `log_root` whose data files live under
    /// `root` (a branch's).
    pub(crate) fn with_log_root(&self, log_root: Path) -> LakeTable {
        LakeTable {
            store: self.store.clone(),
            root: self.root.clone(),
            log_root,
        }
    }

    /// Creates the table: version 0 holds its metadata. Fails with 42P07 if
    /// a table already exists at `root`.
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        root: Path,
        metadata: TableMetadata,
    ) -> Result<LakeTable> {
        if metadata.checkpoint_interval == 0 {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                "checkpoint_interval must be at least 1",
            ));
        }
        let table = LakeTable::new(store, root);
        let commit = Commit {
            format: (FORMAT_MAJOR, FORMAT_MINOR),
            version: 0,
            timestamp_ms: now_ms(),
            operation: "create".into(),
            read_version: 0,
            commit_id: new_commit_id(),
            data_change: true,
            actions: vec![Action::Metadata(metadata)],
        };
        match table
            .put_new(&entry_path(&table.log_root, 0), &commit)
            .await
        {
            Ok(true) => Ok(table),
            Ok(false) => Err(ZyronError::new(
                SqlState::DUPLICATE_TABLE,
                format!("a lake table already exists at {}", table.log_root),
            )),
            Err(e) => Err(e),
        }
    }

    /// Where the table's data files live (`data/` under it).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where this table's log lives: the root for the main branch,
    /// `_zyron_branches/<name>` under it for a branch.
    pub fn log_root(&self) -> &Path {
        &self.log_root
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The newest version: the newest checkpoint the hint names, then every
    /// entry after it (one listing plus concurrent reads), so opening does
    /// not grow with the table's history.
    pub async fn latest(&self) -> Result<Snapshot> {
        let mut snapshot = self.base_snapshot(u64::MAX).await?;
        let offset = entry_path(&self.log_root, snapshot.version);
        let prefix = self.log_root.clone().join(LOG_DIR);
        let mut versions: Vec<u64> = self
            .store
            .list_with_offset(Some(&prefix), &offset)
            .map_err(|e| store_error("listing the lake log", &e))
            .try_filter_map(|meta| async move { Ok(meta.location.filename().and_then(version_of)) })
            .try_collect()
            .await?;
        versions.sort_unstable();
        let entries: Vec<Commit> = futures::stream::iter(versions)
            .map(|version| self.read_entry(version))
            .buffered(CONCURRENT_ENTRY_READS)
            .try_collect()
            .await?;
        for entry in &entries {
            snapshot.apply(entry)?;
        }
        // Entries written after the listing are picked up by the next open
        // or by a commit that races them.
        Ok(snapshot)
    }

    /// The table as of `version` (time travel).
    pub async fn at_version(&self, version: u64) -> Result<Snapshot> {
        let mut snapshot = self.base_snapshot(version).await?;
        while snapshot.version < version {
            let next = snapshot.version + 1;
            match self.try_read_entry(next).await? {
                Some(entry) => snapshot.apply(&entry)?,
                None => return Err(self.missing_version(version, next).await),
            }
        }
        Ok(snapshot)
    }

    /// Why entry `missing` could not be read on the way to `version`: the
    /// version is in the future, or the log lost an entry it must hold.
    async fn missing_version(&self, version: u64, missing: u64) -> ZyronError {
        match self.latest().await {
            Ok(latest) if latest.version < version => ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "lake table {} has no version {version} (latest is {})",
                    self.log_root, latest.version
                ),
            ),
            Ok(_) => ZyronError::new(
                SqlState::DATA_CORRUPTED,
                format!(
                    "lake log entry {missing} of {} is missing (deleted by hand?); \
                     versions before the newest checkpoint after it cannot be read",
                    self.log_root
                ),
            ),
            Err(e) => e,
        }
    }

    /// The table as it was at `timestamp_ms`: the last version committed at
    /// or before it. Commit times strictly increase with versions, so this
    /// is a binary search (log2 of the history in reads).
    pub async fn at_timestamp(&self, timestamp_ms: i64) -> Result<Snapshot> {
        let latest = self.latest().await?;
        if timestamp_ms >= latest.timestamp_ms {
            return Ok(latest);
        }
        let (mut lo, mut hi) = (0u64, latest.version); // ts(lo) <= target < ts(hi), once lo is checked
        let first = self.read_entry(0).await?;
        if timestamp_ms < first.timestamp_ms {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "lake table {} did not exist at {timestamp_ms} ms (created at {} ms)",
                    self.log_root, first.timestamp_ms
                ),
            ));
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.read_entry(mid).await?.timestamp_ms <= timestamp_ms {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.at_version(lo).await
    }

    /// Commits `actions` made against `base`. If other writers committed
    /// since, their commits are read and checked for a real conflict (the
    /// same file removed twice, or a metadata change on either side); with
    /// none, the commit is retried on top of them, so concurrent appends
    /// never lose a commit. A conflict fails with 40001.
    pub async fn commit(
        &self,
        base: &Snapshot,
        operation: &str,
        actions: Vec<Action>,
    ) -> Result<Committed> {
        self.commit_with(base, operation, actions, CommitOptions::default())
            .await
    }

    /// Sets table property `key` to `value` (or removes it, for `None`) in
    /// a commit of its own. Like every metadata change it conflicts (40001)
    /// with any commit that lands between its read and its write.
    pub async fn set_property(&self, key: &str, value: Option<&str>) -> Result<Committed> {
        let base = self.latest().await?;
        let mut metadata = base.metadata.clone();
        match value {
            Some(value) => metadata.properties.insert(key.to_owned(), value.to_owned()),
            None => metadata.properties.remove(key),
        };
        let options = CommitOptions {
            data_change: false,
            ..CommitOptions::default()
        };
        self.commit_with(
            &base,
            "set property",
            vec![Action::Metadata(metadata)],
            options,
        )
        .await
    }

    /// [`commit`](Self::commit) with choices only this crate makes.
    pub(crate) async fn commit_with(
        &self,
        base: &Snapshot,
        operation: &str,
        actions: Vec<Action>,
        options: CommitOptions,
    ) -> Result<Committed> {
        validate(base, &actions)?;
        let commit_id = new_commit_id();
        let mut current = base.clone();
        for attempt in 1..=MAX_COMMIT_ATTEMPTS {
            if options.check_write_lease {
                check_write_lease(&current.metadata, &actions, now_ms())?;
            }
            let commit = Commit {
                format: (FORMAT_MAJOR, FORMAT_MINOR),
                version: current.version + 1,
                timestamp_ms: now_ms().max(current.timestamp_ms + 1),
                operation: operation.to_owned(),
                read_version: base.version,
                commit_id: commit_id.clone(),
                data_change: options.data_change,
                actions: actions.clone(),
            };
            let path = entry_path(&self.log_root, commit.version);
            let won = match self.put_new(&path, &commit).await {
                Ok(true) => true,
                // Ours after all when object_store retried this put (say,
                // after a timeout) and its first try had landed.
                Ok(false) => self.read_entry(commit.version).await?.commit_id == commit_id,
                // The put failed, or seemed to: if the entry is there, it
                // says whose it is; if not, the commit did not happen.
                Err(e) => match self.try_read_entry(commit.version).await {
                    Ok(Some(entry)) => entry.commit_id == commit_id,
                    _ => return Err(e),
                },
            };
            if won {
                current.apply(&commit)?;
                let checkpointed = self.checkpoint_if_due(&current).await;
                return Ok(Committed {
                    version: commit.version,
                    attempts: attempt,
                    snapshot: current,
                    checkpointed,
                });
            }
            self.catch_up(&mut current, &actions).await?;
            // The winners may have made our actions impossible (both
            // merging one branch adds the same files twice): refuse before
            // writing an entry that could not apply.
            validate(&current, &actions).map_err(|e| {
                ZyronError::new(
                    SqlState::SERIALIZATION_FAILURE,
                    format!(
                        "could not commit to lake table {}: {}",
                        self.log_root,
                        e.message()
                    ),
                )
                .with_hint("Retry the transaction: it will see the other commits.")
            })?;
        }
        Err(ZyronError::new(
            SqlState::SERIALIZATION_FAILURE,
            format!(
                "gave up committing to lake table {} after {MAX_COMMIT_ATTEMPTS} lost races",
                self.log_root
            ),
        ))
    }

    /// Applies every commit after `current` to it, checking each against ours.
    async fn catch_up(&self, current: &mut Snapshot, ours: &[Action]) -> Result<()> {
        while let Some(winner) = self.try_read_entry(current.version + 1).await? {
            if let Some(reason) = conflict(ours, &winner) {
                return Err(ZyronError::new(
                    SqlState::SERIALIZATION_FAILURE,
                    format!(
                        "could not commit to lake table {}: concurrent commit {} ({}) {reason}",
                        self.log_root, winner.version, winner.operation
                    ),
                )
                .with_hint("Retry the transaction: it will see the other commit."));
            }
            current.apply(&winner)?;
        }
        Ok(())
    }

    /// Writes a checkpoint at every `checkpoint_interval`-th version. A
    /// failure here loses nothing (the log is complete without it), so it is
    /// reported, not raised.
    async fn checkpoint_if_due(&self, snapshot: &Snapshot) -> bool {
        if snapshot.version % snapshot.metadata.checkpoint_interval.max(1) != 0 {
            return false;
        }
        self.write_checkpoint(snapshot).await.is_ok()
    }

    /// Writes `snapshot` as a checkpoint and points the hint at it.
    pub async fn write_checkpoint(&self, snapshot: &Snapshot) -> Result<()> {
        let path = checkpoint_path(&self.log_root, snapshot.version);
        // Two writers may race to write the same checkpoint: same content.
        self.put_new(&path, &snapshot.to_checkpoint()).await?;
        let hint = LastCheckpoint {
            version: snapshot.version,
        };
        // The hint may go backwards if an older writer overwrites a newer
        // hint: readers only lose some speed, never correctness.
        self.store
            .put(&last_checkpoint_path(&self.log_root), json_payload(&hint)?)
            .await
            .map_err(|e| store_error("writing the checkpoint hint", &e))?;
        Ok(())
    }

    /// The newest checkpoint at or before `version` (the hint names it when
    /// it is recent enough; otherwise the checkpoints are listed), or the
    /// creating commit when there is none.
    async fn base_snapshot(&self, version: u64) -> Result<Snapshot> {
        let hint: Option<LastCheckpoint> = self
            .try_read_json(&last_checkpoint_path(&self.log_root))
            .await?;
        let checkpoint_version = match hint {
            Some(hint) if hint.version <= version => Some(hint.version),
            Some(_) => self.newest_checkpoint_at_or_before(version).await?,
            None => None,
        };
        if let Some(at) = checkpoint_version {
            let path = checkpoint_path(&self.log_root, at);
            if let Some(checkpoint) = self.try_read_json::<Checkpoint>(&path).await? {
                check_format(checkpoint.format, &format!("checkpoint {at}"))?;
                return Ok(Snapshot::from_checkpoint(checkpoint));
            }
        }
        let creation = self.try_read_entry(0).await?.ok_or_else(|| {
            ZyronError::new(
                SqlState::UNDEFINED_TABLE,
                format!("no lake table at {}", self.log_root),
            )
        })?;
        Snapshot::from_creation(&creation)
    }

    async fn newest_checkpoint_at_or_before(&self, version: u64) -> Result<Option<u64>> {
        let prefix = self.log_root.clone().join(CHECKPOINT_DIR);
        let versions: Vec<u64> = self
            .store
            .list(Some(&prefix))
            .map_err(|e| store_error("listing lake checkpoints", &e))
            .try_filter_map(|meta| async move { Ok(meta.location.filename().and_then(version_of)) })
            .try_collect()
            .await?;
        Ok(versions.into_iter().filter(|v| *v <= version).max())
    }

    /// One commit of the log, as written.
    pub async fn entry(&self, version: u64) -> Result<Commit> {
        self.read_entry(version).await
    }

    async fn read_entry(&self, version: u64) -> Result<Commit> {
        self.try_read_entry(version).await?.ok_or_else(|| {
            ZyronError::new(
                SqlState::DATA_CORRUPTED,
                format!("lake log entry {version} of {} is missing", self.log_root),
            )
        })
    }

    async fn try_read_entry(&self, version: u64) -> Result<Option<Commit>> {
        let entry: Option<Commit> = self
            .try_read_json(&entry_path(&self.log_root, version))
            .await?;
        if let Some(entry) = &entry {
            check_format(entry.format, &format!("lake log entry {version}"))?;
            if entry.version != version {
                return Err(ZyronError::new(
                    SqlState::DATA_CORRUPTED,
                    format!(
                        "lake log entry {version} says it is version {}",
                        entry.version
                    ),
                ));
            }
        }
        Ok(entry)
    }

    async fn try_read_json<T: DeserializeOwned>(&self, path: &Path) -> Result<Option<T>> {
        let bytes = match self.store.get(path).await {
            Ok(result) => result
                .bytes()
                .await
                .map_err(|e| store_error(&format!("reading {path}"), &e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(store_error(&format!("reading {path}"), &e)),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            ZyronError::new(
                SqlState::DATA_CORRUPTED,
                format!("{path} is not a valid lake log record: {e}"),
            )
        })
    }

    /// Put-if-absent: true if this call created the object, false if it existed.
    async fn put_new<T: Serialize>(&self, path: &Path, value: &T) -> Result<bool> {
        let options = object_store::PutOptions::from(PutMode::Create);
        match self
            .store
            .put_opts(path, json_payload(value)?, options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(store_error(&format!("writing {path}"), &e)),
        }
    }
}

/// Why `winner` (committed first) conflicts with `ours`, if it does.
fn conflict(ours: &[Action], winner: &Commit) -> Option<String> {
    let changes_metadata =
        |actions: &[Action]| actions.iter().any(|a| matches!(a, Action::Metadata(_)));
    if changes_metadata(&winner.actions) {
        return Some("changed the table's schema or properties".into());
    }
    if changes_metadata(ours) {
        return Some("changed the table while this commit changes its schema or properties".into());
    }
    let removed_by_winner: BTreeSet<&str> = removed(&winner.actions).collect();
    if let Some(path) = removed(ours).find(|path| removed_by_winner.contains(path)) {
        return Some(format!("also removed {path}"));
    }
    for theirs in deleted(&winner.actions) {
        if removed(ours).any(|path| path == theirs.path) {
            return Some(format!(
                "deleted rows of {}, which this commit removes",
                theirs.path
            ));
        }
        let overlapping = deleted(ours)
            .any(|mine| mine.path == theirs.path && mine.rows.intersects(&theirs.rows));
        if overlapping {
            return Some(format!(
                "deleted or updated some of the same rows of {}",
                theirs.path
            ));
        }
    }
    deleted(ours)
        .find(|mine| removed_by_winner.contains(mine.path.as_str()))
        .map(|mine| format!("removed {}, whose rows this commit deletes", mine.path))
}

fn removed(actions: &[Action]) -> impl Iterator<Item = &str> {
    actions.iter().filter_map(|a| match a {
        Action::Remove(file) => Some(file.path.as_str()),
        _ => None,
    })
}

fn deleted(actions: &[Action]) -> impl Iterator<Item = &DeletedRows> {
    actions.iter().filter_map(|a| match a {
        Action::DeleteRows(rows) => Some(rows),
        _ => None,
    })
}

/// Refuses to add a data file written longer ago than the table's write
/// lease: VACUUM may already have deleted it as an abandoned write.
fn check_write_lease(metadata: &TableMetadata, actions: &[Action], now_ms: i64) -> Result<()> {
    let lease_ms = metadata.write_lease_ms();
    for action in actions {
        let Action::Add(file) = action else { continue };
        let Some(created_ms) = crate::vacuum::created_ms_of(&file.path) else {
            continue;
        };
        if now_ms - created_ms > lease_ms {
            return Err(ZyronError::new(
                SqlState::SERIALIZATION_FAILURE,
                format!(
                    "data file {} was written {} ms ago, longer than the lake table's write \
                     lease ({lease_ms} ms): VACUUM may have removed it",
                    file.path,
                    now_ms - created_ms
                ),
            )
            .with_hint(
                "Retry the transaction; raise the table's write_lease_ms for longer loads.",
            ));
        }
    }
    Ok(())
}

/// Refuses actions that cannot apply to `base` (before any race): a
/// removed file must be live, an added path must not be, deleted rows must
/// exist and not be deleted already.
fn validate(base: &Snapshot, actions: &[Action]) -> Result<()> {
    // The files these actions touch, as they stand after the actions so far
    // (None: not live); cloning only those keeps a commit's cost independent
    // of the table's size.
    let mut touched: BTreeMap<&str, Option<DataFile>> = BTreeMap::new();
    for action in actions {
        let path = match action {
            Action::Add(file) => file.path.as_str(),
            Action::Remove(file) => file.path.as_str(),
            Action::DeleteRows(rows) => rows.path.as_str(),
            Action::Metadata(m) if m.checkpoint_interval == 0 => {
                return Err(ZyronError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    "checkpoint_interval must be at least 1",
                ));
            }
            Action::Metadata(_) => continue,
        };
        let state = touched
            .entry(path)
            .or_insert_with(|| base.files.get(path).cloned());
        let refused = match action {
            Action::Add(_) if state.is_some() => {
                Some(format!("adds {path}, which already is in the table"))
            }
            Action::Add(file) if file.deleted.end() > file.rows => {
                Some(format!("adds {path} with deleted rows beyond its rows"))
            }
            Action::Add(file) => {
                *state = Some(file.clone());
                None
            }
            Action::Remove(_) if state.take().is_none() => {
                Some(format!("removes {path}, which is not in the table"))
            }
            Action::DeleteRows(rows) => delete_rows_of(state.as_mut(), rows).err(),
            _ => None,
        };
        if let Some(why) = refused {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("a commit {why} at version {}", base.version),
            ));
        }
    }
    Ok(())
}

pub(crate) fn json_payload<T: Serialize>(value: &T) -> Result<PutPayload> {
    serde_json::to_vec(value)
        .map(PutPayload::from)
        .map_err(|e| ZyronError::internal(format!("encoding a lake log record: {e}")))
}

/// `relative` (slash-separated) under `root`.
pub(crate) fn join_relative(root: &Path, relative: &str) -> Path {
    relative
        .split('/')
        .fold(root.clone(), |path, part| path.join(part))
}

pub(crate) fn store_error(context: &str, err: &object_store::Error) -> ZyronError {
    ZyronError::new(SqlState::IO_ERROR, format!("{context}: {err}"))
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn new_commit_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
