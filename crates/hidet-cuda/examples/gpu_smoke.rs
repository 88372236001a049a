//! A smoke test of the CUDA runtime on a real GPU, from kernels compiled elsewhere.
//!
//! ```text
//! gpu_smoke --prepare [--cache DIR] [--arch sm_90]   # here, with NVRTC: fill the cache
//! gpu_smoke [--cache DIR] [--quick]                   # there, on the GPU: run and time
//! ```
//!
//! `--prepare` compiles every kernel below with NVRTC into the cubin/PTX cache at `DIR`
//! (default: `$HIDET_CACHE_DIR`, else the user's cache): the SIMT fp32 matmul template for
//! 333×517×129 (sizes that are no multiple of any tile), 1024³ (every showcase schedule) and
//! 4096³, and a kernel that moves data through 160 KiB of dynamic shared memory. The run
//! opens GPU 0, takes each kernel from the cache (compiled by any NVRTC; NVRTC on the GPU
//! machine is used only for a kernel missing from it), and for each:
//! - runs it once on random data and checks it against a float64 CPU reference (every
//!   element up to 1024³, 4096 sampled elements at 4096³): the error of an element is
//!   `|gpu - exact| / Σ|a·b|` over its dot product, which must stay below 1e-4;
//! - times 20 stream launches and 20 CUDA-graph replays of one launch with events (3 warm-up
//!   runs each) and prints the median times and GFLOP/s;
//! - checks that a graph replay writes the same output as the stream launch.
//!
//! `--quick` runs only the first matmul schedule per shape. Exits non-zero on any failure.
//! It finishes in well under a minute on an H100 (the CPU reference dominates).

use hidet_cuda::cache::{CacheOutcome, CachedKernel, CudaKernelCache};
use hidet_cuda::runtime::{Gpu, KernelParam, LaunchConfig};
use hidet_cuda::templates::matmul_simt::{
    build, kernel_name, showcase_schedules, MatmulSimtSchedule,
};
use hidet_cuda::{emit_cuda, Arch, CompileOptions, Nvrtc};
use std::process::ExitCode;

/// Largest accepted `|gpu - exact| / Σ|a·b|` of an element.
const TOLERANCE: f64 = 1e-4;
const WARMUP: usize = 3;
const TIMED: usize = 20;

/// The dynamic shared memory kernel: each block reverses a chunk of `chunk` floats through
/// shared memory and scales it.
const SMEM_NAME: &str = "smem_reverse";
const SMEM_SOURCE: &str = r#"
extern "C" __global__ void smem_reverse(const float* __restrict__ in, float* __restrict__ out,
                                        int chunk, float scale) {
    extern __shared__ float tile[];
    const long long base = (long long)blockIdx.x * chunk;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) tile[i] = in[base + i];
    __syncthreads();
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) out[base + i] = tile[chunk - 1 - i] * scale;
}
"#;
const SMEM_BYTES: usize = 160 * 1024;
const SMEM_BLOCKS: usize = 64;

/// One matmul kernel to compile and run.
struct MatmulCase {
    shape: [usize; 3],
    schedule: MatmulSimtSchedule,
    source: String,
    name: String,
}

struct Args {
    prepare: bool,
    cache: CudaKernelCache,
    arch: Option<Arch>,
    quick: bool,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: gpu_smoke [--prepare] [--cache DIR] [--arch sm_XY] [--quick]";
    let mut args = Args {
        prepare: false,
        cache: CudaKernelCache::from_env(),
        arch: None,
        quick: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--prepare" => args.prepare = true,
            "--quick" => args.quick = true,
            "--cache" => args.cache = CudaKernelCache::new(it.next().ok_or(usage)?),
            "--arch" => {
                let text = it.next().ok_or(usage)?;
                args.arch = Some(text.parse().map_err(|e| format!("--arch {text}: {e}"))?);
            }
            _ => return Err(format!("unknown argument {arg:?}; {usage}")),
        }
    }
    Ok(args)
}

fn matmul_cases(quick: bool) -> Result<Vec<MatmulCase>, String> {
    let schedules = showcase_schedules();
    let first = &schedules[..1];
    let mut plan: Vec<([usize; 3], &[MatmulSimtSchedule])> = vec![([333, 517, 129], first)];
    plan.push((
        [1024, 1024, 1024],
        if quick { first } else { &schedules[..] },
    ));
    plan.push(([4096, 4096, 4096], first));
    let mut cases = Vec::new();
    for (shape, schedules) in plan {
        for schedule in schedules {
            let [m, n, k] = shape.map(|d| d as i64);
            let module = build(m, n, k, schedule).map_err(|e| e.to_string())?;
            cases.push(MatmulCase {
                shape,
                schedule: *schedule,
                source: emit_cuda(&module).map_err(|e| e.to_string())?,
                name: kernel_name(schedule),
            });
        }
    }
    Ok(cases)
}

