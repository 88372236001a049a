//! The CPU kernels are built for: instruction-set features, model name, core count, and the
//! C compiler flags and SIMD width derived from them.
//!
//! By default that is the machine this process runs on. `HIDET_CPU_FEATURES` (a
//! comma-separated list such as `avx2,fma`, or `native`) replaces the detected features of
//! [`CpuTarget::host`], so code for another CPU can be generated and compiled here; kernels
//! whose target needs a feature this machine lacks refuse to run
//! ([`CpuTarget::missing_here`]). The Rust API sets the same with
//! [`crate::BuildOptions::target`] and [`CpuTarget::with_features`].

use std::fmt;
use std::sync::OnceLock;

/// The instruction-set architecture family of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
    Other,
}

/// The environment variable that forces the features of [`CpuTarget::host`].
pub const CPU_FEATURES_ENV: &str = "HIDET_CPU_FEATURES";

/// An invalid CPU feature list (`HIDET_CPU_FEATURES` or [`CpuFeatures::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("unknown CPU feature `{name}` in `{list}` (known: {known}, or `native`)")]
    UnknownFeature {
        name: String,
        list: String,
        known: String,
    },
    #[error("CPU feature `{name}` does not exist on {arch:?}")]
    WrongArch { name: String, arch: Arch },
    #[error("{CPU_FEATURES_ENV}=`{value}`: {source}")]
    Env {
        value: String,
        #[source]
        source: Box<TargetError>,
    },
}

/// SIMD-relevant instruction-set extensions of a CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuFeatures {
    pub sse2: bool,
    pub avx: bool,
    pub avx2: bool,
    pub fma: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512dq: bool,
    pub avx512vl: bool,
    /// AVX-512 VNNI: `vpdpbusd`, four 8-bit products summed into each 32-bit lane.
    pub avx512vnni: bool,
    /// AVX-VNNI: the same on 256-bit vectors without AVX-512.
    pub avxvnni: bool,
    pub neon: bool,
}

impl CpuFeatures {
    /// The features of the machine this process runs on.
    pub fn detect() -> CpuFeatures {
        #[cfg(target_arch = "x86_64")]
        {
            CpuFeatures {
                sse2: std::arch::is_x86_feature_detected!("sse2"),
                avx: std::arch::is_x86_feature_detected!("avx"),
                avx2: std::arch::is_x86_feature_detected!("avx2"),
                fma: std::arch::is_x86_feature_detected!("fma"),
                avx512f: std::arch::is_x86_feature_detected!("avx512f"),
                avx512bw: std::arch::is_x86_feature_detected!("avx512bw"),
                avx512dq: std::arch::is_x86_feature_detected!("avx512dq"),
                avx512vl: std::arch::is_x86_feature_detected!("avx512vl"),
                avx512vnni: std::arch::is_x86_feature_detected!("avx512vnni"),
                avxvnni: std::arch::is_x86_feature_detected!("avxvnni"),
                neon: false,
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            CpuFeatures {
                neon: std::arch::is_aarch64_feature_detected!("neon"),
                ..CpuFeatures::default()
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            CpuFeatures::default()
        }
    }

    /// Every feature this type knows, by name, with its flag.
    fn flags(&self) -> [(bool, &'static str); 11] {
        [
            (self.sse2, "sse2"),
            (self.avx, "avx"),
            (self.avx2, "avx2"),
            (self.fma, "fma"),
            (self.avx512f, "avx512f"),
            (self.avx512bw, "avx512bw"),
            (self.avx512dq, "avx512dq"),
            (self.avx512vl, "avx512vl"),
            (self.avx512vnni, "avx512vnni"),
            (self.avxvnni, "avxvnni"),
            (self.neon, "neon"),
        ]
    }

    fn flag_mut(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "sse2" => &mut self.sse2,
            "avx" => &mut self.avx,
            "avx2" => &mut self.avx2,
            "fma" => &mut self.fma,
            "avx512f" => &mut self.avx512f,
            "avx512bw" => &mut self.avx512bw,
            "avx512dq" => &mut self.avx512dq,
            "avx512vl" => &mut self.avx512vl,
            "avx512vnni" => &mut self.avx512vnni,
            "avxvnni" => &mut self.avxvnni,
            "neon" => &mut self.neon,
            _ => return None,
        })
    }

    /// The names of the features that are on, in a fixed order (used in cache
    /// keys and reports).
    pub fn names(&self) -> Vec<&'static str> {
        self.flags()
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect()
    }

