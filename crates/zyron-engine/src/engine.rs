//! The shared part of the engine: one store, one catalog, one runtime, many sessions.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;

use zyron_common::{Result, ZyronError};

use zyron_heap::{RecoveryReport, Store, StoreOptions};
use zyron_wal::WalOptions;

use crate::errors::to_zyron_error;
use crate::heap::{HeapSchema, SessionTxn};
use crate::session::Session;

/// The catalog name clients see as their database (`current_database()`).
pub const DEFAULT_DATABASE: &str = "zyron";
/// The schema unqualified names resolve to, as in PostgreSQL.
pub const DEFAULT_SCHEMA: &str = "public";

/// How the engine is set up; the server fills this from its configuration.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Parallelism of one query; 0 means one partition per core.
    pub target_partitions: usize,
    /// Memory one query may hold, in bytes; 0 means no limit.
    pub query_memory_limit_bytes: usize,
    /// Where tables, the WAL and checkpoints live. `None`: a temporary
    /// directory removed when the engine is dropped (for tests and examples).
    pub data_dir: Option<PathBuf>,
    /// Memory heap tables may hold, in bytes; writes beyond fail with 53200.
    pub heap_memory_budget_bytes: usize,
    /// Segment size and buffer limits of the write-ahead log.
    pub wal: WalOptions,
    /// A checkpoint is taken once this much WAL was written since the last.
    pub checkpoint_wal_bytes: u64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            target_partitions: 0,
            query_memory_limit_bytes: 0,
            data_dir: None,
            heap_memory_budget_bytes: 4 << 30,
            wal: WalOptions::default(),
            checkpoint_wal_bytes: 256 << 20,
        }
    }
}

/// How often the maintenance thread looks at the WAL and the garbage.
const MAINTENANCE_INTERVAL: Duration = Duration::from_millis(500);
/// Garbage collection runs at least this often while commits happen.
const VACUUM_INTERVAL: Duration = Duration::from_secs(5);

/// Shared state behind every session: the catalog and the execution runtime.
pub struct Engine {
    /// The state every session starts from. Each session gets its own
    /// `public` schema (seeing tables through its transaction) next to the
    /// shared `pg_catalog`.
    base_state: SessionState,
    next_session_id: AtomicU32,
    store: Arc<Store>,
    recovery: RecoveryReport,
    /// Views and external tables, shared by every session's `public` schema.
    shared_tables: crate::heap::SharedTables,
    /// The external tables to open again after a restart.
    external: Arc<crate::external::ExternalCatalog>,
    stop_maintenance: Arc<AtomicBool>,
    maintenance: Option<std::thread::JoinHandle<()>>,
    _temporary_dir: Option<tempfile::TempDir>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop_maintenance.store(true, Ordering::Release);
        if let Some(handle) = self.maintenance.take() {
            handle.thread().unpark();
            let _ = handle.join();
        }
    }
}

