//! Zyron's row heap: versioned rows, the primary-key B+ tree, the catalog's
//! table definitions, and the durable store that logs them through the WAL.

pub mod btree;
pub mod catalog;
pub mod checkpoint;
pub mod page;
pub mod redo;
pub mod row;
pub mod store;
pub mod table;

pub use store::{Durability, RecoveryReport, Store, StoreOptions, Transaction};
