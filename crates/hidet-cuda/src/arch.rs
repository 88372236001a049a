//! GPU architectures (compute capabilities) that code is compiled for.

use crate::error::CudaError;
use std::fmt;
use std::str::FromStr;

/// A GPU architecture `sm_XY`, e.g. [`Arch::SM80`] (Ampere A100) or
/// [`Arch::SM90`] (Hopper H100).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    capability: u32,
}

impl Arch {
    pub const SM80: Arch = Arch { capability: 80 };
    pub const SM86: Arch = Arch { capability: 86 };
    pub const SM89: Arch = Arch { capability: 89 };
    pub const SM90: Arch = Arch { capability: 90 };

    /// The architecture with compute capability `capability` (e.g. 80 for sm_80).
    /// Fails below 70: the emitted code uses `__shfl_*_sync` and `__syncwarp`.
    pub fn new(capability: u32) -> Result<Arch, CudaError> {
        if (70..1000).contains(&capability) {
            Ok(Arch { capability })
        } else {
            Err(CudaError::UnsupportedArch(format!("sm_{capability}")))
        }
    }

    /// The compute capability as a number (80 for sm_80).
    pub fn capability(self) -> u32 {
        self.capability
    }

    /// The virtual architecture NVRTC generates PTX for (`compute_80`).
    pub fn virtual_name(self) -> String {
        format!("compute_{}", self.capability)
    }

    /// The real architecture `ptxas` assembles for (`sm_80`).
    pub fn real_name(self) -> String {
        format!("sm_{}", self.capability)
    }

    /// Shared memory one block may use, in bytes, with the opt-in carve-out
    /// (`cudaFuncAttributeMaxDynamicSharedMemorySize`).
    pub fn max_shared_bytes_per_block(self) -> usize {
        match self.capability {
            80 | 87 => 163 * 1024,
            90.. => 227 * 1024,
            _ => 99 * 1024,
        }
    }

    /// Streaming multiprocessors of this architecture's reference GPU, for heuristics that
    /// fill the GPU (parallel-k): sm_80 an A100 (108), sm_86 an RTX 3090 / A6000 class (82),
    /// sm_89 an RTX 4090 (128), sm_90 and later an H100/H200 (132); others 80. A real GPU's
    /// own count may differ.
    pub fn reference_sm_count(self) -> i64 {
        match self.capability {
            80 | 87 => 108,
            86 => 82,
            89 => 128,
            90.. => 132,
            _ => 80,
        }
    }

    /// Shared memory one block may declare statically, in bytes.
    pub fn max_static_shared_bytes(self) -> usize {
        48 * 1024
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.capability)
    }
}

impl FromStr for Arch {
    type Err = CudaError;

    /// Parses `sm_80`, `compute_80` or `80`.
    fn from_str(s: &str) -> Result<Arch, CudaError> {
        let digits = s
            .strip_prefix("sm_")
            .or_else(|| s.strip_prefix("compute_"))
            .unwrap_or(s);
        digits
            .parse::<u32>()
            .map_err(|_| CudaError::UnsupportedArch(s.to_string()))
            .and_then(Arch::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_architectures() {
        let a: Arch = "sm_90".parse().unwrap();
        assert_eq!(a, Arch::SM90);
        assert_eq!(a.virtual_name(), "compute_90");
        assert_eq!("compute_80".parse::<Arch>().unwrap().real_name(), "sm_80");
        assert!("sm_61".parse::<Arch>().is_err());
        assert!("gfx90a".parse::<Arch>().is_err());
    }
}