impl Engine {
    pub fn new(options: EngineOptions) -> Result<Arc<Self>> {
        let (data_dir, temporary_dir) = match &options.data_dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let temp = tempfile::tempdir()
                    .map_err(|e| ZyronError::io("creating a temporary data directory", &e))?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        let external = Arc::new(crate::external::ExternalCatalog::open(&data_dir)?);
        let (store, recovery) = Store::open(StoreOptions {
            dir: data_dir,
            wal: options.wal.clone(),
            memory_budget_bytes: options.heap_memory_budget_bytes,
        })?;
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_create_default_catalog_and_schema(true)
            .with_default_catalog_and_schema(DEFAULT_DATABASE, DEFAULT_SCHEMA);
        if options.target_partitions > 0 {
            config = config.with_target_partitions(options.target_partitions);
        }
        // PostgreSQL compares identifiers case-insensitively after folding to
        // lower case; DataFusion does the same with this option (its default).
        config.options_mut().sql_parser.enable_ident_normalization = true;
        // Clients expect `varchar` columns to come back as text, which both
        // string representations do; Utf8View is the faster one to execute.
        config.options_mut().sql_parser.map_string_types_to_utf8view = true;
        // A scan that yields few rows by its estimate (a heap scan of a few keys: see
        // `HeapScanExec::partition_statistics`) stays in one partition: spreading a
        // thousand rows over threads cost more in planning and hand-offs than it saved.
        config
            .options_mut()
            .execution
            .use_row_number_estimates_to_optimize_partitioning = true;
        // PostgreSQL sessions start in a time zone (UTC here, as `SHOW TimeZone`
        // says); without one DataFusion plans TIMESTAMPTZ as a plain timestamp.
        config.options_mut().execution.time_zone = Some("+00:00".to_owned());
        // A DataFusion optimizer rule that fails (its subquery decorrelation
        // refuses shapes it half recognises) leaves the plan as it was, and
        // `subquery::ZyronQueryPlanner` runs what it left: a slower plan, not
        // an error for valid SQL.
        config.options_mut().optimizer.skip_failed_rules = true;

        let mut runtime = RuntimeEnvBuilder::new();
        if options.query_memory_limit_bytes > 0 {
            runtime = runtime.with_memory_limit(options.query_memory_limit_bytes, 1.0);
        }
        let runtime = runtime.build_arc().map_err(to_zyron_error)?;

        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_optimizer_rules(crate::subquery::optimizer_rules())
            .with_query_planner(Arc::new(crate::subquery::ZyronQueryPlanner))
            .with_physical_optimizer_rule(Arc::new(crate::short_circuit::ShortCircuit))
            .build();
        state.add_analyzer_rule(Arc::new(
            crate::integer_arithmetic::CheckedIntegerArithmetic,
        ));
        state.add_analyzer_rule(Arc::new(
            crate::subquery::single_row::AggregateSingleRowSubqueries,
        ));
        state.add_analyzer_rule(Arc::new(
            crate::subquery::output_name::NameComparedSubqueryValues,
        ));
        state.add_analyzer_rule(Arc::new(crate::set_operations::MultisetIntersectExcept));
        state.add_analyzer_rule(Arc::new(crate::in_lists::SpellOutInLists));
        state.add_analyzer_rule(Arc::new(crate::short_circuit::FilteredAggregateArguments));
        state.add_analyzer_rule(Arc::new(
            crate::subquery::outer_aggregate::RefuseOuterAggregates,
        ));
        state
            .table_factories_mut()
            .insert("ZYR".into(), Arc::new(crate::zyr::ZyrTableFactory));
        state
            .table_factories_mut()
            .insert("LAKE".into(), Arc::new(crate::lake::LakeTableFactory));
        let ctx = SessionContext::new_with_state(state);
        let shared_tables: crate::heap::SharedTables = Arc::new(RwLock::new(Default::default()));
        let lakes = Arc::new(crate::lake::LakeRegistry {
            shared: shared_tables.clone(),
        });
        default_catalog(&ctx)?
            .register_schema(
                DEFAULT_SCHEMA,
                Arc::new(HeapSchema::new(store.clone(), None, shared_tables.clone())),
            )
            .map_err(to_zyron_error)?;
        ctx.register_udtf("read_zyr", Arc::new(crate::zyr::ReadZyr));
        crate::lake::register_functions(&ctx, &lakes);
        datafusion_pg_catalog::setup_pg_catalog(&ctx, DEFAULT_DATABASE, EmptyContextProvider)
            .map_err(|e| ZyronError::internal(format!("setting up pg_catalog: {e}")))?;
        crate::pg_types::install(&ctx);
        crate::settings::register_functions(&ctx);

        let stop_maintenance = Arc::new(AtomicBool::new(false));
        let maintenance = spawn_maintenance(
            store.clone(),
            options.checkpoint_wal_bytes,
            stop_maintenance.clone(),
        );
        Ok(Arc::new(Self {
            base_state: ctx.state(),
            next_session_id: AtomicU32::new(1),
            store,
            recovery,
            shared_tables,
            external,
            stop_maintenance,
            maintenance: Some(maintenance),
            _temporary_dir: temporary_dir,
        }))
    }

