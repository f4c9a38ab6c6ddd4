//! A table's state at one version: its metadata and its live data files,
//! rebuilt by applying commits in version order to a checkpoint.

use std::collections::BTreeMap;

use zyron_common::{Result, SqlState, ZyronError};

use crate::log::{
    Action, Checkpoint, Commit, DataFile, DeletedRows, FORMAT_MAJOR, FORMAT_MINOR, TableMetadata,
};

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub version: u64,
    pub timestamp_ms: i64,
    pub metadata: TableMetadata,
    /// Live data files by path.
    pub files: BTreeMap<String, DataFile>,
}

impl Snapshot {
    /// The state a table has right after its creating commit (version 0).
    pub fn from_creation(commit: &Commit) -> Result<Snapshot> {
        let metadata = commit
            .actions
            .iter()
            .find_map(|a| match a {
                Action::Metadata(m) => Some(m.clone()),
                _ => None,
            })
            .ok_or_else(|| corrupt(commit.version, "the first commit holds no metadata"))?;
        let mut snapshot = Snapshot {
            version: commit.version,
            timestamp_ms: commit.timestamp_ms,
            metadata,
            files: BTreeMap::new(),
        };
        snapshot.apply_actions(commit)?;
        Ok(snapshot)
    }

    pub fn from_checkpoint(checkpoint: Checkpoint) -> Snapshot {
        Snapshot {
            version: checkpoint.version,
            timestamp_ms: checkpoint.timestamp_ms,
            metadata: checkpoint.metadata,
            files: checkpoint
                .files
                .into_iter()
                .map(|f| (f.path.clone(), f))
                .collect(),
        }
    }

    pub fn to_checkpoint(&self) -> Checkpoint {
        Checkpoint {
            format: (FORMAT_MAJOR, FORMAT_MINOR),
            version: self.version,
            timestamp_ms: self.timestamp_ms,
            metadata: self.metadata.clone(),
            files: self.files.values().cloned().collect(),
        }
    }

    /// Moves the snapshot to `commit`, which must be the next version.
    pub fn apply(&mut self, commit: &Commit) -> Result<()> {
        if commit.version != self.version + 1 {
            return Err(corrupt(
                commit.version,
                &format!("follows version {} in the log", self.version),
            ));
        }
        self.apply_actions(commit)?;
        self.version = commit.version;
        self.timestamp_ms = commit.timestamp_ms;
        Ok(())
    }

    fn apply_actions(&mut self, commit: &Commit) -> Result<()> {
        for action in &commit.actions {
            self.apply_action(action, commit.version)?;
        }
        Ok(())
    }

    /// Applies one action of version `version` (the change feed walks
    /// actions one by one); the snapshot's version is left as it was.
    pub(crate) fn apply_action(&mut self, action: &Action, version: u64) -> Result<()> {
        let refused = match action {
            Action::Metadata(metadata) if metadata.checkpoint_interval == 0 => {
                Some("sets checkpoint_interval 0".to_owned())
            }
            Action::Metadata(metadata) => {
                self.metadata = metadata.clone();
                None
            }
            Action::Add(file) if file.deleted.end() > file.rows => Some(format!(
                "adds {} with deleted rows beyond its {} rows",
                file.path, file.rows
            )),
            Action::Add(file) => self
                .files
                .insert(file.path.clone(), file.clone())
                .map(|_| format!("adds {} twice", file.path)),
            Action::Remove(file) => match self.files.remove(&file.path) {
                Some(_) => None,
                None => Some(format!("removes {}, which is not in the table", file.path)),
            },
            Action::DeleteRows(deleted) => self.delete_rows(deleted).err(),
        };
        match refused {
            Some(why) => Err(corrupt(version, &why)),
            None => Ok(()),
        }
    }

    /// Marks rows of a live file deleted, or says why that cannot apply.
    fn delete_rows(&mut self, deleted: &DeletedRows) -> std::result::Result<(), String> {
        delete_rows_of(self.files.get_mut(&deleted.path), deleted)
    }

    /// Rows a reader sees (deleted rows excluded).
    pub fn rows(&self) -> u64 {
        self.files.values().map(DataFile::live_rows).sum()
    }
}

fn corrupt(version: u64, what: &str) -> ZyronError {
    ZyronError::new(
        SqlState::DATA_CORRUPTED,
        format!("lake log entry {version} {what}"),
    )
}

/// Adds `deleted` to `file`'s deletion vector, or says why it cannot apply
/// (`file` is `None` when the path is not live).
pub(crate) fn delete_rows_of(
    file: Option<&mut DataFile>,
    deleted: &DeletedRows,
) -> std::result::Result<(), String> {
    let Some(file) = file else {
        return Err(format!(
            "deletes rows of {}, which is not in the table",
            deleted.path
        ));
    };
    if deleted.rows.end() > file.rows {
        return Err(format!(
            "deletes row {} of {}, which has {} rows",
            deleted.rows.end() - 1,
            deleted.path,
            file.rows
        ));
    }
    if file.deleted.intersects(&deleted.rows) {
        return Err(format!(
            "deletes rows of {} that are already deleted",
            deleted.path
        ));
    }
    file.deleted.union_with(&deleted.rows);
    Ok(())
}
