//! The matmul schedule space: every schedule is valid, the level-0 and
//! level-1 picks come from it, and a random sample of it (host and AVX2
//! widths, every thread split) is correct on random odd shapes against
//! float64.

use crate::common;

use common::{options_in, Rng};
use hidet_cpu::templates::matmul::{micro_kernels, MatmulShape, ThreadSplit};
use hidet_cpu::templates::{batch_matmul_f32, matmul_candidates, matmul_space, MatmulSchedule};
use hidet_cpu::{build, Arch, CpuFeatures, CpuTarget, KernelArg};
use hidet_ir::function::{IRModule, Target};

fn target_with(arch: Arch, features: CpuFeatures) -> CpuTarget {
    CpuTarget {
        arch,
        model: "test".into(),
        cores: 2,
        features,
    }
}

fn targets() -> Vec<CpuTarget> {
    let sse = CpuFeatures {
        sse2: true,
        ..CpuFeatures::default()
    };
    let avx2 = CpuFeatures {
        avx: true,
        avx2: true,
        fma: true,
        ..sse
    };
    let avx512 = CpuFeatures {
        avx512f: true,
        ..avx2
    };
    let neon = CpuFeatures {
        neon: true,
        ..CpuFeatures::default()
    };
    vec![
        target_with(Arch::X86_64, sse),
        target_with(Arch::X86_64, avx2),
        target_with(Arch::X86_64, avx512),
        target_with(Arch::Aarch64, neon),
    ]
}

#[test]
fn the_space_is_valid_and_holds_the_level_0_and_level_1_picks() {
    for target in targets() {
        let lanes = i64::from(target.f32_lanes());
        for &(mr, nr) in &micro_kernels(&target) {
            let registers = if lanes == 16 || target.arch == Arch::Aarch64 {
                32
            } else {
                16
            };
            assert!(mr * nr / lanes + nr / lanes < registers, "{mr}x{nr} spills");
        }
        for threads in [1, 2, 4] {
            let space = matmul_space(&target, threads);
            let level0 = MatmulSchedule::for_target(&target, threads);
            assert_eq!(space.first(), Some(&level0));
            for s in &space {
                s.validate().expect("every schedule of the space is valid");
                assert_eq!(s.threads, threads);
            }
            let unique: std::collections::HashSet<_> = space.iter().collect();
            assert_eq!(unique.len(), space.len(), "no duplicates");
            let splits: std::collections::HashSet<_> = space.iter().map(|s| s.split).collect();
            assert_eq!(splits.len(), if threads > 1 { 4 } else { 1 });
            let level1 = matmul_candidates(&target, threads, 24);
            assert_eq!(level1.len(), 24.min(space.len()));
            assert_eq!(level1[0], level0);
            assert!(level1.iter().all(|s| space.contains(s)));
            assert!(space.len() > level1.len(), "level 2 is larger than level 1");
        }
    }
}

/// Every element of `c[b]` against `a[b or 0] · b[b or 0]` in float64.
fn assert_matches(s: &MatmulShape, a: &[f32], b: &[f32], c: &[f32], what: &str) {
    let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
    for bi in 0..s.batch as usize {
        let ao = if s.a_batch == 1 { 0 } else { bi * m * k };
        let bo = if s.b_batch == 1 { 0 } else { bi * k * n };
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let term = f64::from(a[ao + i * k + p]) * f64::from(b[bo + p * n + j]);
                    exact += term;
                    magnitude += term.abs();
                }
                let got = f64::from(c[(bi * m + i) * n + j]);
                assert!(
                    (got - exact).abs() <= 1e-5 * magnitude + 1e-30,
                    "{what}: C[{bi}][{i}][{j}] = {got}, float64 reference {exact}"
                );
            }
        }
    }
}

