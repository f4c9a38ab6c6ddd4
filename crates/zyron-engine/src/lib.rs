//! Zyron's SQL engine: the layer between the wire protocol and storage.
//!
//! An [`Engine`] owns the catalog shared by every connection; each connection
//! gets a [`Session`] with its own settings and transaction state. A session
//! turns SQL text into [`StatementResult`]s: rows streamed as Arrow batches,
//! or a command tag (`INSERT 0 5`, `CREATE TABLE`, ...). Planning and
//! execution are DataFusion's; this crate adds PostgreSQL behaviour on top
//! (SET/SHOW, transaction statements, `pg_catalog`, SQLSTATE errors).
//!
//! `CREATE TABLE` makes a durable heap table ([`heap`]): rows are MVCC
//! versions in `zyron-heap`, every commit goes through the write-ahead log,
//! and the data directory survives restarts.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use zyron_engine::{Engine, EngineOptions, StatementResult};
//! let engine = Engine::new(EngineOptions::default()).unwrap();
//! let mut session = engine.new_session();
//! let results = session.execute_sql("CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2)").await.unwrap();
//! assert_eq!(results.len(), 2);
//! match &results[1] {
//!     StatementResult::Command(tag) => assert_eq!(tag.to_string(), "INSERT 0 2"),
//!     _ => panic!("INSERT returns a command tag"),
//! }
//! # });
//! ```

mod checked_sum;
mod copy_in;
mod deadline;
pub mod demo;
mod engine;
mod errors;
pub mod external;
mod float_arithmetic;
mod float_to_integer;
mod function_columns;
pub mod heap;
mod in_lists;
mod integer_arithmetic;
pub mod lake;
mod leaf_exec;
mod output_names;
mod params;
mod parse_cache;
mod pg_types;
mod plan_cache;
mod session;
mod set_operations;
mod settings;
mod short_circuit;
mod statement;
mod subquery;
mod using_joins;
pub mod zyr;

pub use datafusion;
pub use engine::{Engine, EngineOptions};
pub use errors::to_zyron_error;
pub use session::{PreparedStatement, Session, StatementResult, TransactionEffect};
pub use statement::CommandTag;