    /// The features of a comma-separated list of names (`"avx2,fma"`; case and spaces are
    /// ignored), with the features each implies on x86-64 added: `avx512*` implies
    /// `avx512f`, `avx512f` implies `avx2` and `fma`, `avxvnni` implies `avx2`, `avx2` implies
    /// `avx`, and `avx` implies `sse2`. An empty list is no feature at all (scalar code).
    pub fn parse(list: &str) -> Result<CpuFeatures, TargetError> {
        let mut features = CpuFeatures::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let name = name.to_ascii_lowercase();
            match features.flag_mut(&name) {
                Some(flag) => *flag = true,
                None => {
                    let known: Vec<&str> = features.flags().iter().map(|(_, n)| *n).collect();
                    return Err(TargetError::UnknownFeature {
                        name,
                        list: list.to_string(),
                        known: known.join(", "),
                    });
                }
            }
        }
        let f = &mut features;
        f.avx512f |= f.avx512bw || f.avx512dq || f.avx512vl || f.avx512vnni;
        f.avx2 |= f.avx512f || f.avxvnni;
        f.fma |= f.avx512f;
        f.avx |= f.avx2 || f.fma;
        f.sse2 |= f.avx;
        Ok(features)
    }

    /// The features on in `self` and off in `available`, by name.
    pub fn missing_from(&self, available: &CpuFeatures) -> Vec<&'static str> {
        self.flags()
            .into_iter()
            .zip(available.flags())
            .filter_map(|((wanted, name), (have, _))| (wanted && !have).then_some(name))
            .collect()
    }

    /// Whether every feature is one of `arch`.
    fn check_arch(&self, arch: Arch) -> Result<(), TargetError> {
        let foreign: &[&str] = match arch {
            Arch::X86_64 => &["neon"],
            Arch::Aarch64 => &[
                "sse2",
                "avx",
                "avx2",
                "fma",
                "avx512f",
                "avx512bw",
                "avx512dq",
                "avx512vl",
                "avx512vnni",
                "avxvnni",
            ],
            Arch::Other => &[],
        };
        match self.names().into_iter().find(|n| foreign.contains(n)) {
            Some(name) => Err(TargetError::WrongArch {
                name: name.to_string(),
                arch,
            }),
            None => Ok(()),
        }
    }
}

/// A description of a CPU to generate and compile kernels for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CpuTarget {
    pub arch: Arch,
    /// The CPU model name as the OS reports it (`"unknown"` when unavailable).
    pub model: String,
    /// Logical cores available to this process.
    pub cores: usize,
    pub features: CpuFeatures,
}

