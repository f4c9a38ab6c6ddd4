//! The change feed: the rows each version inserted and deleted, with the
//! version and its commit time. An UPDATE shows as the old row deleted and
//! the new one inserted by the same version; OPTIMIZE and clustering, which
//! keep the rows, show nothing. Old versions' files must still exist: the
//! table's `change_feed_retention_ms` keeps VACUUM from removing them.

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use zyron_common::{Result, SqlState, ZyronError};

use crate::log::{Action, DataFile};
use crate::rowset::RowSet;
use crate::table::LakeTable;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    Delete,
}

impl ChangeKind {
    /// As the SQL table function spells it.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Insert => "insert",
            ChangeKind::Delete => "delete",
        }
    }
}

/// Rows one version inserted or deleted.
#[derive(Debug, Clone)]
pub struct Change {
    pub version: u64,
    pub timestamp_ms: i64,
    pub kind: ChangeKind,
    pub rows: RecordBatch,
}

impl LakeTable {
    /// The changes of versions `after + 1 ..= through`, in version order.
    pub async fn changes(&self, after: u64, through: u64) -> Result<Vec<Change>> {
        if after > through {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("a change feed from version {after} to {through} runs backwards"),
            ));
        }
        let latest = self.latest().await?;
        if through > latest.version {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "the change feed ends at version {through}, after the latest ({})",
                    latest.version
                ),
            ));
        }
        let mut state = self.at_version(after).await?;
        let mut changes = Vec::new();
        for version in after + 1..=through {
            let entry = self.entry(version).await?;
            for action in &entry.actions {
                if entry.data_change {
                    let (kind, batches) = match action {
                        Action::Add(file) => {
                            (ChangeKind::Insert, self.read_file(file, None, &[]).await?)
                        }
                        Action::Remove(removed) => (
                            ChangeKind::Delete,
                            self.read_file(live(&state.files, &removed.path)?, None, &[])
                                .await?,
                        ),
                        Action::DeleteRows(deleted) => {
                            let file = live(&state.files, &deleted.path)?;
                            (ChangeKind::Delete, self.rows_at(file, &deleted.rows).await?)
                        }
                        // A schema change changes no row.
                        Action::Metadata(_) => (ChangeKind::Insert, Vec::new()),
                    };
                    changes.extend(batches.into_iter().map(|rows| Change {
                        version,
                        timestamp_ms: entry.timestamp_ms,
                        kind,
                        rows,
                    }));
                }
                // Later actions of the same entry see this one applied.
                state.apply_action(action, version)?;
            }
            state.version = version;
            state.timestamp_ms = entry.timestamp_ms;
        }
        Ok(changes)
    }

    /// The rows of `file` at `positions`, deleted or not.
    async fn rows_at(&self, file: &DataFile, positions: &RowSet) -> Result<Vec<RecordBatch>> {
        let whole = DataFile {
            deleted: RowSet::default(),
            ..file.clone()
        };
        let mut picked = Vec::new();
        let mut start = 0u64;
        for batch in self.read_file(&whole, None, &[]).await? {
            let len = batch.num_rows() as u64;
            let keep: BooleanArray = (start..start + len)
                .map(|p| Some(positions.contains(p)))
                .collect();
            start += len;
            let rows = filter_record_batch(&batch, &keep)
                .map_err(|e| ZyronError::internal(format!("change feed: {e}")))?;
            if rows.num_rows() > 0 {
                picked.push(rows);
            }
        }
        Ok(picked)
    }
}

fn live<'a>(
    files: &'a std::collections::BTreeMap<String, DataFile>,
    path: &str,
) -> Result<&'a DataFile> {
    files.get(path).ok_or_else(|| {
        ZyronError::new(
            SqlState::DATA_CORRUPTED,
            format!("the lake log changes {path}, which is not live"),
        )
    })
}
