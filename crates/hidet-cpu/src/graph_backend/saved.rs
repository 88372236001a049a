//! Saving a built CPU module with a compiled model, and loading it with no C compiler: the
//! manifest names the target's architecture and features and, per library, each kernel's
//! signature; the libraries themselves are blobs of the saved model.
//!
//! Loading refuses, before any library is opened, a module compiled for an architecture or
//! for CPU features this machine lacks, naming them. The libraries are written to a private
//! temporary folder, opened (they stay loaded for the process, see
//! [`crate::module::CompiledModule`]) and the folder is removed.

use hidet_graph::compiled::{ArtifactReader, ArtifactWriter, BackendError, BlobId};
use hidet_ir::dtype::{DataType, ScalarType};
use hidet_ir::expr::{Expr, Var};
use hidet_ir::ty::Type;
use serde::{Deserialize, Serialize};

use super::{BoundSizes, CpuBackend, CpuGraphModule, KernelOrigin};
use crate::module::CompiledModule;
use crate::signature::{KernelSignature, ParamKind, ParamSpec};
use crate::target::{CpuFeatures, CpuTarget};

/// One parameter of a saved kernel: a dense buffer of constant size, or of a size given per
/// kernel of the module (`per_kernel`, for a kernel with size parameters), or a size
/// parameter (`scalar`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedParam {
    name: String,
    /// [`ScalarType::name`] of the element (or scalar) type.
    dtype: String,
    shape: Vec<i64>,
    /// Elements of storage the kernel may touch.
    size: i64,
    written: bool,
    #[serde(default)]
    scalar: bool,
    #[serde(default)]
    per_kernel: bool,
}

