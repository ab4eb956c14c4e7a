//! One file per command; `main.rs` parses the command line and hands each command its
//! arguments.

pub mod catalogues;
pub mod check;
pub mod data;
pub mod describe;
pub mod export;
pub mod report;
pub mod run;
pub mod schema;
pub mod sweep;
