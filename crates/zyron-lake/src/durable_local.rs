//! The local filesystem as an object store whose puts are durable.
//!
//! `object_store`'s `LocalFileSystem` writes a staging file and links or
//! renames it into place, but never fsyncs: after a power cut a log entry
//! that a writer was told had committed could be missing, or worse present
//! and empty (its name durable before its bytes), which would make the
//! table unreadable. Here a put writes the staging file, fdatasyncs it,
//! then links (put-if-absent) or renames (overwrite) it into place and
//! fsyncs the directory, so a name never points at bytes that are not on
//! disk, and the put returns only once both are durable. Everything else
//! is `LocalFileSystem`'s own behaviour.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
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

    /// fsyncs `location` and its directory (after a copy or rename).
    async fn sync(&self, location: &Path) -> Result<()> {
        let file = self.inner.path_to_filesystem(location)?;
        tokio::task::spawn_blocking(move || sync_file_and_directory(file))
            .await
            .map_err(|e| generic(format!("fsync task failed: {e}")))?
    }
}

fn sync_file_and_directory(file: PathBuf) -> Result<()> {
    fsync(&file)?;
    match file.parent() {
        Some(dir) => fsync(dir),
        None => Ok(()),
    }
}

/// Writes `payload` at `path` durably (see the module comment).
fn durable_put(path: PathBuf, payload: PutPayload, mode: PutMode) -> Result<PutResult> {
    let dir = path
        .parent()
        .ok_or_else(|| generic(format!("{} has no directory", path.display())))?
        .to_owned();
    create_dir_durably(&dir)?;
    // `<name>#<digits>`: a name LocalFileSystem's listings skip.
    let mut staging = path.clone().into_os_string();
    staging.push(format!("#{}", rand::random::<u32>()));
    let staging = PathBuf::from(staging);
    let written = write_synced(&staging, &payload).and_then(|()| match mode {
        PutMode::Overwrite => std::fs::rename(&staging, &path).map_err(|e| io(&path, e)),
        PutMode::Create => {
            let linked = std::fs::hard_link(&staging, &path);
            let _ = std::fs::remove_file(&staging);
            linked.map_err(|source| match source.kind() {
                std::io::ErrorKind::AlreadyExists => object_store::Error::AlreadyExists {
                    path: path.display().to_string(),
                    source: source.into(),
                },
                _ => io(&path, source),
            })
        }
        PutMode::Update(_) => Err(object_store::Error::NotImplemented {
            operation: "`put_opts` with mode `PutMode::Update`".into(),
            implementer: "DurableLocalFileSystem".into(),
        }),
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&staging);
    }
    written?;
    fsync(&dir)?;
    Ok(PutResult {
        e_tag: None,
        version: None,
    })
}

fn write_synced(path: &std::path::Path, payload: &PutPayload) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io(path, e))?;
    for chunk in payload.iter() {
        file.write_all(chunk).map_err(|e| io(path, e))?;
    }
    // fdatasync also makes the new file's size durable.
    file.sync_data().map_err(|e| io(path, e))
}

/// Creates `dir` and any missing parents, each new name made durable.
fn create_dir_durably(dir: &std::path::Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durably(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => dir.parent().map_or(Ok(()), fsync),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(dir, e)),
    }
}

fn fsync(path: &std::path::Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| generic(format!("fsync {}: {e}", path.display())))
}

fn io(path: &std::path::Path, e: std::io::Error) -> object_store::Error {
    generic(format!("{}: {e}", path.display()))
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
        if !opts.attributes.is_empty() {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let path = self.inner.path_to_filesystem(location)?;
        tokio::task::spawn_blocking(move || durable_put(path, payload, opts.mode))
            .await
            .map_err(|e| generic(format!("put task failed: {e}")))?
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

#[cfg(test)]
mod tests {
    use object_store::ObjectStoreExt;

    use super::*;

    #[tokio::test]
    async fn put_if_absent_refuses_the_second_writer_and_leaves_no_staging_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = DurableLocalFileSystem::new(dir.path()).unwrap();
        let path = Path::from("a/b/00000000000000000001.json");
        let create = || PutOptions::from(PutMode::Create);
        store
            .put_opts(&path, b"first".to_vec().into(), create())
            .await
            .unwrap();
        let err = store
            .put_opts(&path, b"second".to_vec().into(), create())
            .await
            .unwrap_err();
        assert!(
            matches!(err, object_store::Error::AlreadyExists { .. }),
            "{err}"
        );
        let read = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&read[..], b"first");
        store.put(&path, b"third".to_vec().into()).await.unwrap();
        let read = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&read[..], b"third", "overwrite replaces");
        let names: Vec<String> = std::fs::read_dir(dir.path().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["00000000000000000001.json"], "no staging file left");
    }
}
