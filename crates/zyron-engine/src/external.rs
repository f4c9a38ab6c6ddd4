//! External tables (`CREATE EXTERNAL TABLE ... STORED AS LAKE | ZYR`) kept
//! across restarts: each is remembered as the statement that created it, in
//! `external_tables.json` in the data directory, and run again when the
//! engine opens ([`crate::Engine::reopen_external_tables`]). The data lives
//! where the table's location says; this file only names the tables.
//!
//! The file is replaced whole on every change: written beside, fsynced,
//! renamed over the old one, and the directory fsynced, so a crash leaves
//! either the old list or the new one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use zyron_common::{Result, SqlState, ZyronError};

/// The file's name in the data directory.
pub const FILE_NAME: &str = "external_tables.json";

#[derive(Debug)]
pub struct ExternalCatalog {
    path: PathBuf,
    /// Table name (lower case) to the statement that creates it.
    tables: Mutex<BTreeMap<String, String>>,
}

impl ExternalCatalog {
    /// Reads the list in `data_dir` (empty if there is none yet).
    pub fn open(data_dir: &Path) -> Result<ExternalCatalog> {
        let path = data_dir.join(FILE_NAME);
        let tables = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                ZyronError::new(
                    SqlState::DATA_CORRUPTED,
                    format!("{} is not a list of tables: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(ZyronError::io(&format!("reading {}", path.display()), &e)),
        };
        Ok(ExternalCatalog {
            path,
            tables: Mutex::new(tables),
        })
    }

    /// The statements to run again, by table name.
    pub fn statements(&self) -> BTreeMap<String, String> {
        self.lock().clone()
    }

    /// Remembers that `statement` created table `name`.
    pub fn created(&self, name: &str, statement: &str) -> Result<()> {
        let mut tables = self.lock();
        tables.insert(name.to_ascii_lowercase(), statement.to_owned());
        self.save(&tables)
    }

    /// Forgets table `name` (dropped); nothing happens if it is not listed.
    pub fn dropped(&self, name: &str) -> Result<()> {
        let mut tables = self.lock();
        if tables.remove(&name.to_ascii_lowercase()).is_some() {
            self.save(&tables)?;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn save(&self, tables: &BTreeMap<String, String>) -> Result<()> {
        let error = |what: &str, e: std::io::Error| {
            ZyronError::io(&format!("{what} {}", self.path.display()), &e)
        };
        let bytes = serde_json::to_vec_pretty(tables)
            .map_err(|e| ZyronError::internal(format!("encoding the external tables: {e}")))?;
        let staging = self.path.with_extension("json.new");
        let mut file = std::fs::File::create(&staging).map_err(|e| error("creating", e))?;
        file.write_all(&bytes).map_err(|e| error("writing", e))?;
        file.sync_all().map_err(|e| error("syncing", e))?;
        std::fs::rename(&staging, &self.path).map_err(|e| error("replacing", e))?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| error("syncing the directory of", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = ExternalCatalog::open(dir.path()).unwrap();
        catalog
            .created("Events", "CREATE EXTERNAL TABLE events ...")
            .unwrap();
        catalog.created("b", "CREATE EXTERNAL TABLE b ...").unwrap();
        catalog.dropped("b").unwrap();
        catalog.dropped("never").unwrap();
        let reopened = ExternalCatalog::open(dir.path()).unwrap();
        assert_eq!(
            reopened.statements().into_iter().collect::<Vec<_>>(),
            [(
                "events".to_owned(),
                "CREATE EXTERNAL TABLE events ...".to_owned()
            )]
        );
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        let err = ExternalCatalog::open(dir.path()).unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::DATA_CORRUPTED);
    }
}
