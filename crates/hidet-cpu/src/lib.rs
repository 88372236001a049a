//! hidet-cpu
