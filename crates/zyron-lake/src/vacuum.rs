//! VACUUM: deletes data files that no version inside the retention window
//! reads, and never a file that a writer may still commit.
//!
//! **In-flight writers.** A data file's name starts with the time it was
//! written (`data/<13-digit ms>-<random>.zyr`). A commit refuses to add a
//! file written longer ago than the table's write lease (`write_lease_ms`,
//! default one hour). VACUUM reads the whole log, so it knows every file
//! ever committed; a file that no commit ever added is deleted only once it
//! is older than the lease (and the retention). So a file VACUUM deletes can
//! never be committed afterwards: either a commit added it (and a later one
//! removed it before the window) or its writer can no longer commit it.
//! This is a lease written into each name instead of an intent record, so
//! writing a file costs no extra request; it assumes writers' and VACUUM's
//! clocks agree to well within the lease.
//!
//! **Readers.** Every file that the oldest version inside the window reads,
//! or that a later commit adds, is kept: time travel to any version after
//! `now - retention` works. The same holds for every branch's log, and
//! every tagged version's files are kept whatever their age. The window is the larger of the retention asked
//! for and the table's `change_feed_retention_ms`, so the change feed's
//! history is never cut short by a VACUUM.

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectMeta;
use zyron_common::{Result, SqlState, ZyronError};

use crate::data::DATA_DIR;
use crate::log::Action;
use crate::snapshot::Snapshot;
use crate::table::{LakeTable, now_ms, store_error};

/// Log entries read at once.
const CONCURRENT_ENTRY_READS: usize = 16;

/// What a VACUUM found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VacuumReport {
    /// The oldest version time travel can still read.
    pub oldest_readable_version: u64,
    pub files_deleted: u64,
    pub bytes_deleted: u64,
    /// Files some version in the window reads.
    pub files_referenced: u64,
    /// Files no commit ever added that are younger than the write lease: a
    /// writer may still commit them.
    pub files_within_lease: u64,
}