impl CpuTarget {
    /// The CPU kernels are built for by default: the machine this process runs on
    /// ([`CpuTarget::detected`]), with its features replaced by `HIDET_CPU_FEATURES` when that
    /// is set ([`CpuTarget::from_env`]). Read once per process. An invalid
    /// `HIDET_CPU_FEATURES` is reported on stderr once and ignored; call
    /// [`CpuTarget::try_host`] to get it as an error instead.
    pub fn host() -> &'static CpuTarget {
        CpuTarget::try_host().unwrap_or_else(|error| {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| eprintln!("warning: {error}; using the detected CPU features"));
            CpuTarget::detected()
        })
    }

    /// [`CpuTarget::host`], or the error in `HIDET_CPU_FEATURES`.
    pub fn try_host() -> Result<&'static CpuTarget, TargetError> {
        static HOST: OnceLock<Result<CpuTarget, TargetError>> = OnceLock::new();
        HOST.get_or_init(CpuTarget::from_env)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The machine this process runs on, detected once per process (never overridden).
    pub fn detected() -> &'static CpuTarget {
        static DETECTED: OnceLock<CpuTarget> = OnceLock::new();
        DETECTED.get_or_init(CpuTarget::detect)
    }

    /// The detected machine with the features of `HIDET_CPU_FEATURES` when it is set and not
    /// `native` (read now).
    pub fn from_env() -> Result<CpuTarget, TargetError> {
        let detected = CpuTarget::detect();
        match std::env::var(CPU_FEATURES_ENV) {
            Ok(value) if !value.trim().eq_ignore_ascii_case("native") => {
                let env_error = |source| TargetError::Env {
                    value: value.clone(),
                    source: Box::new(source),
                };
                let features = CpuFeatures::parse(&value).map_err(env_error)?;
                detected.with_features(features).map_err(env_error)
            }
            _ => Ok(detected),
        }
    }

    /// This CPU with exactly `features` (for example to generate AVX-512 code on a machine
    /// without it); an error when one of them does not exist on this architecture.
    pub fn with_features(&self, features: CpuFeatures) -> Result<CpuTarget, TargetError> {
        features.check_arch(self.arch)?;
        Ok(CpuTarget {
            features,
            ..self.clone()
        })
    }

    /// The features kernels built for this target need and the machine this process runs
    /// on lacks (empty when they can run here).
    pub fn missing_here(&self) -> Vec<&'static str> {
        if self.arch != CpuTarget::detected().arch {
            return self.features.names();
        }
        self.features.missing_from(&CpuTarget::detected().features)
    }

    /// Detects the host CPU now (never overridden).
    pub fn detect() -> CpuTarget {
        let arch = if cfg!(target_arch = "x86_64") {
            Arch::X86_64
        } else if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            Arch::Other
        };
        CpuTarget {
            arch,
            model: detect_model_name().unwrap_or_else(|| "unknown".to_string()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            features: CpuFeatures::detect(),
        }
    }

    /// The number of `f32` lanes templates should use for one SIMD vector:
    /// 16 with AVX-512F, 8 with AVX2 (or AVX), 4 with NEON or SSE2, else 1.
    pub fn f32_lanes(&self) -> u16 {
        let f = &self.features;
        if f.avx512f {
            16
        } else if f.avx2 || f.avx {
            8
        } else if f.neon || f.sse2 {
            4
        } else {
            1
        }
    }

    /// The SIMD registers a kernel may keep live: 32 with AVX-512 or NEON, 16 with AVX or
    /// SSE (x86-64 without AVX-512), 8 otherwise.
    pub fn vector_registers(&self) -> usize {
        let f = &self.features;
        if f.avx512f || f.neon {
            32
        } else if self.arch == Arch::X86_64 {
            16
        } else {
            8
        }
    }

    /// Whether fused multiply-add is a single instruction on this CPU.
    pub fn has_fma(&self) -> bool {
        self.features.fma || self.features.neon
    }

    /// The ISA flags for the C compiler: explicit `-m…` options for every
    /// detected extension, so that the flags (and therefore cache keys)
    /// state exactly what the generated code may use.
    pub fn isa_flags(&self) -> Vec<String> {
        let f = &self.features;
        let mut flags = Vec::new();
        if self.arch == Arch::X86_64 {
            for (on, flag) in [
                (f.avx, "-mavx"),
                (f.avx2, "-mavx2"),
                (f.fma, "-mfma"),
                (f.avx512f, "-mavx512f"),
                (f.avx512bw, "-mavx512bw"),
                (f.avx512dq, "-mavx512dq"),
                (f.avx512vl, "-mavx512vl"),
                (f.avx512vnni, "-mavx512vnni"),
                (f.avxvnni, "-mavxvnni"),
            ] {
                if on {
                    flags.push(flag.to_string());
                }
            }
            if f.avx512f {
                flags.push("-mprefer-vector-width=512".to_string());
            }
        }
        flags
    }

    /// The complete flags to compile a kernel source into a shared library:
    /// optimization, position-independent shared output, `omp simd` pragmas
    /// (no OpenMP runtime: [`crate::parallel`] runs the parallel loops), FMA
    /// contraction, loops kept as loops (GCC would otherwise turn a short copy loop
    /// whose length is not constant, such as a segment of an im2col row in a packing
    /// loop, into an inline `rep movs` that costs tens of cycles to start), floating-point
    /// operations assumed not to trap (kernels never read the exception flags; without it
    /// GCC will not if-convert a guarded float-to-integer conversion, so a loop quantizing
    /// to int8 stays scalar) and the ISA flags of [`CpuTarget::isa_flags`].
    pub fn cflags(&self) -> Vec<String> {
        let mut flags: Vec<String> = [
            "-O3",
            "-std=gnu11",
            "-shared",
            "-fPIC",
            "-fopenmp-simd",
            "-ffp-contract=fast",
            "-fno-math-errno",
            "-fno-trapping-math",
            "-fno-tree-loop-distribute-patterns",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        flags.extend(self.isa_flags());
        flags
    }
}