#[test]
fn a_random_sample_of_the_space_is_correct_on_random_odd_shapes() {
    let host = CpuTarget::host();
    let mut rng = Rng::new(0x5ace);
    let mut spaces = vec![matmul_space(host, 2), matmul_space(host, 3)];
    if host.f32_lanes() >= 8 {
        spaces.push(matmul_space(&targets()[1], 2));
    }
    let mut cases = Vec::new();
    for space in &spaces {
        // Each split at least once, the rest at random.
        for split in [
            ThreadSplit::Auto,
            ThreadSplit::Rows,
            ThreadSplit::Columns,
            ThreadSplit::ParallelK,
        ] {
            let of_split: Vec<_> = space.iter().filter(|s| s.split == split).collect();
            let pick = of_split[(rng.next_u64() % of_split.len() as u64) as usize];
            cases.push(*pick);
        }
        for _ in 0..2 {
            cases.push(space[(rng.next_u64() % space.len() as u64) as usize]);
        }
    }
    let mut module = IRModule::new("space_sample", Target::Cpu);
    let mut problems = Vec::new();
    for (i, schedule) in cases.iter().enumerate() {
        let mut dim = |lo: u64, hi: u64| (lo + rng.next_u64() % (hi - lo)) as i64;
        let batch = if i % 3 == 0 { dim(2, 5) } else { 1 };
        let shape = MatmulShape {
            batch,
            a_batch: if i % 2 == 0 { batch } else { 1 },
            b_batch: batch,
            m: dim(1, 90),
            n: dim(1, 150),
            k: dim(1, 700),
        };
        let name = format!("mm{i}");
        let f = batch_matmul_f32(&name, &shape, schedule).expect("valid instantiation");
        module = module.with(f);
        problems.push((name, shape, *schedule));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let compiled = build(module, &options_in(dir.path())).expect("builds");
    for (name, shape, schedule) in problems {
        compiled
            .set_num_threads(schedule.threads as usize)
            .expect("exported by the C dialect");
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        let (bt, ab, bb) = (
            shape.batch as usize,
            shape.a_batch as usize,
            shape.b_batch as usize,
        );
        let a = rng.vec_f32(ab * m * k);
        let b = rng.vec_f32(bb * k * n);
        let mut c = vec![f32::NAN; bt * m * n];
        compiled
            .kernel(&name)
            .expect("kernel exists")
            .call(&mut [
                KernelArg::tensor(&a, &[ab, m, k]),
                KernelArg::tensor(&b, &[bb, k, n]),
                KernelArg::tensor_mut(&mut c, &[bt, m, n]),
            ])
            .expect("arguments match");
        assert_matches(
            &shape,
            &a,
            &b,
            &c,
            &format!("{name} {shape:?} {schedule:?}"),
        );
    }
}

/// Level 0 keeps the default tile for problems at least as tall as it, and for shorter
/// ones (a matrix-vector product) takes the shortest micro-kernel of the space that covers
/// the rows; the pick is always a valid schedule of the space's tiles.
#[test]
fn level_zero_fits_the_tile_to_few_rows() {
    use hidet_cpu::templates::matmul::heuristic_for_rows;
    for target in targets() {
        let default = MatmulSchedule::for_target(&target, 2);
        assert_eq!(heuristic_for_rows(&target, 2, default.mr), default);
        assert_eq!(heuristic_for_rows(&target, 2, 1000), default);
        for m in 1..default.mr {
            let s = heuristic_for_rows(&target, 2, m);
            s.validate().expect("a valid schedule");
            assert!(matmul_space(&target, 2).contains(&s), "{s:?}");
            assert!(s.mr <= default.mr, "m = {m}: {s:?}");
            let shorter_covering = micro_kernels(&target)
                .into_iter()
                .any(|(mr, _)| mr >= m && mr < s.mr);
            assert!(!shorter_covering, "m = {m}: {s:?}");
        }
    }
    let avx512 = &targets()[2];
    let gemv = heuristic_for_rows(avx512, 2, 1);
    assert_eq!((gemv.mr, gemv.nr), (4, 64));
}

/// A product whose left operand is gathered in place (a direct convolution) takes the
/// narrowest register tile that covers its columns, so each gathered element is read by
/// one tile row; the pick is a schedule of the space, and none exists past the widest tile.
#[test]
fn level_zero_covers_the_columns_of_a_gathered_product() {
    use hidet_cpu::templates::matmul::heuristic_for_gathered_rows;
    for target in targets() {
        let widest = micro_kernels(&target)
            .into_iter()
            .map(|(_, nr)| nr)
            .max()
            .expect("every target has micro-kernels");
        for n in [1, 11, 16, 32, 33, 48, 64] {
            let Some(s) = heuristic_for_gathered_rows(&target, 2, n) else {
                assert!(n > widest, "n = {n}");
                continue;
            };
            s.validate().expect("a valid schedule");
            assert!(matmul_space(&target, 2).contains(&s), "n = {n}: {s:?}");
            assert!(s.nr >= n, "n = {n}: {s:?}");
            let narrower = micro_kernels(&target)
                .into_iter()
                .any(|(_, nr)| nr >= n && nr < s.nr);
            assert!(!narrower, "n = {n}: {s:?}");
        }
        assert_eq!(heuristic_for_gathered_rows(&target, 2, widest + 1), None);
    }
    let avx512 = &targets()[2];
    let stem = heuristic_for_gathered_rows(avx512, 2, 64).expect("a 64-wide tile");
    assert_eq!((stem.mr, stem.nr), (6, 64));
    let narrow = heuristic_for_gathered_rows(avx512, 2, 32).expect("a 32-wide tile");
    assert_eq!((narrow.mr, narrow.nr), (14, 32));
}

/// A gathered product stored column-major takes the widest 8-row tile (one 8-float vector
/// store per tile column) when that is at least three vectors wide and the product fills it:
/// AVX-512's `8 × 48` for 48 columns or more. A narrower product at least
/// `DEEP_COLUMN_STORE` deep takes the narrowest 8-row tile of two or more vectors covering it
/// (AVX-512's `8 × 32` for up to 32 columns), with the space's preferred blocks; a shallow one
/// nothing, and AVX2 (no 8-row tile of two vectors) nothing.
#[test]
fn level_zero_stores_gathered_columns_with_eight_rows() {
    use hidet_cpu::templates::matmul::heuristic_for_gathered_rows_stored_by_column as pick;
    use hidet_cpu::templates::matmul::DEEP_COLUMN_STORE as DEEP;
    for target in targets() {
        let lanes = i64::from(target.f32_lanes());
        for n in [1, 27, 32, 47, 48, 64, 200] {
            for k in [27, DEEP - 1, DEEP, 147] {
                let Some(s) = pick(&target, 2, n, k) else {
                    continue;
                };
                s.validate().expect("a valid schedule");
                assert!(
                    matmul_space(&target, 2).contains(&s),
                    "n = {n}, k = {k}: {s:?}"
                );
                assert_eq!(s.mr, 8);
                let wide = s.nr >= 3 * lanes && s.nr <= n;
                let deep_narrow = k >= DEEP && n < 3 * lanes && s.nr >= n && s.nr >= 2 * lanes;
                assert!(wide || deep_narrow, "n = {n}, k = {k}: {s:?}");
            }
        }
    }
    let all = targets();
    let (avx2, avx512) = (&all[1], &all[2]);
    let tile = |target, n, k| pick(target, 2, n, k).map(|s| (s.mr, s.nr));
    assert_eq!(tile(avx512, 64, 27), Some((8, 48)));
    assert_eq!(tile(avx512, 48, 147), Some((8, 48)));
    assert_eq!(tile(avx512, 32, 27), None);
    assert_eq!(tile(avx512, 32, DEEP - 1), None);
    assert_eq!(tile(avx512, 32, 147), Some((8, 32)));
    assert_eq!(tile(avx512, 40, 147), Some((8, 48)));
    assert_eq!(tile(avx2, 64, 27), None);
    assert_eq!(tile(avx2, 16, 147), None);
}

/// The graph passes make a convolution with up to 64 output channels direct on every target,
/// however wide its register tiles (AVX2's widest is 24): the gathered pixels are read in
/// place through offset tables by every column panel.
#[test]
fn direct_convolutions_take_up_to_64_channels_on_every_target() {
    use hidet_cpu::graph_backend::pass_options;
    for target in targets() {
        assert_eq!(pass_options(&target).direct_conv_max_channels, 64);
    }
}

/// Level 0 takes the register tile of least estimated cost, weighing edge tiles that wait on
/// their accumulators: on AVX2, 32 and 128 rows take 4×24 (whole tiles instead of a 2-row
/// edge), 49 rows 5×16 (a 4-row edge instead of a 1-row one), while 16 and 64 rows (a 4-row
/// edge, as fast) and 1024 keep 6×16, and so does a left operand stored in panels of 6 rows;
/// every pick is a schedule of the space and never costs more than the default by the
/// estimate.
#[test]
fn level_zero_spares_short_products_a_thin_edge_tile() {
    use hidet_cpu::templates::matmul::{heuristic_for_product, product_cost};
    let avx2 = &targets()[1];
    let default = MatmulSchedule::for_target(avx2, 2);
    let tile = |m, n| {
        let s = heuristic_for_product(avx2, 2, m, n, None);
        (s.mr, s.nr)
    };
    assert_eq!(tile(32, 21609), (4, 24));
    assert_eq!(tile(128, 768), (4, 24));
    assert_eq!(tile(49, 512), (5, 16));
    assert_eq!(tile(16, 12544), (default.mr, default.nr));
    assert_eq!(tile(64, 3136), (default.mr, default.nr));
    let in_panels = heuristic_for_product(avx2, 2, 128, 784, Some(default.mr));
    assert_eq!((in_panels.mr, in_panels.nr), (default.mr, default.nr));
    assert_eq!(tile(1024, 1024), (default.mr, default.nr));
    for target in targets() {
        let default = MatmulSchedule::for_target(&target, 2);
        let lanes = i64::from(default.lanes);
        let cost = |s: &MatmulSchedule, m: i64, n: i64| product_cost(m, n, (s.mr, s.nr), lanes);
        for m in [default.mr, 16, 32, 49, 64, 80, 128, 1000] {
            for n in [1, 49, 196, 768, 3136] {
                let s = heuristic_for_product(&target, 2, m, n, None);
                s.validate().expect("a valid schedule");
                assert!(matmul_space(&target, 2).contains(&s), "{m}×{n}: {s:?}");
                if m >= default.mr {
                    assert!(cost(&s, m, n) <= cost(&default, m, n), "{m}×{n}: {s:?}");
                }
            }
        }
    }
}

/// Level 0 deepens `kc` from 256 to 384 exactly when 256 leaves a ragged last `K` block that
/// 384 does not and a 384-row `B` micro-panel fits a 32 KiB L1; the pick stays in the space.
#[test]
fn level_zero_avoids_a_ragged_last_depth_block() {
    use hidet_cpu::templates::matmul::{heuristic_for_product, with_depth};
    let avx2 = &targets()[1];
    let base = heuristic_for_product(avx2, 2, 384, 64, None);
    assert_eq!((base.kc, base.nr), (256, 16));
    for (k, kc) in [
        (1152, 384),
        (384, 384),
        (3456, 384),
        (768, 256),
        (1280, 256),
        (2048, 256),
    ] {
        assert_eq!(with_depth(avx2, base, k).kc, kc, "k = {k}");
    }
    for k in [100, 256, 288, 576, 1000] {
        assert_eq!(
            with_depth(avx2, base, k),
            base,
            "k = {k}: 384 does not divide it either"
        );
    }
    let wide = heuristic_for_product(avx2, 2, 32, 21609, None);
    assert_eq!(
        (wide.nr, with_depth(avx2, wide, 1152).kc),
        (24, wide.kc),
        "a 4×24 tile stays"
    );
    for target in targets() {
        for (m, n) in [(384, 64), (32, 21609), (1, 1000)] {
            let s = with_depth(&target, heuristic_for_product(&target, 2, m, n, None), 1152);
            assert!(matmul_space(&target, 2).contains(&s), "{m}×{n}: {s:?}");
        }
    }
}

/// On any core with AVX-512, a product whose left operand is read as stored takes the 6 × 64
/// tile with `kc` 128 and the preferred blocks from as many rows as the default tile has;
/// shorter products and narrower vectors get no such pick.
#[test]
fn level_zero_gives_stored_rows_the_wide_tile_on_avx512() {
    use hidet_cpu::templates::matmul::{
        heuristic_for_stored_rows_on_avx512, AVX512_STORED_ROWS_TILE,
    };
    let named = |target: &CpuTarget, model: &str| CpuTarget {
        model: model.to_string(),
        ..target.clone()
    };
    let all = targets();
    let (avx2, avx512) = (&all[1], &all[2]);
    let zen4 = named(avx512, "AMD EPYC 9654 96-Core Processor");
    let sapphire_rapids = named(avx512, "Intel(R) Xeon(R) Platinum 8480+");
    for target in [&zen4, &sapphire_rapids] {
        let default = MatmulSchedule::for_target(target, 2);
        for m in [default.mr, 128, 1000, 8192] {
            let s = heuristic_for_stored_rows_on_avx512(target, 2, m).expect("a pick");
            assert_eq!((s.mr, s.nr, s.kc), AVX512_STORED_ROWS_TILE);
            assert_eq!((s.mc, s.nc), (192, 512));
            assert!(matmul_space(target, 2).contains(&s), "{s:?}");
        }
        assert_eq!(
            heuristic_for_stored_rows_on_avx512(target, 2, default.mr - 1),
            None
        );
    }
    let zen3 = named(avx2, "AMD EPYC 7763 64-Core Processor");
    assert_eq!(heuristic_for_stored_rows_on_avx512(&zen3, 2, 1000), None);
}