    /// A new session (one per client connection) with its own transaction
    /// and its own view of the `public` schema.
    pub fn new_session(self: &Arc<Self>) -> Session {
        let id = self.next_session_id.fetch_add(1, Ordering::Relaxed);
        let txn = SessionTxn::new(self.store.clone());
        let catalogs = Arc::new(MemoryCatalogProviderList::new());
        let catalog = Arc::new(MemoryCatalogProvider::new());
        if let Ok(base) = default_catalog_of(&self.base_state) {
            for name in base.schema_names() {
                let schema = match name.as_str() {
                    DEFAULT_SCHEMA => Some(Arc::new(HeapSchema::new(
                        self.store.clone(),
                        Some(txn.clone()),
                        self.shared_tables.clone(),
                    )) as _),
                    other => base.schema(other),
                };
                if let Some(schema) = schema {
                    let _ = catalog.register_schema(&name, schema);
                }
            }
        }
        catalogs.register_catalog(DEFAULT_DATABASE.to_owned(), catalog);
        // Scans find the session running them here (`HeapTableProvider::bound_to`).
        let config = self.base_state.config().clone().with_extension(txn.clone());
        let state = SessionStateBuilder::new_from_existing(self.base_state.clone())
            .with_config(config)
            .with_catalog_list(catalogs)
            .build();
        Session::new(
            id,
            SessionContext::new_with_state(state),
            txn,
            self.shared_tables.clone(),
            self.external.clone(),
        )
    }

    /// Opens again the external tables (lake and `.zyr`) and views created
    /// before the last restart, by running the statements that created them;
    /// returns how many opened. A view opens only after what it reads, which
    /// may come later by name, so what fails is tried again while a round
    /// opens something. One that cannot open now (its storage is down, say)
    /// is reported and skipped, and stays listed for the next start.
    pub async fn reopen_external_tables_and_views(self: &Arc<Self>) -> usize {
        let mut pending: Vec<(String, String)> = self.external.statements().into_iter().collect();
        let mut opened = 0;
        loop {
            let round = pending.len();
            let mut failed = Vec::new();
            for (name, statement) in pending {
                let mut session = self.new_session();
                match session.execute_sql(&statement).await {
                    Ok(_) => opened += 1,
                    Err(e) => failed.push((name, statement, e)),
                }
            }
            if failed.is_empty() || failed.len() == round {
                for (name, _, e) in failed {
                    tracing::warn!("external table or view {name} did not open: {e}");
                }
                return opened;
            }
            pending = failed.into_iter().map(|(n, s, _)| (n, s)).collect();
        }
    }

    /// The durable store behind heap tables.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// What opening the data directory found and replayed.
    pub fn recovery(&self) -> RecoveryReport {
        self.recovery
    }

    /// Writes a checkpoint, so the next start replays little WAL. Called at shutdown.
    pub fn checkpoint(&self) -> Result<zyron_heap::store::CheckpointStats> {
        self.store.checkpoint()
    }

    /// A context on the shared catalog, for loading data outside any client session.
    pub fn admin_context(&self) -> SessionContext {
        SessionContext::new_with_state(self.base_state.clone())
    }
}

fn default_catalog(ctx: &SessionContext) -> Result<Arc<dyn CatalogProvider>> {
    ctx.catalog(DEFAULT_DATABASE)
        .ok_or_else(|| ZyronError::internal("the default catalog was not created"))
}

fn default_catalog_of(state: &SessionState) -> Result<Arc<dyn CatalogProvider>> {
    state
        .catalog_list()
        .catalog(DEFAULT_DATABASE)
        .ok_or_else(|| ZyronError::internal("the default catalog was not created"))
}

/// Checkpoints once enough WAL accumulated, and collects garbage while
/// commits happen, in the background.
fn spawn_maintenance(
    store: Arc<Store>,
    checkpoint_wal_bytes: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("zyron-maintenance".into())
        .spawn(move || {
            let mut checkpointed_at = store.wal().next_lsn();
            let mut vacuumed_at = (Instant::now(), store.txns().visible_ts());
            while !stop.load(Ordering::Acquire) {
                std::thread::park_timeout(MAINTENANCE_INTERVAL);
                let next = store.wal().next_lsn();
                if next.saturating_sub(checkpointed_at) >= checkpoint_wal_bytes {
                    match store.checkpoint() {
                        Ok(stats) => {
                            tracing::info!(rows = stats.rows, released = stats.segments_released, ms = stats.elapsed.as_millis() as u64, "checkpoint");
                            checkpointed_at = next;
                        }
                        Err(err) => tracing::warn!(%err, "checkpoint failed; the WAL is kept and the checkpoint retried"),
                    }
                }
                let visible = store.txns().visible_ts();
                if visible != vacuumed_at.1 && vacuumed_at.0.elapsed() >= VACUUM_INTERVAL {
                    let stats = store.vacuum();
                    tracing::debug!(removed = stats.versions_removed, "garbage collection");
                    vacuumed_at = (Instant::now(), visible);
                }
            }
        })
        .expect("spawning the maintenance thread")
}
