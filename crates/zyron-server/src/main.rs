//! `zyron`: the server binary.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tracing_subscriber::EnvFilter;

use zyron_common::{Config, ZyronError};
use zyron_server::{Demo, ProgressFn};

/// Zyron: a lakehouse database that speaks PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "zyron", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the server and accept PostgreSQL connections until SIGINT/SIGTERM.
    ///
    /// Settings come from the defaults, then the --config file, then the flags.
    /// Connect with `psql -h 127.0.0.1 -p 5433` (any user name, no password).
    Serve(ServeArgs),
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// TOML configuration file (keys: data_dir, pg_listen, max_connections,
    /// shutdown_grace_ms, target_partitions, query_memory_limit_mib,
    /// heap_memory_budget_mib, checkpoint_wal_mib, busy_poll_us,
    /// follow_client_cpu).
    #[arg(short, long, value_name = "FILE", env = "ZYRON_CONFIG")]
    config: Option<PathBuf>,

    /// Directory for the server's files [default: ./zyron-data]
    #[arg(short = 'D', long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Address for PostgreSQL clients [default: 127.0.0.1:5433]
    #[arg(short, long, value_name = "HOST:PORT")]
    listen: Option<SocketAddr>,

    /// Refuse connections beyond this many (SQLSTATE 53300) [default: 100]
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,

    /// On shutdown, let in-flight queries run this long before cancelling them [default: 10000]
    #[arg(long, value_name = "MS")]
    shutdown_grace_ms: Option<u64>,

    /// After a reply, poll the client's socket this long before sleeping, when
    /// no other query runs: lower latency for one busy client, for idle CPU;
    /// 0 turns it off, at most 10000 [default: 50]
    #[arg(long, value_name = "US")]
    busy_poll_us: Option<u64>,

    /// While only one connection is open, run the threads serving it on the
    /// CPU its messages arrive on (a client on this machine then wakes no
    /// idle CPU per statement); undone when a second connection opens and
    /// while DataFusion runs a plan [default: true]
    #[arg(long, value_name = "BOOL")]
    follow_client_cpu: Option<bool>,

    /// Load demo data before accepting connections.
    #[arg(long, value_enum, value_name = "DATASET")]
    demo: Option<DemoKind>,

    /// Scale factor of the demo data (TPC-H SF 1 is about 1 GB in memory).
    #[arg(long, value_name = "SF", default_value_t = 0.1, requires = "demo")]
    demo_scale: f64,

    /// Log filter, e.g. `info`, `debug`, `zyron_gateway=debug` (or set RUST_LOG).
    #[arg(long, value_name = "FILTER", default_value = "info")]
    log: String,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum DemoKind {
    /// The eight TPC-H tables, generated in process.
    Tpch,
}

/// mimalloc, as DataFusion's CLI uses: a point statement allocates and frees
/// hundreds of small objects, and with glibc's allocator that was a fifth of
/// the server's CPU under pgbench (perf).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process, as operators of
/// PostgreSQL, Redis and MongoDB are told to. mimalloc asks for them on its
/// arenas, and the kernel then zeroes (and, with the usual `defrag=madvise`,
/// may compact memory for) 2 MiB at each first touch: a 2M-row COPY into a
/// fresh server spent 29% of its CPU in `clear_page_erms` under huge-page
/// faults (perf), and a quarter less CPU in all without them. The price is
/// more TLB misses on random reads: pgbench's select-only shape at 16
/// clients measured about 6% lower (within this machine's noise).
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes integers only and touches no memory of ours.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if rc != 0 {
            let error = std::io::Error::last_os_error();
            tracing::warn!(%error, "could not turn transparent huge pages off");
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    init_logging(&args.log);
    disable_transparent_huge_pages();
    let config = match effective_config(&args) {
        Ok(config) => config,
        Err(e) => return fail(&e),
    };
    let demo = args.demo.map(|DemoKind::Tpch| Demo::Tpch {
        scale_factor: args.demo_scale,
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&ZyronError::io("starting the runtime", &e)),
    };
    match runtime.block_on(run(config, demo)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

async fn run(config: Config, demo: Option<Demo>) -> Result<(), ZyronError> {
    tracing::info!(data_dir = %config.data_dir.display(), "starting zyron {}", env!("CARGO_PKG_VERSION"));
    let (bar, progress) = progress_bar();
    let server = zyron_server::start(config, demo, progress).await?;
    bar.finish_and_clear();
    let addr = server.pg_addr;
    tracing::info!(%addr, "accepting PostgreSQL connections");
    eprintln!(
        "Zyron is ready. Connect with:\n    psql -h {} -p {}\nStop with Ctrl-C.",
        addr.ip(),
        addr.port()
    );
    let token = server.shutdown_token();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested: finishing in-flight queries");
        token.cancel();
    });
    let stats = server.wait().await?;
    tracing::info!(
        accepted = stats.connections_accepted,
        refused = stats.connections_refused,
        drained = stats.queries_drained,
        cancelled = stats.queries_cancelled,
        "zyron stopped"
    );
    Ok(())
}

fn effective_config(args: &ServeArgs) -> Result<Config, ZyronError> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ZyronError::io(&format!("cannot read config file {}", path.display()), &e)
            })?;
            Config::from_toml(&text)?
        }
        None => Config::default(),
    };
    if let Some(dir) = &args.data_dir {
        config.data_dir = dir.clone();
    }
    if let Some(listen) = args.listen {
        config.pg_listen = listen;
    }
    if let Some(max) = args.max_connections {
        config.max_connections = max;
    }
    if let Some(grace) = args.shutdown_grace_ms {
        config.shutdown_grace_ms = grace;
    }
    if let Some(budget) = args.busy_poll_us {
        config.busy_poll_us = budget;
    }
    if let Some(follow) = args.follow_client_cpu {
        config.follow_client_cpu = follow;
    }
    config.validate()?;
    Ok(config)
}

fn progress_bar() -> (ProgressBar, Option<ProgressFn>) {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:40}] {pos}/{len} rows ({per_sec}, eta {eta})",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    let handle = bar.clone();
    let progress: ProgressFn = Arc::new(move |p| {
        handle.set_message(p.table);
        handle.set_length(p.rows_expected.max(p.rows_done));
        handle.set_position(p.rows_done);
    });
    (bar, Some(progress))
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn init_logging(filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only help a terminal; in log files they are noise.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn fail(e: &ZyronError) -> ExitCode {
    eprintln!("zyron: error: {}", e.message());
    if let Some(hint) = e.hint() {
        eprintln!("zyron: hint: {hint}");
    }
    ExitCode::FAILURE
}