fn prepare(args: &Args) -> Result<(), String> {
    let nvrtc = Nvrtc::global().map_err(|e| e.to_string())?;
    let arch = args.arch.unwrap_or(Arch::SM90);
    let opts = CompileOptions::default();
    println!(
        "preparing kernels for {arch} with NVRTC {}.{} ({}) into {}",
        nvrtc.version().0,
        nvrtc.version().1,
        nvrtc.path(),
        args.cache.root().display()
    );
    let mut sources: Vec<(String, String)> = matmul_cases(false)?
        .into_iter()
        .map(|c| (c.name, c.source))
        .collect();
    sources.push((SMEM_NAME.to_string(), SMEM_SOURCE.to_string()));
    let mut total = 0;
    for (name, source) in &sources {
        let entry = args
            .cache
            .get_or_compile(nvrtc, name, source, arch, &opts)
            .map_err(|e| e.to_string())?;
        total += entry.image.bytes.len();
        println!(
            "  {:<40} {} {:>8} bytes  {:?}  {}",
            name,
            entry.image.kind,
            entry.image.bytes.len(),
            entry.outcome,
            &entry.key[..16]
        );
    }
    println!("{} kernels, {total} bytes of images", sources.len());
    Ok(())
}

/// The cached image of `source` for `arch`: compiled anywhere, else compiled here.
fn obtain(
    cache: &CudaKernelCache,
    name: &str,
    source: &str,
    arch: Arch,
) -> Result<CachedKernel, String> {
    let opts = CompileOptions::default();
    if let Some(found) = cache
        .find_compiled(source, arch, &opts)
        .map_err(|e| e.to_string())?
    {
        return Ok(found);
    }
    cache
        .resolve(name, source, arch, &opts)
        .map_err(|e| e.to_string())
}

fn describe(entry: &CachedKernel) -> String {
    let how = match entry.outcome {
        CacheOutcome::Hit => "cached",
        CacheOutcome::Compiled => "compiled now",
    };
    format!(
        "{} {how} (NVRTC {}.{})",
        entry.image.kind, entry.nvrtc_version.0, entry.nvrtc_version.1
    )
}

/// xorshift64* uniform values in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        bits as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.next()).collect()
    }
}

/// The float64 reference of the elements `cells` (row, column) of `a · b`: each element's
/// exact value and `Σ|a·b|`. `cells` either lists every element in row-major order (then
/// rows of `b` are streamed, which is cache-friendly) or a sample.
fn reference(
    a: &[f32],
    b: &[f32],
    [m, n, k]: [usize; 3],
    cells: &[(usize, usize)],
) -> Vec<(f64, f64)> {
    if cells.len() == m * n {
        let mut out = vec![(0f64, 0f64); m * n];
        for i in 0..m {
            let row = &mut out[i * n..(i + 1) * n];
            for p in 0..k {
                let x = f64::from(a[i * k + p]);
                for (o, &y) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    let t = x * f64::from(y);
                    o.0 += t;
                    o.1 += t.abs();
                }
            }
        }
        return out;
    }
    cells
        .iter()
        .map(|&(i, j)| {
            let (mut sum, mut abs) = (0f64, 0f64);
            for p in 0..k {
                let t = f64::from(a[i * k + p]) * f64::from(b[p * n + j]);
                sum += t;
                abs += t.abs();
            }
            (sum, abs)
        })
        .collect()
}

/// The largest `|got - exact| / Σ|a·b|` over `cells`.
fn max_error(c: &[f32], n: usize, cells: &[(usize, usize)], exact: &[(f64, f64)]) -> f64 {
    cells
        .iter()
        .zip(exact)
        .map(|(&(i, j), &(want, abs))| {
            (f64::from(c[i * n + j]) - want).abs() / abs.max(f64::MIN_POSITIVE)
        })
        .fold(0.0, f64::max)
}

fn median(mut v: Vec<f32>) -> f32 {
    v.sort_by(f32::total_cmp);
    v[v.len() / 2]
}

/// Median milliseconds of `TIMED` runs of `run`, each bracketed by events, after `WARMUP`.
fn time_ms(gpu: &Gpu, run: &dyn Fn() -> Result<(), String>) -> Result<f32, String> {
    let e = |e: hidet_cuda::CudaError| e.to_string();
    for _ in 0..WARMUP {
        run()?;
    }
    let start = gpu.event().map_err(e)?;
    let end = gpu.event().map_err(e)?;
    let mut times = Vec::with_capacity(TIMED);
    for _ in 0..TIMED {
        start.record().map_err(e)?;
        run()?;
        end.record().map_err(e)?;
        times.push(start.elapsed_ms(&end).map_err(e)?);
    }
    Ok(median(times))
}

