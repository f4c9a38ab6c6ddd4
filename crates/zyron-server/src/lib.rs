//! The `zyron` server as a library: what `zyron serve` runs, callable from
//! tests and benchmarks so they exercise the same startup path.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use zyron_common::{Config, Result, SqlState, ZyronError};
use zyron_engine::demo::tpch;
use zyron_engine::{Engine, EngineOptions};
use zyron_gateway::{Colocation, GatewayOptions, PgServer, ServerStats};

pub use tokio_util;

/// Demo data loaded before the server accepts connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Demo {
    Tpch { scale_factor: f64 },
}

/// Reports demo-load progress (the CLI draws a progress bar).
pub type ProgressFn = Arc<dyn Fn(tpch::Progress) + Send + Sync>;

/// A server that is accepting connections.
pub struct RunningServer {
    pub pg_addr: SocketAddr,
    shutdown: CancellationToken,
    in_flight: Arc<AtomicUsize>,
    colocation: Arc<Colocation>,
    task: JoinHandle<std::io::Result<ServerStats>>,
    /// Held for the server's lifetime: one server per data directory.
    _lock: File,
}

impl RunningServer {
    /// Connections with a query in flight right now.
    pub fn queries_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The CPU the threads serving the only open connection are pinned to, if
    /// any (see `--follow-client-cpu`).
    pub fn client_cpu(&self) -> Option<usize> {
        self.colocation.pinned_cpu()
    }

    /// A token that, when cancelled, starts a graceful shutdown.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Starts a graceful shutdown and waits for it to finish.
    pub async fn shutdown(self) -> Result<ServerStats> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Waits until the server has stopped (after its token was cancelled).
    pub async fn wait(self) -> Result<ServerStats> {
        match self.task.await {
            Ok(Ok(stats)) => Ok(stats),
            Ok(Err(e)) => Err(ZyronError::io("server stopped", &e)),
            Err(e) => Err(ZyronError::internal(format!("server task failed: {e}"))),
        }
    }
}

/// Creates the data directory, loads demo data, binds the listener and starts serving.
pub async fn start(
    config: Config,
    demo: Option<Demo>,
    progress: Option<ProgressFn>,
) -> Result<RunningServer> {
    config.validate()?;
    let lock = lock_data_dir(&config.data_dir)?;
    let engine = Engine::new(EngineOptions {
        target_partitions: config.target_partitions,
        query_memory_limit_bytes: config.query_memory_limit_mib * 1024 * 1024,
        data_dir: Some(config.data_dir.clone()),
        heap_memory_budget_bytes: config.heap_memory_budget_mib << 20,
        checkpoint_wal_bytes: config.checkpoint_wal_mib << 20,
        ..EngineOptions::default()
    })?;
    let recovery = engine.recovery();
    tracing::info!(
        image_rows = recovery.image_rows,
        replayed_commits = recovery.replayed_commits,
        wal_bytes = recovery.wal_bytes_replayed,
        torn_bytes_cut = recovery.torn_bytes_cut,
        image_load_ms = recovery.image_load.as_secs_f64() * 1e3,
        replay_ms = recovery.replay.as_secs_f64() * 1e3,
        elapsed_ms = recovery.elapsed.as_secs_f64() * 1e3,
        "opened data directory {}",
        config.data_dir.display()
    );
    // The demo's tables first: a view kept from an earlier run may read them.
    if let Some(demo) = demo {
        load_demo(&engine, demo, progress).await?;
    }
    let reopened = engine.reopen_external_tables_and_views().await;
    if reopened > 0 {
        tracing::info!("opened {reopened} external tables and views");
    }
    let gateway = GatewayOptions {
        max_connections: config.max_connections,
        shutdown_grace_ms: config.shutdown_grace_ms,
        busy_poll_us: config.busy_poll_us,
        follow_client_cpu: config.follow_client_cpu,
    };
    let server = PgServer::bind(config.pg_listen, engine, gateway)
        .await
        .map_err(|e| {
            ZyronError::io(&format!("cannot listen on {}", config.pg_listen), &e)
                .with_hint("is another server using this port? Choose another with --listen")
        })?;
    let pg_addr = server
        .local_addr()
        .map_err(|e| ZyronError::io("reading the listener address", &e))?;
    let shutdown = CancellationToken::new();
    let in_flight = server.queries_in_flight();
    let colocation = server.colocation();
    let task = tokio::spawn(server.run(shutdown.clone()));
    Ok(RunningServer {
        pg_addr,
        shutdown,
        in_flight,
        colocation,
        task,
        _lock: lock,
    })
}

async fn load_demo(engine: &Arc<Engine>, demo: Demo, progress: Option<ProgressFn>) -> Result<()> {
    let Demo::Tpch { scale_factor } = demo;
    let ctx = engine.admin_context();
    let started = Instant::now();
    let loaded = tokio::task::spawn_blocking(move || {
        let report = |p: tpch::Progress| {
            if let Some(progress) = &progress {
                progress(p);
            }
        };
        tpch::load(&ctx, scale_factor, &report)
    })
    .await
    .map_err(|e| ZyronError::internal(format!("demo loader failed: {e}")))??;
    let rows: u64 = loaded.iter().map(|t| t.rows).sum();
    tracing::info!(
        scale_factor,
        tables = loaded.len(),
        rows,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "loaded TPC-H demo data"
    );
    Ok(())
}

/// Creates the data directory and takes an exclusive lock on it, so two
/// servers never share one directory.
fn lock_data_dir(dir: &Path) -> Result<File> {
    std::fs::create_dir_all(dir).map_err(|e| {
        ZyronError::io(
            &format!("cannot create data directory {}", dir.display()),
            &e,
        )
    })?;
    let path = dir.join("zyron.lock");
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| ZyronError::io(&format!("cannot open {}", path.display()), &e))?;
    file.try_lock().map_err(|_| {
        ZyronError::new(
            SqlState::CANNOT_CONNECT_NOW,
            format!(
                "data directory {} is in use by another zyron server",
                dir.display()
            ),
        )
        .with_hint("stop the other server, or pass a different --data-dir")
    })?;
    file.set_len(0)
        .and_then(|_| writeln!(file, "{}", std::process::id()))
        .map_err(|e| ZyronError::io(&format!("cannot write {}", path.display()), &e))?;
    Ok(file)
}
