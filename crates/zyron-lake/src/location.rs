//! Where a lake table lives: a local directory or an S3 prefix, turned into
//! an object store plus the table's root path inside it.
//!
//! S3 settings come from the standard environment variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT` for S3-compatible servers, `AWS_ALLOW_HTTP=true` for a
//! plain-HTTP endpoint), read by `object_store`'s `AmazonS3Builder`.
//! Conditional puts (`If-None-Match: *`) are always on: the log needs them.
//! A local directory gets [`DurableLocalFileSystem`]: puts are fsynced.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path;
use zyron_common::{Result, SqlState, ZyronError};

use crate::durable_local::DurableLocalFileSystem;

/// A table's storage: the store and the root of the table inside it.
#[derive(Debug, Clone)]
pub struct Location {
    pub store: Arc<dyn ObjectStore>,
    pub root: Path,
}

impl Location {
    /// Parses `s3://bucket/prefix`, `file:///abs/dir` or a plain directory
    /// path. A local directory is created if missing.
    pub fn parse(location: &str) -> Result<Location> {
        Self::parse_with(location, std::iter::empty())
    }

    /// [`parse`](Self::parse), with S3 settings given as `aws.<key>`
    /// options (`aws.endpoint`, `aws.region`, `aws.access_key_id`,
    /// `aws.secret_access_key`, `aws.allow_http`, ...) over the
    /// environment's. Other options are ignored here.
    pub fn parse_with<'a>(
        location: &str,
        options: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Location> {
        if let Some(rest) = location.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid(location, "names no bucket"));
            }
            let mut builder = AmazonS3Builder::from_env();
            for (key, value) in options {
                let Some(key) = key.strip_prefix(S3_OPTION_PREFIX) else {
                    continue;
                };
                let key = format!("aws_{key}").parse().map_err(|_| {
                    invalid(location, &format!("has an unknown S3 option aws.{key}"))
                })?;
                builder = builder.with_config(key, value);
            }
            return s3(bucket, prefix, builder);
        }
        if location.contains("://") && !location.starts_with("file://") {
            return Err(ZyronError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!("lake location {location:?}: only s3:// and local paths are supported"),
            ));
        }
        let dir = location.strip_prefix("file://").unwrap_or(location);
        std::fs::create_dir_all(dir)
            .map_err(|e| ZyronError::io(&format!("creating lake directory {dir}"), &e))?;
        let store =
            DurableLocalFileSystem::new(dir).map_err(|e| invalid(location, &e.to_string()))?;
        Ok(Location {
            store: Arc::new(store),
            root: Path::default(),
        })
    }
}

/// Options that configure S3 (and are never stored in the table).
pub const S3_OPTION_PREFIX: &str = "aws.";

/// An S3 bucket through `builder` (the environment, or explicit settings
/// in tests), with conditional puts on.
pub fn s3(bucket: &str, prefix: &str, builder: AmazonS3Builder) -> Result<Location> {
    let store = builder
        .with_bucket_name(bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .build()
        .map_err(|e| invalid(&format!("s3://{bucket}/{prefix}"), &e.to_string()))?;
    Ok(Location {
        store: Arc::new(store),
        root: Path::from(prefix),
    })
}

fn invalid(location: &str, why: &str) -> ZyronError {
    ZyronError::new(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("lake location {location:?} {why}"),
    )
}
