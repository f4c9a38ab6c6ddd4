//! OPTIMIZE: rewrites small files (inline ones included) and files with
//! deleted rows into files of about a target size, with the deleted rows
//! gone, in one commit. The old files stay on storage for time travel until
//! VACUUM removes them.

use arrow::array::RecordBatch;
use zyron_common::Result;

use crate::data::LakeWrite;
use crate::log::{Action, DataFile, RemovedFile};
use crate::table::{Committed, LakeTable};

/// Rows per file OPTIMIZE aims at unless told otherwise.
pub const DEFAULT_TARGET_FILE_ROWS: u64 = 1 << 20;

/// What an OPTIMIZE did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptimizeReport {
    pub files_removed: usize,
    pub files_added: usize,
    pub rows_written: u64,
    pub bytes_written: u64,
    /// Deleted rows that no live file holds any more.
    pub deleted_rows_purged: u64,
    /// The version committed (none when there was nothing to do).
    pub version: Option<u64>,
}

impl LakeTable {
    /// Rewrites every live file that holds fewer than half of
    /// `target_file_rows` rows, or has deleted rows, into files of up to
    /// `target_file_rows` live rows. Fails with 40001 if a concurrent commit
    /// deleted rows of a file it rewrites (retrying sees the deletion).
    pub async fn optimize(&self, target_file_rows: u64) -> Result<OptimizeReport> {
        if target_file_rows == 0 {
            return Err(zyron_common::ZyronError::new(
                zyron_common::SqlState::INVALID_PARAMETER_VALUE,
                "OPTIMIZE's target rows per file must be at least 1",
            ));
        }
        let mut write = self.begin().await?;
        let candidates: Vec<DataFile> = write
            .base()
            .files
            .values()
            .filter(|f| f.rows < target_file_rows / 2 || !f.deleted.is_empty())
            .cloned()
            .collect();
        let has_deletions = candidates.iter().any(|f| !f.deleted.is_empty());
        if candidates.len() < 2 && !has_deletions {
            return Ok(OptimizeReport::default());
        }
        let mut report = OptimizeReport::default();
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0u64;
        for file in &candidates {
            for batch in self.read_file(file, None, &[]).await? {
                pending_rows += batch.num_rows() as u64;
                pending.push(batch);
            }
            report.deleted_rows_purged += file.deleted.len();
            report.files_removed += 1;
            write.push(Action::Remove(RemovedFile {
                path: file.path.clone(),
            }));
            if pending_rows >= target_file_rows {
                self.flush(&mut write, &mut pending, &mut report).await?;
                pending_rows = 0;
            }
        }
        self.flush(&mut write, &mut pending, &mut report).await?;
        let Committed { version, .. } = write.commit_rearrangement("optimize").await?;
        report.version = Some(version);
        Ok(report)
    }

    /// Writes `pending` as one object (never inline: OPTIMIZE is what
    /// moves inline files out of the log).
    async fn flush(
        &self,
        write: &mut LakeWrite<'_>,
        pending: &mut Vec<RecordBatch>,
        report: &mut OptimizeReport,
    ) -> Result<()> {
        if pending.iter().all(|b| b.num_rows() == 0) {
            pending.clear();
            return Ok(());
        }
        let file = self.write_data_file(pending, 0).await?;
        report.files_added += 1;
        report.rows_written += file.rows;
        report.bytes_written += file.bytes;
        write.push(Action::Add(file));
        pending.clear();
        Ok(())
    }
}
