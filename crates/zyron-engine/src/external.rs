//! External tables (`CREATE EXTERNAL TABLE ... STORED AS LAKE | ZYR`) and
//! views kept across restarts: each is remembered as the statement that
//! created it, in `external_tables.json` in the data directory (the name is
//! older than views), and run again when the engine opens
//! ([`crate::Engine::reopen_external_tables_and_views`]). An external
//! table's data lives where its location says; this file only names the
//! tables. Heap tables are not here: the WAL and checkpoints keep them.
//!
//! The file is replaced whole on every change: written beside, fsynced,
//! renamed over the old one, and the directory fsynced, so a crash leaves
//! either the old list or the new one.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use datafusion::logical_expr::{CreateExternalTable, CreateView};
use zyron_common::{Result, SqlState, ZyronError};

/// The file's name in the data directory.
pub const FILE_NAME: &str = "external_tables.json";

/// The statement that opens `create`'s table again after a restart, for
/// the formats whose data describes itself (LAKE: the log holds the
/// columns; ZYR: the files do); `None` for others, which are not kept.
/// Its OPTIONS are written back under the names the user gave (DataFusion
/// files a name without a dot under `format.`, and will again).
pub fn reopening_statement(create: &CreateExternalTable) -> Option<String> {
    let [location] = create.locations.as_slice() else {
        return None;
    };
    let format = create.file_type.to_ascii_uppercase();
    if !REMEMBERED_FORMATS.contains(&format.as_str()) || create.temporary {
        return None;
    }
    let quote = |text: &str| format!("'{}'", text.replace('\'', "''"));
    let name = format!("\"{}\"", create.name.table().replace('"', "\"\""));
    let mut statement = format!(
        "CREATE EXTERNAL TABLE {name} STORED AS {format} LOCATION {}",
        quote(location)
    );
    let options: BTreeMap<&str, &str> = create
        .options
        .iter()
        .map(|(k, v)| (k.strip_prefix("format.").unwrap_or(k), v.as_str()))
        .collect();
    if !options.is_empty() {
        let options: Vec<String> = options
            .iter()
            .map(|(k, v)| format!("{} {}", quote(k), quote(v)))
            .collect();
        statement.push_str(&format!(" OPTIONS ({})", options.join(", ")));
    }
    Some(statement)
}

/// The statement that creates `create`'s view again after a restart: the
/// text it was created with; `None` for a temporary view, which is not kept.
pub fn view_statement(create: &CreateView) -> Option<String> {
    if create.temporary {
        return None;
    }
    create.definition.clone()
}

/// Formats kept across restarts.
const REMEMBERED_FORMATS: [&str; 2] = ["LAKE", "ZYR"];

#[derive(Debug)]
pub struct ExternalCatalog {
    path: PathBuf,
    /// Table or view name (lower case) to the statement that creates it.
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
        let name = name.to_ascii_lowercase();
        // Reopening at start runs each statement again: nothing to write then.
        if tables.get(&name).is_some_and(|kept| kept == statement) {
            return Ok(());
        }
        tables.insert(name, statement.to_owned());
        self.save(&tables)
    }

    /// Whether listed `name` is a view (else an external table); `None` if
    /// it is not listed.
    pub fn listed_as_view(&self, name: &str) -> Option<bool> {
        let tables = self.lock();
        let statement = tables.get(&name.to_ascii_lowercase())?;
        Some(!statement.starts_with("CREATE EXTERNAL TABLE"))
    }

    /// Forgets table `name` (dropped); whether it was listed.
    pub fn dropped(&self, name: &str) -> Result<bool> {
        let mut tables = self.lock();
        let listed = tables.remove(&name.to_ascii_lowercase()).is_some();
        if listed {
            self.save(&tables)?;
        }
        Ok(listed)
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
        // Owner only: OPTIONS may hold S3 credentials.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staging)
            .map_err(|e| error("creating", e))?;
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
        assert!(catalog.dropped("b").unwrap());
        assert!(!catalog.dropped("never").unwrap());
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
