//! The shared part of the engine: one catalog, one runtime, many sessions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;

use zyron_common::{Result, ZyronError};

use crate::errors::to_zyron_error;
use crate::session::Session;

/// The catalog name clients see as their database (`current_database()`).
pub const DEFAULT_DATABASE: &str = "zyron";
/// The schema unqualified names resolve to, as in PostgreSQL.
pub const DEFAULT_SCHEMA: &str = "public";

/// How the engine is set up; the server fills this from its configuration.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Parallelism of one query; 0 means one partition per core.
    pub target_partitions: usize,
    /// Memory one query may hold, in bytes; 0 means no limit.
    pub query_memory_limit_bytes: usize,
}

/// Shared state behind every session: the catalog and the execution runtime.
pub struct Engine {
    /// The state every session starts from; sessions share its catalog list,
    /// so a table created in one connection is visible in all.
    base_state: SessionState,
    next_session_id: AtomicU32,
}

impl Engine {
    pub fn new(options: EngineOptions) -> Result<Arc<Self>> {
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
        // PostgreSQL sessions start in a time zone (UTC here, as `SHOW TimeZone`
        // says); without one DataFusion plans TIMESTAMPTZ as a plain timestamp.
        config.options_mut().execution.time_zone = Some("+00:00".to_owned());

        let mut runtime = RuntimeEnvBuilder::new();
        if options.query_memory_limit_bytes > 0 {
            runtime = runtime.with_memory_limit(options.query_memory_limit_bytes, 1.0);
        }
        let runtime = runtime.build_arc().map_err(to_zyron_error)?;

        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .build();
        state
            .table_factories_mut()
            .insert("ZYR".into(), Arc::new(crate::zyr::ZyrTableFactory));
        let ctx = SessionContext::new_with_state(state);
        ctx.register_udtf("read_zyr", Arc::new(crate::zyr::ReadZyr));
        datafusion_pg_catalog::setup_pg_catalog(&ctx, DEFAULT_DATABASE, EmptyContextProvider)
            .map_err(|e| ZyronError::internal(format!("setting up pg_catalog: {e}")))?;
        crate::settings::register_functions(&ctx);

        Ok(Arc::new(Self {
            base_state: ctx.state(),
            next_session_id: AtomicU32::new(1),
        }))
    }

    /// A new session (one per client connection) sharing this engine's catalog.
    pub fn new_session(self: &Arc<Self>) -> Session {
        let id = self.next_session_id.fetch_add(1, Ordering::Relaxed);
        let state = SessionStateBuilder::new_from_existing(self.base_state.clone()).build();
        Session::new(id, SessionContext::new_with_state(state))
    }

    /// A context on the shared catalog, for loading data outside any client session.
    pub fn admin_context(&self) -> SessionContext {
        SessionContext::new_with_state(self.base_state.clone())
    }
}
