//! The `public` schema: heap tables (as the session's transaction sees them)
//! plus the views and external tables registered in memory.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{Result, exec_err};
use zyron_heap::Store;
use zyron_heap::catalog::DEFAULT_SCHEMA;
use zyron_heap::table::HeapTable;

use super::{HeapTableProvider, SessionTxn};

/// Views and external tables (`CREATE VIEW`, `CREATE EXTERNAL TABLE`, demo
/// data): kept in memory and shared by every session.
pub type SharedTables = Arc<RwLock<HashMap<String, Arc<dyn TableProvider>>>>;

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