fn run_matmuls(gpu: &Gpu, cache: &CudaKernelCache, quick: bool) -> Result<bool, String> {
    let e = |e: hidet_cuda::CudaError| e.to_string();
    let mut all_ok = true;
    let mut current: Option<([usize; 3], Inputs)> = None;
    println!(
        "{:<16} {:<34} {:>10} {:>11} {:>10} {:>11} {:>10}  image",
        "shape", "schedule", "max error", "stream ms", "GFLOP/s", "graph ms", "GFLOP/s"
    );
    for case in matmul_cases(quick)? {
        let [m, n, k] = case.shape;
        if current
            .as_ref()
            .is_none_or(|(shape, _)| *shape != case.shape)
        {
            current = Some((case.shape, Inputs::new(gpu, case.shape)?));
        }
        let (_, inputs) = current.as_ref().ok_or("no inputs")?;
        let entry = obtain(cache, &case.name, &case.source, gpu.arch())?;
        let module = gpu.load_module(&entry.image).map_err(e)?;
        let kernel = module.kernel(&case.name).map_err(e)?;
        let [bm, bn] = case.schedule.block_tile().map(|d| d as usize);
        let config = LaunchConfig::new(
            [n.div_ceil(bn) as u32, m.div_ceil(bm) as u32, 1],
            [case.schedule.threads() as u32, 1, 1],
        );
        let params = [
            KernelParam::Ptr(inputs.a.ptr()),
            KernelParam::Ptr(inputs.b.ptr()),
            KernelParam::Ptr(inputs.c.ptr()),
        ];
        let launch = || gpu.launch(&kernel, &config, &params).map_err(e);

        inputs.c.zero().map_err(e)?;
        launch()?;
        let c = inputs.c.download_f32(m * n).map_err(e)?;
        let error = max_error(&c, n, &inputs.cells, &inputs.exact);
        let ok = error < TOLERANCE && error.is_finite();

        let stream_ms = time_ms(gpu, &launch)?;
        let graph = gpu
            .capture(|g| g.launch(&kernel, &config, &params))
            .map_err(e)?;
        inputs.c.zero().map_err(e)?;
        graph.replay().map_err(e)?;
        let replayed = inputs.c.download_f32(m * n).map_err(e)?;
        let same = replayed == c;
        let graph_ms = time_ms(gpu, &|| graph.replay().map_err(e))?;

        let gflops = |ms: f32| 2.0 * (m * n * k) as f64 / (f64::from(ms) * 1e6);
        println!(
            "{:<16} {:<34} {:>10.2e} {:>11.4} {:>10.0} {:>11.4} {:>10.0}  {}{}{}",
            format!("{m}x{n}x{k}"),
            case.schedule.tag(),
            error,
            stream_ms,
            gflops(stream_ms),
            graph_ms,
            gflops(graph_ms),
            describe(&entry),
            if ok { "" } else { "  FAIL: error above 1e-4" },
            if same {
                ""
            } else {
                "  FAIL: graph output differs"
            },
        );
        all_ok &= ok && same;
    }
    Ok(all_ok)
}

/// Random inputs of one shape on the device, an output buffer, and the reference.
struct Inputs {
    a: hidet_cuda::runtime::DeviceBuffer,
    b: hidet_cuda::runtime::DeviceBuffer,
    c: hidet_cuda::runtime::DeviceBuffer,
    cells: Vec<(usize, usize)>,
    exact: Vec<(f64, f64)>,
}

impl Inputs {
    fn new(gpu: &Gpu, shape: [usize; 3]) -> Result<Inputs, String> {
        let e = |e: hidet_cuda::CudaError| e.to_string();
        let [m, n, k] = shape;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (m * 31 + n * 7 + k) as u64);
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let cells: Vec<(usize, usize)> = if m * n * k <= 1 << 30 {
            (0..m).flat_map(|i| (0..n).map(move |j| (i, j))).collect()
        } else {
            let mut pick = Rng(42);
            let mut cells: Vec<(usize, usize)> = (0..4096)
                .map(|_| {
                    let r = |rng: &mut Rng, d: usize| {
                        (((rng.next() + 1.0) / 2.0) * d as f32) as usize % d
                    };
                    (r(&mut pick, m), r(&mut pick, n))
                })
                .collect();
            cells.extend([(0, 0), (m - 1, n - 1), (0, n - 1), (m - 1, 0)]);
            cells
        };
        let exact = reference(&a, &b, shape, &cells);
        let alloc = |len: usize| gpu.alloc(len * 4, 256).map_err(e);
        let (da, db, dc) = (alloc(m * k)?, alloc(k * n)?, alloc(m * n)?);
        da.upload_f32(&a).map_err(e)?;
        db.upload_f32(&b).map_err(e)?;
        Ok(Inputs {
            a: da,
            b: db,
            c: dc,
            cells,
            exact,
        })
    }
}

