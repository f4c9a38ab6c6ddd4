//! Tags and branches.
//!
//! A **tag** names a version: `_zyron_refs/tags/<name>.json` holds
//! `{"version": v}`, written put-if-absent. VACUUM keeps every file a
//! tagged version reads.
//!
//! A **branch** is a log of its own under `_zyron_branches/<name>/`, sharing
//! the table's `data/`. Its version 0 holds the metadata (with property
//! `branch.from_version`) and every live file of the version it starts
//! from, deletion vectors included; commits on it are ordinary commits.
//! **Merging** it back commits to the main log the difference between the
//! branch's latest version and its starting point (files added, files
//! removed, rows deleted), based on the main version the branch started
//! from: the usual conflict check then compares it with every main commit
//! made since, so a branch that deleted rows the main line also deleted, or
//! removed a file the main line changed, fails with 40001.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions};
use serde::{Deserialize, Serialize};
use zyron_common::{Result, SqlState, ZyronError};

use crate::log::{
    Action, Commit, DeletedRows, FORMAT_MAJOR, FORMAT_MINOR, RemovedFile, entry_path,
    last_checkpoint_path,
};
use crate::snapshot::Snapshot;
use crate::table::{
    CommitOptions, Committed, LakeTable, join_relative as join, json_payload as json, now_ms,
    store_error,
};

pub const TAGS_DIR: &str = "_zyron_refs/tags";
pub const BRANCHES_DIR: &str = "_zyron_branches";
/// The metadata property naming the main version a branch started from.
pub const BRANCH_FROM_VERSION: &str = "branch.from_version";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Tag {
    version: u64,
    created_ms: i64,
}

/// Tag and branch names: 1 to 128 of `A-Z a-z 0-9 _ - .`, not starting
/// with a dot.
fn check_name(kind: &str, name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    match valid {
        true => Ok(()),
        false => Err(ZyronError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("{kind} name {name:?} must be 1 to 128 letters, digits, '_', '-' or '.'"),
        )),
    }
}

impl LakeTable {
    fn tag_path(&self, name: &str) -> Path {
        join(self.root(), TAGS_DIR).join(format!("{name}.json"))
    }

