//! Assembling PTX with `ptxas -v` and reading the per-kernel resource usage
//! it reports (registers, spills, shared memory).
//!
//! `ptxas` is found in this order:
//! 1. `$HIDET_PTXAS`; when set, nothing else is tried;
//! 2. `nvidia/cuda_nvcc/bin/ptxas` in the site-packages of the virtual
//!    environments listed in [`crate::locate`] (the PyPI wheel
//!    `nvidia-cuda-nvcc-cu12` that `scripts/setup_python.sh` installs);
//! 3. `ptxas` on `$PATH`.

use crate::arch::Arch;
use crate::artifacts;
use crate::error::CudaError;
use crate::locate;
use crate::nvrtc::Ptx;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Resources one kernel (or device function) uses, as reported by `ptxas -v`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// The (mangled, unless `extern "C"`) function name.
    pub name: String,
    /// Whether this is a `__global__` entry (rather than a device function).
    pub is_entry: bool,
    pub registers: u32,
    pub spill_store_bytes: u64,
    pub spill_load_bytes: u64,
    pub stack_frame_bytes: u64,
    /// Static shared memory (`smem`) in bytes.
    pub shared_bytes: u64,
}

impl KernelResources {
    /// Whether registers were spilled to local memory.
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

/// What `ptxas -v` reported for one PTX module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxasReport {
    pub arch: Arch,
    /// One entry per function, in the order `ptxas` reported them.
    pub kernels: Vec<KernelResources>,
    /// The size of the assembled cubin in bytes.
    pub cubin_bytes: u64,
}

impl PtxasReport {
    /// The resources of the function called `name`.
    pub fn kernel(&self, name: &str) -> Option<&KernelResources> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// The functions that spill registers.
    pub fn spilling(&self) -> impl Iterator<Item = &KernelResources> {
        self.kernels.iter().filter(|k| k.spills())
    }
}

/// Finds `ptxas` (see the module docs for the search order).
pub fn locate_ptxas() -> Result<PathBuf, CudaError> {
    if let Some(path) = std::env::var_os("HIDET_PTXAS").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(CudaError::PtxasNotFound {
                searched: vec![format!("$HIDET_PTXAS={}", path.display())],
            })
        };
    }
    let mut searched = Vec::new();
    if let Some(p) = locate::in_site_packages("nvidia/cuda_nvcc/bin/ptxas", &mut searched)
        .into_iter()
        .next()
    {
        return Ok(p);
    }
    searched.push("ptxas on $PATH".to_string());
    locate::in_path("ptxas")
        .into_iter()
        .next()
        .ok_or(CudaError::PtxasNotFound { searched })
}

/// Assembles `ptx` for its architecture with `ptxas -v` and returns the
/// reported resources. The PTX and the cubin go to a temporary directory
/// that is removed afterwards; on failure the PTX is kept (see
/// [`artifacts::kept_dir`]) and named in the error.
pub fn assemble(name: &str, ptx: &Ptx) -> Result<PtxasReport, CudaError> {
    let ptxas = locate_ptxas()?;
    assemble_with(&ptxas, name, ptx)
}