/// The dynamic shared memory kernel: 160 KiB per block (above the 48 KiB default, so the
/// runtime raises the kernel's limit), memset, device copy, scalar arguments.
fn run_dynamic_smem(gpu: &Gpu, cache: &CudaKernelCache) -> Result<bool, String> {
    let e = |e: hidet_cuda::CudaError| e.to_string();
    let chunk = SMEM_BYTES / 4;
    let len = chunk * SMEM_BLOCKS;
    let entry = obtain(cache, SMEM_NAME, SMEM_SOURCE, gpu.arch())?;
    let module = gpu.load_module(&entry.image).map_err(e)?;
    let kernel = module.kernel(SMEM_NAME).map_err(e)?;
    let input: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let staged = gpu.alloc(len * 4, 4096).map_err(e)?;
    let src = gpu.alloc(len * 4, 1 << 16).map_err(e)?;
    let dst = gpu.alloc(len * 4, 256).map_err(e)?;
    if src.ptr() % (1 << 16) != 0 {
        return Err(format!(
            "allocation at {:#x} is not 64 KiB aligned",
            src.ptr()
        ));
    }
    staged.upload_f32(&input).map_err(e)?;
    gpu.copy_device(src.ptr(), staged.ptr(), len * 4)
        .map_err(e)?;
    gpu.memset(dst.ptr(), 0xff, len * 4).map_err(e)?;
    let config = LaunchConfig::new([SMEM_BLOCKS as u32, 1, 1], [256, 1, 1])
        .with_dynamic_shared(SMEM_BYTES as u32);
    let before = kernel.max_dynamic_shared_bytes();
    gpu.launch(
        &kernel,
        &config,
        &[
            KernelParam::Ptr(src.ptr()),
            KernelParam::Ptr(dst.ptr()),
            KernelParam::I32(chunk as i32),
            KernelParam::F32(0.5),
        ],
    )
    .map_err(e)?;
    let out = dst.download_f32(len).map_err(e)?;
    let wrong = (0..len)
        .filter(|&i| {
            let (block, at) = (i / chunk, i % chunk);
            out[i] != (block * chunk + chunk - 1 - at) as f32 * 0.5
        })
        .count();
    // A launch with the wrong number of arguments is refused before reaching the driver.
    let refused = gpu
        .launch(&kernel, &config, &[KernelParam::Ptr(src.ptr())])
        .is_err();
    println!(
        "dynamic shared memory: {} KiB per block (kernel limit {} -> {} bytes), {} of {len} elements wrong, wrong-arity launch refused: {refused}  {}",
        SMEM_BYTES / 1024,
        before,
        kernel.max_dynamic_shared_bytes(),
        wrong,
        describe(&entry)
    );
    Ok(wrong == 0 && refused)
}

fn run_on_gpu(args: &Args) -> Result<bool, String> {
    let started = std::time::Instant::now();
    let gpu = Gpu::open(0).map_err(|e| e.to_string())?;
    let info = gpu.info();
    if let Some(arch) = args.arch {
        if arch != info.arch {
            return Err(format!("--arch {arch} but the GPU is {}", info.arch));
        }
    }
    println!(
        "device: {} ({}, {} SMs, {:.1} GiB, driver CUDA {}.{}), cache {}",
        info.name,
        info.arch,
        info.multiprocessors,
        info.total_memory as f64 / (1u64 << 30) as f64,
        info.driver_version / 1000,
        info.driver_version % 1000 / 10,
        args.cache.root().display()
    );
    let smem_ok = run_dynamic_smem(&gpu, &args.cache)?;
    let matmul_ok = run_matmuls(&gpu, &args.cache, args.quick)?;
    println!("gpu_smoke finished in {:.1?}", started.elapsed());
    Ok(smem_ok && matmul_ok)
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| {
        if args.prepare {
            prepare(&args).map(|()| true)
        } else {
            run_on_gpu(&args)
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("gpu_smoke: FAILED (see the rows above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gpu_smoke: {e}");
            ExitCode::FAILURE
        }
    }
}