/// The creation time a data file's name carries, if it carries one.
pub fn created_ms_of(path: &str) -> Option<i64> {
    let name = path.strip_prefix(DATA_DIR)?.strip_prefix('/')?;
    let (digits, _) = name.split_once('-')?;
    if digits.len() != 13 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl LakeTable {
    /// Deletes (unless `dry_run`) data files that no version committed in
    /// the last `retention_ms` reads and that are older than the write lease.
    pub async fn vacuum(&self, retention_ms: i64, dry_run: bool) -> Result<VacuumReport> {
        if self.log_root() != self.root() {
            return Err(ZyronError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                "VACUUM runs on the table, not on a branch (it covers every branch)",
            ));
        }
        if retention_ms < 0 {
            return Err(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                "VACUUM retention must not be negative",
            ));
        }
        let latest = self.latest().await?;
        let now = now_ms();
        let window_ms = retention_ms.max(latest.metadata.change_feed_retention_ms());
        let oldest = self.oldest_in_window(&latest, now - window_ms).await?;
        let mut referenced = self.referenced_since(&oldest, &latest).await?;
        let committed_before = self.added_through(oldest.version).await?;
        for version in self.tags().await?.into_values() {
            referenced.extend(self.at_version(version).await?.files.into_keys());
        }
        for name in self.branches().await? {
            let branch = self.branch(&name);
            let branch_latest = branch.latest().await?;
            let branch_oldest = branch
                .oldest_in_window(&branch_latest, now - window_ms)
                .await?;
            referenced.extend(
                branch
                    .referenced_since(&branch_oldest, &branch_latest)
                    .await?,
            );
        }
        let min_age_ms = latest.metadata.write_lease_ms().max(retention_ms);
        let mut report = VacuumReport {
            oldest_readable_version: oldest.version,
            files_referenced: referenced.len() as u64,
            ..VacuumReport::default()
        };
        let mut doomed: Vec<ObjectMeta> = Vec::new();
        let prefix = self.root().clone().join(DATA_DIR);
        let mut listing = self.store().list(Some(&prefix));
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| store_error("listing lake data files", &e))?;
            let relative = self.relative_path(&meta);
            if referenced.contains(&relative) {
                continue;
            }
            // A file some commit added, and no version in the window reads,
            // was removed before the window: no writer holds it.
            if !committed_before.contains(&relative) {
                let created_ms = created_ms_of(&relative)
                    .unwrap_or_else(|| meta.last_modified.timestamp_millis());
                if now - created_ms <= min_age_ms {
                    report.files_within_lease += 1;
                    continue;
                }
            }
            report.files_deleted += 1;
            report.bytes_deleted += meta.size;
            doomed.push(meta);
        }
        // A commit that landed while we listed (its put retried for a
        // while, say) may add a file we were about to delete.
        let mut version = latest.version + 1;
        while let Ok(entry) = self.entry(version).await {
            for action in &entry.actions {
                if let Action::Add(file) = action {
                    doomed.retain(|m| self.relative_path(m) != file.path);
                }
            }
            version += 1;
        }
        report.files_deleted = doomed.len() as u64;
        report.bytes_deleted = doomed.iter().map(|m| m.size).sum();
        if !dry_run {
            let locations = futures::stream::iter(doomed.into_iter().map(|m| Ok(m.location)));
            self.store()
                .delete_stream(locations.boxed())
                .map_err(|e| store_error("deleting lake data files", &e))
                .try_collect::<Vec<_>>()
                .await?;
        }
        Ok(report)
    }

    /// The version a reader at `horizon_ms` sees (version 0 if the table is
    /// younger), or the latest when nothing was committed since.
    async fn oldest_in_window(&self, latest: &Snapshot, horizon_ms: i64) -> Result<Snapshot> {
        if horizon_ms >= latest.timestamp_ms {
            return Ok(latest.clone());
        }
        match self.at_timestamp(horizon_ms).await {
            Ok(snapshot) => Ok(snapshot),
            Err(e) if e.sqlstate() == SqlState::INVALID_PARAMETER_VALUE => self.at_version(0).await,
            Err(e) => Err(e),
        }
    }

    /// Paths of every data file the versions up to `version` added.
    async fn added_through(&self, version: u64) -> Result<BTreeSet<String>> {
        let entries: Vec<_> = futures::stream::iter(0..=version)
            .map(|v| self.entry(v))
            .buffered(CONCURRENT_ENTRY_READS)
            .try_collect()
            .await?;
        Ok(entries
            .into_iter()
            .flat_map(|entry| entry.actions)
            .filter_map(|action| match action {
                Action::Add(file) => Some(file.path),
                _ => None,
            })
            .collect())
    }

    /// Paths of every data file some version from `oldest` to `latest`
    /// reads.
    async fn referenced_since(
        &self,
        oldest: &Snapshot,
        latest: &Snapshot,
    ) -> Result<BTreeSet<String>> {
        let mut referenced: BTreeSet<String> = oldest.files.keys().cloned().collect();
        let entries: Vec<_> = futures::stream::iter(oldest.version + 1..=latest.version)
            .map(|version| self.entry(version))
            .buffered(CONCURRENT_ENTRY_READS)
            .try_collect()
            .await?;
        for entry in entries {
            for action in entry.actions {
                if let Action::Add(file) = action {
                    referenced.insert(file.path);
                }
            }
        }
        Ok(referenced)
    }

    /// `meta`'s path relative to the table's root, as the log names files.
    fn relative_path(&self, meta: &ObjectMeta) -> String {
        let full = meta.location.as_ref();
        let root = self.root().as_ref();
        match root.is_empty() {
            true => full.to_owned(),
            false => full
                .strip_prefix(root)
                .map(|rest| rest.trim_start_matches('/').to_owned())
                .unwrap_or_else(|| full.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_times_are_read_from_data_file_names_only() {
        let name = "data/1796038935057-774029532543f8b8b421afb70a8fdda1.zyr";
        assert_eq!(created_ms_of(name), Some(1_796_038_935_057));
        assert_eq!(
            created_ms_of("data/774029532543f8b8b421afb70a8fdda1.zyr"),
            None
        );
        assert_eq!(created_ms_of("inline/1796038935057-7740.zyr"), None);
        assert_eq!(created_ms_of("data/17960389350-x.zyr"), None, "12 digits");
    }
}
