//! The shared test data lives in `zyron_format::testing` so crates above can use it too.
#![allow(unused_imports)]

pub use zyron_format::testing::*;
