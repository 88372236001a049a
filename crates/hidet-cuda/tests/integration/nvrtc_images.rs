//! NVRTC to cubin and PTX for sm_80 and sm_90, on the SIMT matmul template and a small
//! kernel. Skips (saying so) when NVRTC is not installed; `scripts/setup_python.sh`
//! installs it.

use hidet_cuda::templates::matmul_simt::{build, kernel_name, showcase_schedules};
use hidet_cuda::{emit_cuda, Arch, CompileOptions, CudaError, ImageKind, Nvrtc};

fn nvrtc_or_skip() -> Option<&'static Nvrtc> {
    match Nvrtc::global() {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("skipped: NVRTC not found ({e})");
            None
        }
    }
}

/// The ELF header of a cubin: magic, 64-bit class, and the CUDA machine (EM_CUDA = 190).
fn assert_cubin(bytes: &[u8]) {
    assert!(bytes.len() > 64, "a cubin of {} bytes", bytes.len());
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!(bytes[4], 2, "ELFCLASS64");
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 190, "EM_CUDA");
}

#[test]
fn the_simt_matmul_compiles_to_cubins_and_ptx_for_sm80_and_sm90() {
    let Some(nvrtc) = nvrtc_or_skip() else {
        return;
    };
    assert!(
        nvrtc.supports_cubin(),
        "NVRTC {:?} has nvrtcGetCUBIN",
        nvrtc.version()
    );
    assert_eq!(nvrtc.image_kind(), ImageKind::Cubin);
    let schedule = showcase_schedules()[0];
    let name = kernel_name(&schedule);
    let source = emit_cuda(&build(333, 517, 129, &schedule).unwrap()).unwrap();
    let opts = CompileOptions::default();
    for arch in [Arch::SM80, Arch::SM90] {
        let cubin = nvrtc.compile_to_cubin(&name, &source, arch, &opts).unwrap();
        assert_eq!(cubin.kind, ImageKind::Cubin);
        assert_eq!(cubin.arch, arch);
        assert_cubin(&cubin.bytes);
        // The kernel's symbol is in the cubin's string table.
        assert!(
            cubin
                .bytes
                .windows(name.len())
                .any(|w| w == name.as_bytes()),
            "{name} in the cubin"
        );
        let image = nvrtc.compile_image(&name, &source, arch, &opts).unwrap();
        assert_eq!(image.kind, ImageKind::Cubin);
        let ptx = nvrtc.compile_to_ptx(&name, &source, arch, &opts).unwrap();
        assert!(ptx
            .text
            .contains(&format!(".target sm_{}", arch.capability())));
        assert!(ptx.text.contains(&format!(".entry {name}(")));
    }
}

#[test]
fn compile_errors_keep_the_source_for_cubins_too() {
    let Some(nvrtc) = nvrtc_or_skip() else {
        return;
    };
    let err = nvrtc
        .compile_to_cubin(
            "broken",
            "extern \"C\" __global__ void broken() { undefined_name(); }",
            Arch::SM90,
            &CompileOptions::default(),
        )
        .unwrap_err();
    match err {
        CudaError::Compile {
            log, source_path, ..
        } => {
            assert!(log.contains("undefined_name"), "{log}");
            assert!(source_path.is_file());
        }
        other => panic!("expected a compile error, got {other}"),
    }
}
