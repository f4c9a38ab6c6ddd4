//! Heap tables in SQL: the durable row store of `zyron-heap` behind
//! DataFusion's `SchemaProvider` and `TableProvider` seams.
//!
//! Each session has a [`SessionTxn`]: the transaction its statements run in
//! (one per statement in autocommit, one per BEGIN ... COMMIT block) and the
//! snapshot of the statement in progress. The session's `public` schema
//! ([`HeapSchema`]) resolves names through that transaction, so a table
//! created in an open transaction is visible to it alone; every table it
//! hands out ([`HeapTableProvider`]) scans at the statement's snapshot and
//! writes through the transaction.

mod ddl;
mod point;
mod provider;
mod scan;
mod schema;
pub(crate) mod write;

use std::sync::Arc;

use datafusion::error::DataFusionError;
use zyron_common::ZyronError;
use zyron_heap::table::HeapTable;
use zyron_heap::{Store, Transaction};
use zyron_txn::{Isolation, Snapshot};

pub use ddl::{
    CreateTableExtras, alter_add_primary_key, create_table, dependents_error, drop_relations,
    extract_create_extras, truncate_tables,
};
pub use point::{Outcome as PointOutcome, execute as execute_point, is_point_shape};
pub use provider::HeapTableProvider;
pub(crate) use scan::HeapScanExec;
pub use schema::{HeapSchema, SharedTables, dependent_views};
pub use write::guard_dml_input;

/// The transaction a session's statements run in.
pub struct SessionTxn {
    store: Arc<Store>,
    current: tokio::sync::Mutex<Option<Transaction>>,
    snapshot: std::sync::Mutex<Option<Snapshot>>,
}

impl std::fmt::Debug for SessionTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTxn")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl SessionTxn {
    pub fn new(store: Arc<Store>) -> Arc<Self> {
        Arc::new(Self {
            store,
            current: tokio::sync::Mutex::new(None),
            snapshot: std::sync::Mutex::new(None),
        })
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The snapshot of the statement in progress; outside a statement, the
    /// newest committed state.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or_else(|| committed_snapshot(&self.store))
    }

    /// The heap table `name` as this session sees it now: its open transaction's
    /// view (its own DDL first), else the committed catalog.
    pub async fn table(&self, schema: &str, name: &str) -> Option<Arc<HeapTable>> {
        match self.current.lock().await.as_ref() {
            Some(txn) => txn.table(schema, name),
            None => self.store.table(schema, name),
        }
    }

    /// Starts a statement: opens a transaction if none is open and takes the
    /// statement's snapshot (fresh under READ COMMITTED).
    pub async fn begin_statement(&self, isolation: Isolation) {
        let mut current = self.current.lock().await;
        let txn = current.get_or_insert_with(|| self.store.begin(isolation));
        txn.begin_statement();
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = Some(txn.snapshot());
    }

    /// Takes the open transaction (to commit or roll it back).
    pub async fn take(&self) -> Option<Transaction> {
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.current.lock().await.take()
    }

    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, Option<Transaction>> {
        self.current.lock().await
    }

    /// Whether a transaction is open.
    pub async fn is_open(&self) -> bool {
        self.current.lock().await.is_some()
    }
}

/// A snapshot of everything committed, for readers outside any transaction.
pub fn committed_snapshot(store: &Store) -> Snapshot {
    Snapshot {
        read_ts: store.txns().visible_ts(),
        txn: 0,
    }
}

/// A table's schema as DataFusion sees it: every column nullable. NOT NULL
/// is enforced by the heap itself, with PostgreSQL's message naming the
/// table's column (DataFusion would name an intermediate one, or none).
/// A heap table's codec keeps this schema built: `codec().nullable_schema()`.
pub(crate) use zyron_heap::row::all_nullable as lenient;

pub(crate) fn to_df(err: ZyronError) -> DataFusionError {
    DataFusionError::External(Box::new(err))
}

pub(crate) fn no_transaction() -> DataFusionError {
    to_df(ZyronError::internal(
        "a heap table was written outside a transaction",
    ))
}
