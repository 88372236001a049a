//! A compiled kernel image: what NVRTC produced and the driver loads.

use crate::arch::Arch;

/// The two forms of compiled device code the driver can load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// Machine code for one real architecture (`sm_90`); loads without JIT compilation,
    /// only on that architecture's family.
    Cubin,
    /// PTX assembly for a virtual architecture (`compute_90`); the driver JIT-compiles it
    /// at load time, on that architecture and every newer one.
    Ptx,
}

impl ImageKind {
    /// The file extension of an image of this kind (`cubin`, `ptx`).
    pub fn extension(self) -> &'static str {
        match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        }
    }

    /// The kind whose [`ImageKind::extension`] is `ext`.
    pub fn from_extension(ext: &str) -> Option<ImageKind> {
        match ext {
            "cubin" => Some(ImageKind::Cubin),
            "ptx" => Some(ImageKind::Ptx),
            _ => None,
        }
    }
}

impl std::fmt::Display for ImageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.extension())
    }
}

/// Compiled device code for one translation unit and architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelImage {
    pub kind: ImageKind,
    /// The architecture it was compiled for.
    pub arch: Arch,
    /// The image: cubin bytes, or PTX text without a trailing NUL.
    pub bytes: Vec<u8>,
    /// NVRTC's log (warnings); empty when there were none or the image came from a cache.
    pub log: String,
}

impl KernelImage {
    /// The PTX text, when this is a PTX image.
    pub fn ptx_text(&self) -> Option<&str> {
        match self.kind {
            ImageKind::Ptx => std::str::from_utf8(&self.bytes).ok(),
            ImageKind::Cubin => None,
        }
    }
}
