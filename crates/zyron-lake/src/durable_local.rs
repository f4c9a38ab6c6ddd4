//! The local filesystem as an object store whose puts are durable.
//!
//! `object_store`'s `LocalFileSystem` writes a staging file and links or
//! renames it into place, but never fsyncs: after a power cut a log entry
//! that a writer was told had committed could be missing or empty. Here
//! every successful put is followed by an fsync of the file and of its
//! directory (the new name), before the put returns. Everything else is
//! `LocalFileSystem`'s own behaviour.

use std::fmt;
use std::path::PathBuf;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

#[derive(Debug)]
pub struct DurableLocalFileSystem {
    inner: LocalFileSystem,
}

impl DurableLocalFileSystem {
    /// A store rooted at the existing directory `dir`.
    pub fn new(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(DurableLocalFileSystem {
            inner: LocalFileSystem::new_with_prefix(dir)?,
        })
    }

    async fn sync(&self, location: &Path) -> Result<()> {
        let file = self.inner.path_to_filesystem(location)?;
        tokio::task::spawn_blocking(move || sync_file_and_directory(file))
            .await
            .map_err(|e| generic(format!("fsync task failed: {e}")))?
    }
}

fn sync_file_and_directory(file: PathBuf) -> Result<()> {
    let fsync = |path: &std::path::Path| {
        std::fs::File::open(path)
            .and_then(|f| f.sync_all())
            .map_err(|e| generic(format!("fsync {}: {e}", path.display())))
    };
    fsync(&file)?;
    match file.parent() {
        Some(dir) => fsync(dir),
        None => Ok(()),
    }
}

fn generic(message: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "DurableLocalFileSystem",
        source: message.into(),
    }
}

impl fmt::Display for DurableLocalFileSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Durable{}", self.inner)
    }
}

#[async_trait]
impl ObjectStore for DurableLocalFileSystem {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let result = self.inner.put_opts(location, payload, opts).await?;
        self.sync(location).await?;
        Ok(result)
    }

    /// Large data files: `complete` renames into place without an fsync;
    /// the lake writes what it commits with `put_opts`.
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await?;
        self.sync(to).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await?;
        self.sync(to).await
    }
}
