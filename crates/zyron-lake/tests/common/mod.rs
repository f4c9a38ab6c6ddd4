//! What every lake test file shares: stores on the local filesystem and on
//! S3 (a SeaweedFS server of its own), and a macro that runs one scenario
//! on both.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use zyron_bench::seaweedfs::SeaweedFs;

/// What `Location::parse` gives a local directory: fsynced puts.
pub fn local_store(dir: &tempfile::TempDir) -> Arc<dyn ObjectStore> {
    zyron_lake::Location::parse(dir.path().to_str().unwrap())
        .unwrap()
        .store
}

/// A store on the test process's SeaweedFS S3 gateway (tests keep apart by
/// prefix).
pub fn s3_store() -> Arc<dyn ObjectStore> {
    let server = SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
    let builder = AmazonS3Builder::new()
        .with_endpoint(server.endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("zyron")
        .with_secret_access_key("zyron");
    let location = zyron_lake::location::s3(&server.bucket, "", builder).unwrap();
    location.store
}

/// Each scenario runs on the local filesystem and on S3 (SeaweedFS).
#[macro_export]
macro_rules! on_local_disk_and_s3 {
    ($($scenario:ident),*) => {$(
        mod $scenario {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn local_disk() {
                let dir = tempfile::tempdir().unwrap();
                super::$scenario(local_store(&dir), Path::from("t")).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn seaweedfs_s3() {
                let root = concat!("tables/", stringify!($scenario));
                super::$scenario(s3_store(), Path::from(root)).await;
            }
        }
    )*};
}
