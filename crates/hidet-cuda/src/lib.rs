//! hidet-cuda