    /// Names `version` `name`. Fails with 42710 if the tag exists.
    pub async fn create_tag(&self, name: &str, version: u64) -> Result<()> {
        check_name("tag", name)?;
        if self.log_root() != self.root() {
            return Err(ZyronError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                "tags name versions of the table's main line, not of a branch",
            ));
        }
        self.at_version(version).await?;
        let tag = Tag {
            version,
            created_ms: now_ms(),
        };
        let created = self
            .store()
            .put_opts(
                &self.tag_path(name),
                json(&tag)?,
                PutOptions::from(PutMode::Create),
            )
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => Err(ZyronError::new(
                SqlState::DUPLICATE_OBJECT,
                format!("tag \"{name}\" already exists"),
            )),
            Err(e) => Err(store_error(&format!("writing tag {name}"), &e)),
        }
    }

    /// The version tag `name` names (42704 if there is none).
    pub async fn tag(&self, name: &str) -> Result<u64> {
        check_name("tag", name)?;
        let bytes = match self.store().get(&self.tag_path(name)).await {
            Ok(got) => got
                .bytes()
                .await
                .map_err(|e| store_error(&format!("reading tag {name}"), &e))?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ZyronError::new(
                    SqlState::UNDEFINED_OBJECT,
                    format!("tag \"{name}\" does not exist"),
                ));
            }
            Err(e) => return Err(store_error(&format!("reading tag {name}"), &e)),
        };
        serde_json::from_slice::<Tag>(&bytes)
            .map(|t| t.version)
            .map_err(|e| {
                ZyronError::new(
                    SqlState::DATA_CORRUPTED,
                    format!("tag {name} is unreadable: {e}"),
                )
            })
    }

    /// Every tag and its version.
    pub async fn tags(&self) -> Result<BTreeMap<String, u64>> {
        let listed: Vec<_> = self
            .store()
            .list(Some(&join(self.root(), TAGS_DIR)))
            .try_collect()
            .await
            .map_err(|e| store_error("listing tags", &e))?;
        let mut tags = BTreeMap::new();
        for meta in listed {
            if let Some(name) = meta
                .location
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
            {
                tags.insert(name.to_owned(), self.tag(name).await?);
            }
        }
        Ok(tags)
    }

    /// Removes tag `name` (42704 if there is none).
    pub async fn drop_tag(&self, name: &str) -> Result<()> {
        self.tag(name).await?;
        self.store()
            .delete(&self.tag_path(name))
            .await
            .map_err(|e| store_error(&format!("dropping tag {name}"), &e))
    }

    /// A handle on branch `name` (reading it fails with 42P01 if it does
    /// not exist).
    pub fn branch(&self, name: &str) -> LakeTable {
        self.with_log_root(join(self.root(), BRANCHES_DIR).join(name))
    }

    /// Starts branch `name` from main version `from_version`. Fails with
    /// 42710 if the branch exists.
    pub async fn create_branch(&self, name: &str, from_version: u64) -> Result<LakeTable> {
        check_name("branch", name)?;
        let source = self.at_version(from_version).await?;
        let mut metadata = source.metadata.clone();
        metadata
            .properties
            .insert(BRANCH_FROM_VERSION.into(), from_version.to_string());
        let mut actions = vec![Action::Metadata(metadata)];
        actions.extend(source.files.values().cloned().map(Action::Add));
        let commit = Commit {
            format: (FORMAT_MAJOR, FORMAT_MINOR),
            version: 0,
            timestamp_ms: now_ms(),
            operation: "branch".into(),
            read_version: from_version,
            commit_id: format!("{:032x}", rand::random::<u128>()),
            data_change: true,
            actions,
        };
        let branch = self.branch(name);
        // What a drop cut short left behind would be read as this branch's
        // history: refuse until it is dropped again.
        let leftover = self
            .store()
            .list(Some(branch.log_root()))
            .next()
            .await
            .transpose()
            .map_err(|e| store_error(&format!("listing branch {name}"), &e))?;
        if leftover.is_some() {
            return Err(ZyronError::new(
                SqlState::DUPLICATE_OBJECT,
                format!(
                    "branch \"{name}\" already exists (or a drop of it was cut short: drop it again)"
                ),
            ));
        }
        let created = self
            .store()
            .put_opts(
                &entry_path(branch.log_root(), 0),
                json(&commit)?,
                PutOptions::from(PutMode::Create),
            )
            .await;
        match created {
            Ok(_) => Ok(branch),
            Err(object_store::Error::AlreadyExists { .. }) => Err(ZyronError::new(
                SqlState::DUPLICATE_OBJECT,
                format!("branch \"{name}\" already exists"),
            )),
            Err(e) => Err(store_error(&format!("creating branch {name}"), &e)),
        }
    }

    /// Every branch's name: those whose version 0 exists (a store may
    /// keep an emptied directory after a drop).
    pub async fn branches(&self) -> Result<Vec<String>> {
        let listed = self
            .store()
            .list_with_delimiter(Some(&join(self.root(), BRANCHES_DIR)))
            .await
            .map_err(|e| store_error("listing branches", &e))?;
        let mut names = Vec::new();
        for prefix in &listed.common_prefixes {
            let Some(name) = prefix.filename() else {
                continue;
            };
            match self.store().head(&entry_path(prefix, 0)).await {
                Ok(_) => names.push(name.to_owned()),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error("listing branches", &e)),
            }
        }
        Ok(names)
    }

    /// Commits what branch `name` changed since it started to this (main)
    /// table, checked for conflicts with every main commit made since.
    /// `None` when the branch changed nothing.
    pub async fn merge_branch(&self, name: &str) -> Result<Option<Committed>> {
        check_name("branch", name)?;
        let branch = self.branch(name).latest().await?;
        let from_version: u64 = branch
            .metadata
            .properties
            .get(BRANCH_FROM_VERSION)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                ZyronError::new(
                    SqlState::DATA_CORRUPTED,
                    format!("branch {name} does not say where it started"),
                )
            })?;
        let start = self.at_version(from_version).await?;
        let actions = difference(&start, &branch);
        if actions.is_empty() {
            return Ok(None);
        }
        let options = CommitOptions {
            data_change: true,
            check_write_lease: false,
        };
        let operation = format!("merge {name}");
        self.commit_with(&start, &operation, actions, options)
            .await
            .map(Some)
    }

    /// Deletes branch `name`'s log (its data files go with VACUUM).
    pub async fn drop_branch(&self, name: &str) -> Result<()> {
        check_name("branch", name)?;
        let branch = self.branch(name);
        let mut objects: Vec<_> = self
            .store()
            .list(Some(branch.log_root()))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| store_error(&format!("listing branch {name}"), &e))?;
        if objects.is_empty() {
            return Err(ZyronError::new(
                SqlState::UNDEFINED_OBJECT,
                format!("branch \"{name}\" does not exist"),
            ));
        }
        // Version 0 and the checkpoint hint first: without them the branch
        // no longer opens, so a drop cut short leaves no half branch.
        let first = [
            entry_path(branch.log_root(), 0),
            last_checkpoint_path(branch.log_root()),
        ];
        objects.sort_by_key(|location| !first.contains(location));
        for location in objects {
            self.store()
                .delete(&location)
                .await
                .map_err(|e| store_error(&format!("dropping branch {name}"), &e))?;
        }
        Ok(())
    }
}

/// The actions that turn `start` into `end` (a branch's first and latest
/// state): files added, files removed, rows newly deleted. Metadata changes
/// made on the branch are not merged.
fn difference(start: &Snapshot, end: &Snapshot) -> Vec<Action> {
    let mut actions = Vec::new();
    for (path, file) in &start.files {
        match end.files.get(path) {
            None => actions.push(Action::Remove(RemovedFile { path: path.clone() })),
            Some(now) => {
                let rows = now.deleted.difference(&file.deleted);
                if !rows.is_empty() {
                    actions.push(Action::DeleteRows(DeletedRows {
                        path: path.clone(),
                        rows,
                    }));
                }
            }
        }
    }
    for (path, file) in &end.files {
        if !start.files.contains_key(path) {
            actions.push(Action::Add(file.clone()));
        }
    }
    actions
}
