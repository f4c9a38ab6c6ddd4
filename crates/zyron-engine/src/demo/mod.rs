//! Demo data a newcomer can query at once.

pub mod tpch;
