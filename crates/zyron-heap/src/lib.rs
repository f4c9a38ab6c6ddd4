//! Zyron's row heap.

pub mod btree;
pub mod row;
