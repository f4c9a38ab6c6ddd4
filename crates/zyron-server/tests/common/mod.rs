//! Shared by the server's integration tests: an in-process server on a free
//! port with its own data directory, and client connections to it.

#![allow(dead_code)] // each test binary uses a different part of this module

pub mod corpus;
pub mod pgbench;
pub mod process;
pub mod tpcds_data;
pub mod tpch_data;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use zyron_common::Config;
use zyron_server::{Demo, RunningServer};

pub struct TestServer {
    pub server: RunningServer,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(|_| {}, None).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut Config), demo: Option<Demo>) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut config = Config {
            data_dir: dir.path().join("data"),
            pg_listen: "127.0.0.1:0".parse().unwrap(),
            ..Config::default()
        };
        adjust(&mut config);
        let server = zyron_server::start(config, demo, None)
            .await
            .expect("server starts");
        Self { server, dir }
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.pg_addr
    }

    pub async fn connect(&self) -> Client {
        connect(self.addr()).await
    }
}

pub fn connection_string(addr: SocketAddr) -> String {
    format!(
        "host={} port={} user=tester dbname=zyron",
        addr.ip(),
        addr.port()
    )
}

pub async fn connect(addr: SocketAddr) -> Client {
    let (client, connection) = tokio_postgres::connect(&connection_string(addr), NoTls)
        .await
        .expect("client connects");
    tokio::spawn(async move {
        // The connection ends when the server closes it; tests check the client side.
        let _ = connection.await;
    });
    client
}

/// The SQLSTATE of a failed statement.
pub fn sqlstate(err: &tokio_postgres::Error) -> String {
    err.code()
        .map(|c| c.code().to_owned())
        .unwrap_or_else(|| format!("no SQLSTATE: {err}"))
}

/// A client plus the task driving its connection, whose result tells how the
/// server ended the session.
pub async fn connect_watching(
    addr: SocketAddr,
) -> (
    Client,
    tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
) {
    let (client, connection) = tokio_postgres::connect(&connection_string(addr), NoTls)
        .await
        .expect("client connects");
    (client, tokio::spawn(connection))
}

/// The rows of a simple-protocol reply, as text (None for NULL).
pub fn simple_rows(messages: Vec<SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// Runs a benchmark body on a multi-threaded runtime (suites are plain `#[test]`s).
pub fn block_on<F: std::future::Future>(body: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(body)
}

/// A connection to a server on loopback `port` (dbname `postgres`) as soon as
/// it takes one: PostgreSQL answers 57P03 while it starts up.
pub async fn connect_when_ready(port: u16, user: &str, timeout: Duration) -> Client {
    let config = format!("host=127.0.0.1 port={port} user={user} dbname=postgres");
    let deadline = Instant::now() + timeout;
    loop {
        match tokio_postgres::connect(&config, NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                return client;
            }
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            Err(e) => panic!("no ReadyForQuery from port {port}: {e}"),
        }
    }
}