/// The size values one kernel of the module is called with, and the elements each of its
/// tensor parameters spans under them.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedSizes {
    values: Vec<i64>,
    elements: Vec<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedKernel {
    name: String,
    params: Vec<SavedParam>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedLibrary {
    name: String,
    library: BlobId,
    kernels: Vec<SavedKernel>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedCpuModule {
    /// `Debug` name of the target's [`crate::target::Arch`].
    arch: String,
    /// The target's features, by name (see [`CpuFeatures::names`]).
    features: Vec<String>,
    libraries: Vec<SavedLibrary>,
    /// `(library, kernel)` of each kernel of the module.
    index: Vec<(usize, usize)>,
    origins: Vec<String>,
    /// Per kernel of the module, its size values when it has size parameters.
    #[serde(default)]
    sizes: Vec<Option<SavedSizes>>,
}

fn artifact_error(message: impl Into<String>) -> BackendError {
    BackendError::Artifact(message.into())
}

fn save_signature(signature: &KernelSignature) -> Result<SavedKernel, BackendError> {
    let params = signature
        .params
        .iter()
        .map(|p| {
            let (dtype, shape, size, written) = match &p.kind {
                ParamKind::Tensor {
                    dtype,
                    shape,
                    size,
                    written,
                } => (dtype, shape, size, written),
                ParamKind::Scalar(dtype) if !dtype.is_vector() => {
                    return Ok(SavedParam {
                        name: p.name().to_string(),
                        dtype: dtype.scalar.name().to_string(),
                        shape: Vec::new(),
                        size: 0,
                        written: false,
                        scalar: true,
                        per_kernel: false,
                    })
                }
                _ => {
                    return Err(artifact_error(format!(
                        "kernel `{}`: parameter `{}` is neither a tensor nor a size, which \
                         saved models do not hold",
                        signature.kernel,
                        p.name()
                    )))
                }
            };
            if dtype.is_vector() {
                return Err(artifact_error(format!(
                    "kernel `{}`: parameter `{}` has a vector element type",
                    signature.kernel,
                    p.name()
                )));
            }
            let constants: Option<(Vec<i64>, i64)> = shape
                .iter()
                .map(Expr::as_int)
                .collect::<Option<_>>()
                .zip(size.as_int());
            let Some((shape, size)) = constants else {
                // Sized by the kernel's size parameters: the module records the storage
                // each of its kernels spans.
                return Ok(SavedParam {
                    name: p.name().to_string(),
                    dtype: dtype.scalar.name().to_string(),
                    shape: Vec::new(),
                    size: 0,
                    written: *written,
                    scalar: false,
                    per_kernel: true,
                });
            };
            Ok(SavedParam {
                name: p.name().to_string(),
                dtype: dtype.scalar.name().to_string(),
                shape,
                size,
                written: *written,
                scalar: false,
                per_kernel: false,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(SavedKernel {
        name: signature.kernel.clone(),
        params,
    })
}

fn load_signature(saved: &SavedKernel) -> Result<KernelSignature, BackendError> {
    let params = saved
        .params
        .iter()
        .map(|p| {
            let scalar = ScalarType::ALL
                .into_iter()
                .find(|s| s.name() == p.dtype)
                .ok_or_else(|| {
                    artifact_error(format!(
                        "kernel `{}`: unknown element type `{}`",
                        saved.name, p.dtype
                    ))
                })?;
            if p.size < 0 || p.shape.iter().any(|&d| d < 0) {
                return Err(artifact_error(format!(
                    "kernel `{}`: parameter `{}` has a negative size",
                    saved.name, p.name
                )));
            }
            let dtype = DataType::scalar(scalar);
            if p.scalar {
                return Ok(ParamSpec {
                    var: Var::new(p.name.clone(), dtype),
                    kind: ParamKind::Scalar(dtype),
                });
            }
            // A buffer sized per kernel (`per_kernel`) is checked against the module's
            // recorded sizes; its signature holds none.
            let shape: Vec<Expr> = p.shape.iter().map(|&d| Expr::int(d)).collect();
            // The variable's type is informational (calls are checked against `kind`).
            let var = Var::new(
                p.name.clone(),
                Type::tensor(dtype, hidet_ir::layout::row_major(shape.clone())),
            );
            Ok(ParamSpec {
                var,
                kind: ParamKind::Tensor {
                    dtype,
                    shape,
                    size: Expr::int(p.size),
                    written: p.written,
                },
            })
        })
        .collect::<Result<_, BackendError>>()?;
    Ok(KernelSignature {
        kernel: saved.name.clone(),
        params,
    })
}

fn origin_name(origin: KernelOrigin) -> &'static str {
    match origin {
        KernelOrigin::Template => "template",
        KernelOrigin::FusedTemplate => "fused-template",
        KernelOrigin::Scheduler => "scheduler",
        KernelOrigin::Inlined => "inlined",
    }
}

fn origin_of(name: &str) -> Result<KernelOrigin, BackendError> {
    Ok(match name {
        "template" => KernelOrigin::Template,
        "fused-template" => KernelOrigin::FusedTemplate,
        "scheduler" => KernelOrigin::Scheduler,
        "inlined" => KernelOrigin::Inlined,
        other => return Err(artifact_error(format!("unknown kernel origin `{other}`"))),
    })
}

/// The manifest of `module` (built by `backend`), with its libraries added to `blobs`.
pub(super) fn save(
    backend: &CpuBackend,
    module: &CpuGraphModule,
    blobs: &mut ArtifactWriter,
) -> Result<serde_json::Value, BackendError> {
    let target = backend.options.build.target();
    let libraries = module
        .units
        .iter()
        .map(|unit| {
            let bytes = std::fs::read(unit.library_path()).map_err(|e| {
                artifact_error(format!(
                    "reading kernel library {}: {e}",
                    unit.library_path().display()
                ))
            })?;
            Ok(SavedLibrary {
                name: unit.name().to_string(),
                library: blobs.add(bytes),
                kernels: unit
                    .kernels()
                    .iter()
                    .map(|k| save_signature(k.signature()))
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<_, BackendError>>()?;
    let saved = SavedCpuModule {
        arch: format!("{:?}", target.arch),
        features: target
            .features
            .names()
            .into_iter()
            .map(String::from)
            .collect(),
        libraries,
        index: module.index.clone(),
        origins: module
            .origins
            .iter()
            .map(|o| origin_name(*o).to_string())
            .collect(),
        sizes: module
            .bound
            .iter()
            .map(|b| {
                b.as_ref().map(|b| SavedSizes {
                    values: b.values.iter().filter_map(|v| v.as_index()).collect(),
                    elements: b.elements.clone(),
                })
            })
            .collect(),
    };
    serde_json::to_value(saved).map_err(|e| artifact_error(e.to_string()))
}

/// The target a saved module was compiled for, or an error naming what `here` (the machine
/// this process runs on) lacks.
fn check_target(saved: &SavedCpuModule, here: &CpuTarget) -> Result<CpuTarget, BackendError> {
    let arch = format!("{:?}", here.arch);
    if saved.arch != arch {
        return Err(artifact_error(format!(
            "the model was compiled for {} CPUs; this one is {arch}",
            saved.arch
        )));
    }
    let features = CpuFeatures::parse(&saved.features.join(","))
        .map_err(|e| artifact_error(format!("the model's CPU features: {e}")))?;
    let missing = features.missing_from(&here.features);
    if !missing.is_empty() {
        return Err(artifact_error(format!(
            "the model was compiled for a CPU with {}; this CPU ({}) lacks {}: compile the \
             model on (or for) this CPU",
            saved.features.join(", "),
            here.model,
            missing.join(", ")
        )));
    }
    here.with_features(features)
        .map_err(|e| artifact_error(format!("the model's CPU features: {e}")))
}

/// Loads a module that [`save`] wrote (see the module docs), its parallel loops on
/// `threads` threads.
pub(super) fn load(
    manifest: &serde_json::Value,
    blobs: &ArtifactReader,
    threads: usize,
) -> Result<CpuGraphModule, BackendError> {
    let saved = SavedCpuModule::deserialize(manifest)
        .map_err(|e| artifact_error(format!("{}: the CPU module: {e}", blobs.path().display())))?;
    let target = check_target(&saved, CpuTarget::detected())?;
    if saved.origins.len() != saved.index.len() {
        return Err(artifact_error(
            "the CPU module's kernel list is inconsistent",
        ));
    }
    for &(library, kernel) in &saved.index {
        let fits = saved
            .libraries
            .get(library)
            .is_some_and(|l| kernel < l.kernels.len());
        if !fits {
            return Err(artifact_error(format!(
                "the CPU module names kernel {kernel} of library {library}, which does not exist"
            )));
        }
    }
    let folder = tempfile::Builder::new()
        .prefix("hidet-model-")
        .tempdir()
        .map_err(|e| artifact_error(format!("a folder for the kernel libraries: {e}")))?;
    let mut units = Vec::with_capacity(saved.libraries.len());
    for (i, library) in saved.libraries.iter().enumerate() {
        let bytes = blobs
            .blob(library.library)
            .map_err(|e| artifact_error(e.to_string()))?;
        let path = folder.path().join(format!("lib{i}.so"));
        std::fs::write(&path, bytes)
            .map_err(|e| artifact_error(format!("writing {}: {e}", path.display())))?;
        let signatures = library
            .kernels
            .iter()
            .map(load_signature)
            .collect::<Result<Vec<_>, _>>()?;
        let unit = CompiledModule::load_with_signatures(&library.name, &path, signatures)
            .map_err(|e| artifact_error(e.to_string()))?
            .compiled_for(&target);
        // A library without parallel loops may lack the setter; its kernels are serial.
        let _ = unit.set_num_threads(threads);
        units.push(unit);
    }
    // The libraries stay mapped after their files are removed.
    drop(folder);
    let mut bound = Vec::with_capacity(saved.index.len());
    for (k, &(library, kernel)) in saved.index.iter().enumerate() {
        let signature = units[library].kernels()[kernel].signature();
        let per_kernel = saved.libraries[library].kernels[kernel]
            .params
            .iter()
            .any(|p| p.scalar || p.per_kernel);
        bound.push(match saved.sizes.get(k).cloned().flatten() {
            None if per_kernel => {
                return Err(artifact_error(format!(
                    "kernel {k} of the CPU module has size parameters but no sizes"
                )))
            }
            None => None,
            Some(sizes) => Some(
                BoundSizes::loaded(signature, &sizes.values, sizes.elements)
                    .map_err(|e| artifact_error(format!("kernel {k} of the CPU module: {e}")))?,
            ),
        });
    }
    Ok(CpuGraphModule {
        units,
        index: saved.index,
        origins: saved
            .origins
            .iter()
            .map(|o| origin_of(o))
            .collect::<Result<_, _>>()?,
        tunables: vec![None; saved.origins.len()],
        bound,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module_for(features: &[&str]) -> SavedCpuModule {
        SavedCpuModule {
            arch: format!("{:?}", CpuTarget::detected().arch),
            features: features.iter().map(|f| f.to_string()).collect(),
            libraries: Vec::new(),
            index: Vec::new(),
            origins: Vec::new(),
            sizes: Vec::new(),
        }
    }

    #[test]
    fn a_module_for_features_this_cpu_lacks_is_refused_naming_them() {
        let avx2_host = CpuTarget::detected()
            .with_features(CpuFeatures::parse("avx2,fma").expect("known features"))
            .expect("x86-64 features");
        let avx512 = module_for(&["avx512f", "avx512bw", "avx2", "fma", "avx", "sse2"]);
        let message = check_target(&avx512, &avx2_host)
            .expect_err("AVX-512 kernels on an AVX2 CPU")
            .to_string();
        assert!(
            message.contains("lacks avx512f, avx512bw"),
            "the error names the missing features: {message}"
        );
        let target = check_target(&module_for(&["avx2", "fma"]), &avx2_host)
            .expect("AVX2 kernels on an AVX2 CPU");
        assert_eq!(target.features.names(), ["sse2", "avx", "avx2", "fma"]);
        assert!(
            check_target(&module_for(&[]), &avx2_host).is_ok(),
            "scalar code runs anywhere"
        );
        let other_arch = SavedCpuModule {
            arch: "Other".into(),
            ..module_for(&[])
        };
        let message = check_target(&other_arch, &avx2_host)
            .expect_err("another architecture")
            .to_string();
        assert!(message.contains("compiled for Other CPUs"), "{message}");
        assert!(check_target(&module_for(&["avx1024"]), &avx2_host).is_err());
    }
}