impl fmt::Display for CpuTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}, {} cores, features: {})",
            self.model,
            self.arch,
            self.cores,
            self.features.names().join(" ")
        )
    }
}

/// The size in bytes of the host's largest (last-level) data or unified cache, as Linux
/// reports it under `/sys/devices/system/cpu/cpu0/cache`; `None` where it does not.
pub fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|entry| {
        let path = entry.ok()?.path();
        let kind = std::fs::read_to_string(path.join("type")).ok()?;
        if kind.trim() == "Instruction" {
            return None;
        }
        parse_cache_size(&std::fs::read_to_string(path.join("size")).ok()?)
    })
    .max()
}

/// `"32768K"`, `"32M"` or `"512"` as bytes.
fn parse_cache_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

fn detect_model_name() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let key = key.trim();
        let is_model = key == "model name" || key == "Model" || key == "cpu model";
        (is_model && !value.trim().is_empty()).then(|| value.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_with_their_units() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("12Q"), None);
        assert_eq!(parse_cache_size("K"), None);
    }

    #[test]
    fn lanes_follow_the_widest_feature() {
        let mut t = CpuTarget {
            arch: Arch::X86_64,
            model: "test".into(),
            cores: 1,
            features: CpuFeatures {
                sse2: true,
                ..CpuFeatures::default()
            },
        };
        assert_eq!(t.f32_lanes(), 4);
        t.features.avx2 = true;
        t.features.fma = true;
        assert_eq!(t.f32_lanes(), 8);
        assert!(t.isa_flags().contains(&"-mavx2".to_string()));
        assert!(t.isa_flags().contains(&"-mfma".to_string()));
        t.features.avx512f = true;
        assert_eq!(t.f32_lanes(), 16);
        assert!(t.isa_flags().contains(&"-mavx512f".to_string()));
    }

    #[test]
    fn feature_lists_parse_with_what_they_imply() {
        let f = CpuFeatures::parse("AVX2, fma").unwrap();
        assert_eq!(f.names(), ["sse2", "avx", "avx2", "fma"]);
        let f = CpuFeatures::parse("avx512bw").unwrap();
        assert!(f.avx512f && f.avx512bw && f.avx2 && f.fma && !f.avx512vl);
        assert_eq!(CpuFeatures::parse("").unwrap(), CpuFeatures::default());
        let error = CpuFeatures::parse("avx2,avx1024").unwrap_err();
        assert!(error.to_string().contains("`avx1024`"), "{error}");
    }

    #[test]
    fn missing_features_are_named() {
        let avx2 = CpuFeatures::parse("avx2,fma").unwrap();
        let avx512 = CpuFeatures::parse("avx512f,avx512bw,avx512dq,avx512vl").unwrap();
        assert_eq!(
            avx512.missing_from(&avx2),
            ["avx512f", "avx512bw", "avx512dq", "avx512vl"]
        );
        assert!(avx2.missing_from(&avx512).is_empty());
    }

    #[test]
    fn features_of_another_architecture_are_refused() {
        let x86 = CpuTarget {
            arch: Arch::X86_64,
            model: "test".into(),
            cores: 1,
            features: CpuFeatures::default(),
        };
        let neon = CpuFeatures::parse("neon").unwrap();
        assert!(matches!(
            x86.with_features(neon),
            Err(TargetError::WrongArch { .. })
        ));
        let avx2 = CpuFeatures::parse("avx2").unwrap();
        assert_eq!(x86.with_features(avx2).unwrap().f32_lanes(), 8);
    }

    #[test]
    fn host_flags_name_every_detected_x86_extension() {
        let host = CpuTarget::host();
        assert!(host.cores >= 1);
        let flags = host.cflags();
        assert!(flags.contains(&"-fopenmp-simd".to_string()));
        if host.arch == Arch::X86_64 {
            for name in host.features.names() {
                if name != "sse2" && name != "neon" {
                    assert!(flags.contains(&format!("-m{name}")), "{name} missing");
                }
            }
        }
    }
}
