//! hidet: facade crate.
