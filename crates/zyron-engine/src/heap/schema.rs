//! The `public` schema: heap tables (as the session's transaction sees them)
//! plus the views and external tables registered in memory.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{Result, exec_err};
use datafusion::sql::parser::DFParser;
use datafusion::sql::resolve::resolve_table_references;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use zyron_heap::Store;
use zyron_heap::catalog::DEFAULT_SCHEMA;
use zyron_heap::table::HeapTable;

use super::{HeapTableProvider, SessionTxn};

/// Views and external tables (`CREATE VIEW`, `CREATE EXTERNAL TABLE`, demo
/// data): kept in memory and shared by every session (and remembered across
/// restarts by [`crate::external::ExternalCatalog`]).
pub type SharedTables = Arc<RwLock<HashMap<String, Arc<dyn TableProvider>>>>;

/// The views that read `name`, directly or through other views, each once,
/// sorted. A heap table is found again by name at every scan, but a view's
/// plan holds the external tables it reads, and DataFusion copies the plan of
/// a view it reads into it: dropping or replacing one of those under a view
/// would leave the view reading the old one until the next restart, when it
/// would no longer open.
pub fn dependent_views(shared: &SharedTables, name: &str) -> Vec<String> {
    let reads: Vec<(String, Vec<String>)> = shared
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(|(view, provider)| {
            let definition = provider.get_table_definition()?;
            Some((view.clone(), relations_read(definition)))
        })
        .collect();
    let mut found: Vec<String> = Vec::new();
    let mut frontier = vec![name.to_owned()];
    while let Some(read) = frontier.pop() {
        for (view, tables) in &reads {
            if tables.contains(&read) && !found.contains(view) && view != name {
                found.push(view.clone());
                frontier.push(view.clone());
            }
        }
    }
    found.sort();
    found
}

/// The relations in `public` that a view's `CREATE VIEW` text names, folded
/// as the planner folds them, common table expressions left out. The text,
/// not the plan, since the plan no longer shows the views it read.
fn relations_read(definition: &str) -> Vec<String> {
    let Ok(mut statements) = DFParser::parse_sql_with_dialect(definition, &PostgreSqlDialect {})
    else {
        return Vec::new();
    };
    let Some(statement) = statements.pop_front() else {
        return Vec::new();
    };
    let Ok((tables, _ctes)) = resolve_table_references(&statement, true) else {
        return Vec::new();
    };
    tables
        .into_iter()
        .filter(|t| t.schema().is_none_or(|schema| schema == DEFAULT_SCHEMA))
        .map(|t| t.table().to_owned())
        .collect()
}

pub struct HeapSchema {
    store: Arc<Store>,
    /// `None` for the engine's own context, which sees committed tables only.
    session: Option<Arc<SessionTxn>>,
    shared: SharedTables,
}

impl std::fmt::Debug for HeapSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapSchema")
            .field("session", &self.session.is_some())
            .finish()
    }
}

impl HeapSchema {
    pub fn new(store: Arc<Store>, session: Option<Arc<SessionTxn>>, shared: SharedTables) -> Self {
        Self {
            store,
            session,
            shared,
        }
    }

    /// The heap table `name`, as the session's open transaction sees it.
    async fn heap_table(&self, name: &str) -> Option<Arc<HeapTable>> {
        match &self.session {
            Some(session) => session.table(DEFAULT_SCHEMA, name).await,
            None => self.store.table(DEFAULT_SCHEMA, name),
        }
    }

    /// Heap table names without waiting for the transaction (a sync caller):
    /// the transaction's view if it is free, else the committed one.
    fn heap_table_names(&self) -> Vec<String> {
        let tables = match self
            .session
            .as_ref()
            .and_then(|s| s.current.try_lock().ok())
        {
            Some(guard) => match guard.as_ref() {
                Some(txn) => txn.tables(),
                None => self.store.tables(),
            },
            None => self.store.tables(),
        };
        tables.into_iter().map(|t| t.def().name.clone()).collect()
    }

    fn shared(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<dyn TableProvider>>> {
        self.shared.read().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl SchemaProvider for HeapSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.heap_table_names();
        names.extend(self.shared().keys().cloned());
        names.sort();
        names.dedup();
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(table) = self.heap_table(name).await {
            return Ok(Some(Arc::new(HeapTableProvider::new(
                table,
                self.store.clone(),
                self.session.clone(),
            )?)));
        }
        Ok(self.shared().get(name).cloned())
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if self.heap_table_names().contains(&name) {
            return exec_err!("relation \"{name}\" already exists");
        }
        let mut shared = self.shared.write().unwrap_or_else(|p| p.into_inner());
        if shared.contains_key(&name) {
            return exec_err!("relation \"{name}\" already exists");
        }
        Ok(shared.insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .shared
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.shared().contains_key(name) || self.heap_table_names().iter().any(|n| n == name)
    }
}