/// [`assemble`] with an explicit `ptxas` executable.
pub fn assemble_with(ptxas: &Path, name: &str, ptx: &Ptx) -> Result<PtxasReport, CudaError> {
    let dir = ScratchDir::new(name)?;
    let ptx_path = dir.path.join("kernel.ptx");
    let cubin_path = dir.path.join("kernel.cubin");
    std::fs::write(&ptx_path, &ptx.text).map_err(|source| CudaError::Io {
        action: "writing",
        path: ptx_path.clone(),
        source,
    })?;
    let output = Command::new(ptxas)
        .arg("-v")
        .arg(format!("-arch={}", ptx.arch.real_name()))
        .arg("-o")
        .arg(&cubin_path)
        .arg(&ptx_path)
        .output()
        .map_err(|source| CudaError::Io {
            action: "running",
            path: ptxas.to_path_buf(),
            source,
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let kept = artifacts::keep(name, "ptx", &ptx.text)?;
        return Err(CudaError::Ptxas {
            arch: ptx.arch.to_string(),
            status: output.status.to_string(),
            stderr: format!("{stdout}{stderr}"),
            ptx_path: kept,
        });
    }
    let kernels = parse_verbose_output(&format!("{stdout}{stderr}"))?;
    let cubin_bytes = std::fs::metadata(&cubin_path).map(|m| m.len()).unwrap_or(0);
    Ok(PtxasReport {
        arch: ptx.arch,
        kernels,
        cubin_bytes,
    })
}

/// A uniquely named temporary directory, removed on drop.
struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    fn new(stem: &str) -> Result<ScratchDir, CudaError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let safe: String = stem
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(40)
            .collect();
        let path = std::env::temp_dir().join(format!(
            "hidet-ptxas-{}-{}-{safe}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).map_err(|source| CudaError::Io {
            action: "creating directory",
            path: path.clone(),
            source,
        })?;
        Ok(ScratchDir { path })
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The numbers before each of `units` in a comma-separated `ptxas` line,
/// e.g. `"Used 8 registers, 352 bytes cmem[0]"` → registers 8.
fn number_before(line: &str, unit: &str) -> Option<u64> {
    let at = line.find(unit)?;
    line[..at].split_whitespace().last()?.parse().ok()
}

/// Parses the output of `ptxas -v` into per-function resources.
///
/// Recognised lines (others are ignored):
/// `Compiling entry function 'NAME' for 'sm_80'`, `Function properties for NAME`,
/// `N bytes stack frame, N bytes spill stores, N bytes spill loads`,
/// `Used N registers[, N bytes smem][, …]`.
pub fn parse_verbose_output(text: &str) -> Result<Vec<KernelResources>, CudaError> {
    let mut kernels: Vec<KernelResources> = Vec::new();
    let mut current: Option<usize> = None;
    let index_of = |kernels: &mut Vec<KernelResources>, name: &str, entry: bool| -> usize {
        if let Some(i) = kernels.iter().position(|k| k.name == name) {
            kernels[i].is_entry |= entry;
            return i;
        }
        kernels.push(KernelResources {
            name: name.to_string(),
            is_entry: entry,
            ..KernelResources::default()
        });
        kernels.len() - 1
    };
    for raw in text.lines() {
        let line = raw.trim();
        let body = line
            .strip_prefix("ptxas info")
            .map(|rest| rest.trim_start().trim_start_matches(':').trim())
            .unwrap_or(line);
        if let Some(rest) = body
            .strip_prefix("Compiling entry function '")
            .or_else(|| body.strip_prefix("Function properties for "))
        {
            let entry = body.starts_with("Compiling entry function");
            let name = rest.split('\'').next().unwrap_or(rest).trim();
            current = Some(index_of(&mut kernels, name, entry));
        } else if body.contains("bytes stack frame") {
            let k =
                current
                    .and_then(|i| kernels.get_mut(i))
                    .ok_or_else(|| CudaError::PtxasOutput {
                        line: raw.to_string(),
                    })?;
            k.stack_frame_bytes = number_before(body, "bytes stack frame").unwrap_or(0);
            k.spill_store_bytes = number_before(body, "bytes spill stores").unwrap_or(0);
            k.spill_load_bytes = number_before(body, "bytes spill loads").unwrap_or(0);
        } else if body.starts_with("Used ") && body.contains("registers") {
            let k =
                current
                    .and_then(|i| kernels.get_mut(i))
                    .ok_or_else(|| CudaError::PtxasOutput {
                        line: raw.to_string(),
                    })?;
            k.registers = number_before(body, "registers")
                .and_then(|r| u32::try_from(r).ok())
                .ok_or_else(|| CudaError::PtxasOutput {
                    line: raw.to_string(),
                })?;
            k.shared_bytes = number_before(body, "bytes smem").unwrap_or(0);
        }
    }
    Ok(kernels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ptxas_verbose_output() {
        let text = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'mm_kernel' for 'sm_80'
ptxas info    : Function properties for mm_kernel
    16 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 127 registers, 16384 bytes smem, 380 bytes cmem[0]
ptxas info    : Function properties for helper
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'other' for 'sm_80'
ptxas info    : Function properties for other
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 9 registers, 360 bytes cmem[0]
";
        let ks = parse_verbose_output(text).unwrap();
        assert_eq!(ks.len(), 3);
        let mm = &ks[0];
        assert_eq!(mm.name, "mm_kernel");
        assert!(mm.is_entry);
        assert_eq!(mm.registers, 127);
        assert_eq!(mm.shared_bytes, 16384);
        assert_eq!((mm.spill_store_bytes, mm.spill_load_bytes), (12, 20));
        assert_eq!(mm.stack_frame_bytes, 16);
        assert!(mm.spills());
        assert!(!ks[1].is_entry);
        assert_eq!(ks[2].registers, 9);
        assert!(!ks[2].spills());
    }

    #[test]
    fn numbers_without_a_function_are_rejected() {
        assert!(parse_verbose_output("ptxas info    : Used 3 registers").is_err());
    }
}
