//! The crate's integration tests as one test binary (one link instead of one per file); a
//! file's tests run as `cargo test -p hidet-ir --test integration FILE::`. Tests that need a
//! process of their own (process-wide counters, environment variables, `harness = false`)
//! stay in `tests/` as binaries of their own.

mod hoist_gather_bases;
mod hoist_invariant_loads;
mod lowering;
mod mapping_props;
mod print;
mod split_divided_loops;
mod split_guarded_loops;
mod verify;
