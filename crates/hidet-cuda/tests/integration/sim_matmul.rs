//! The SIMT matmul template simulated ([`hidet_cuda::sim`]): every showcase schedule and
//! the three schedules of the space with the most registers, on shapes that are not
//! multiples of any tile, with integer-valued inputs in [-4, 4] so that every product and
//! sum is exact in `f32`: the output must equal the f64 reference bit for bit.

// Index loops mirror the references' formulas (lane, row, column).
#![allow(clippy::needless_range_loop)]

use crate::common;

use common::Rng;
use hidet_cuda::sim::{DeviceBuffer, LaunchOptions, SimArg, Simulator};
use hidet_cuda::templates::matmul_simt::{
    build, kernel_name, schedule_space, showcase_schedules, MatmulSimtSchedule, SimtLimits,
};
use std::time::Instant;

fn ints(rng: &mut Rng, len: usize) -> Vec<f32> {
    (0..len)
        .map(|_| (rng.next_u64() % 9) as f32 - 4.0)
        .collect()
}

/// Simulates `schedule` on `m × n × k` and compares with the f64 product, bit for bit.
fn check(schedule: &MatmulSimtSchedule, m: usize, n: usize, k: usize, seed: u64) {
    let module = build(m as i64, n as i64, k as i64, schedule).expect("valid schedule");
    let sim = Simulator::from_module(&module, &kernel_name(schedule))
        .unwrap_or_else(|e| panic!("{schedule}: {e}"));
    let mut rng = Rng::new(seed);
    let (a, b) = (ints(&mut rng, m * k), ints(&mut rng, k * n));
    let mut args = vec![
        SimArg::Buffer(DeviceBuffer::from_f32(&a)),
        SimArg::Buffer(DeviceBuffer::from_f32(&b)),
        SimArg::Buffer(DeviceBuffer::output(hidet_ir::dtype::DataType::F32, m * n)),
    ];
    let start = Instant::now();
    let report = sim
        .launch(&mut args, &LaunchOptions::default())
        .unwrap_or_else(|e| panic!("{schedule} at {m}x{n}x{k}: {e}"));
    let elapsed = start.elapsed();
    let c = args[2]
        .buffer()
        .and_then(|b| b.to_f32())
        .expect("f32 output");
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
            assert_eq!(
                c[i * n + j].to_bits(),
                (want as f32).to_bits(),
                "{schedule}: C[{i}, {j}] at {m}x{n}x{k}"
            );
        }
    }
    eprintln!(
        "{schedule}: {} blocks, {} warp steps, {elapsed:.2?}",
        report.blocks_simulated, report.warp_steps
    );
}

#[test]
fn every_showcase_schedule_matches_the_f64_product_bit_for_bit() {
    for (i, s) in showcase_schedules().iter().enumerate() {
        check(s, 97, 130, 61, i as u64 + 1);
    }
}

#[test]
fn the_three_schedules_with_most_registers_match_bit_for_bit() {
    let mut space = schedule_space(&SimtLimits::default());
    space.sort_by_key(|s| std::cmp::Reverse(s.estimated_registers()));
    for (i, s) in space.iter().take(3).enumerate() {
        check(s, 97, 130, 61, 100 + i as u64);
    }
}

/// The batched template (`build_batched`): three batch entries on `blockIdx.z`, the right
/// operand of batch 1 broadcast, then the left one broadcast; bit for bit with the f64
/// products.
#[test]
fn batched_products_with_broadcast_operands_match_bit_for_bit() {
    use hidet_cuda::templates::matmul_simt::{build_batched, Batch};
    let schedule = showcase_schedules()[3];
    let (nb, m, n, k) = (3usize, 37usize, 21usize, 19usize);
    for (ab, bb) in [(nb, 1), (1, nb), (nb, nb)] {
        let batch = Batch {
            batch: nb as i64,
            a_batch: ab as i64,
            b_batch: bb as i64,
        };
        let module = build_batched(batch, m as i64, n as i64, k as i64, &schedule).unwrap();
        let sim = Simulator::from_module(&module, &kernel_name(&schedule)).unwrap();
        let mut rng = Rng::new(ab as u64 * 10 + bb as u64);
        let (a, b) = (ints(&mut rng, ab * m * k), ints(&mut rng, bb * k * n));
        let mut args = vec![
            SimArg::Buffer(DeviceBuffer::from_f32(&a)),
            SimArg::Buffer(DeviceBuffer::from_f32(&b)),
            SimArg::Buffer(DeviceBuffer::output(
                hidet_ir::dtype::DataType::F32,
                nb * m * n,
            )),
        ];
        let report = sim.launch(&mut args, &LaunchOptions::default()).unwrap();
        assert_eq!(report.grid[2], nb as i64);
        let c = args[2].buffer().and_then(|b| b.to_f32()).unwrap();
        for z in 0..nb {
            let (za, zb) = (if ab == 1 { 0 } else { z }, if bb == 1 { 0 } else { z });
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| {
                            f64::from(a[(za * m + i) * k + p]) * f64::from(b[(zb * k + p) * n + j])
                        })
                        .sum();
                    assert_eq!(
                        c[(z * m + i) * n + j].to_bits(),
                        (want as f32).to_bits(),
                        "batch ({ab}, {bb}): C[{z}, {i}, {j}]"
                    );
                }
            }
        }
    }
    let bad = Batch {
        batch: 3,
        a_batch: 2,
        b_batch: 1,
    };
    assert!(build_batched(bad, 4, 4, 4, &schedule).is_err());
}

/// Parallel-k (`build_parallel_k` then `build_k_reduce`): the reduction over `k` split into
/// parts (a `k` that is not a multiple of the k-tile, parts of unequal real length, the last
/// one padded with zeros), rank 2 and batched with a broadcast operand, shapes not multiples
/// of the block tile, the reduction kernel scalar and vectorized (`n` a multiple of 4). The partial products' workspace is written exactly once per element
/// (the simulator's output checker) and the sums equal the f64 product bit for bit.
#[test]
fn parallel_k_products_match_bit_for_bit() {
    use hidet_cuda::templates::matmul_simt::{build_k_reduce, build_parallel_k, Batch, KSplit};
    let schedule = showcase_schedules()[3];
    let f32t = hidet_ir::dtype::DataType::F32;
    // `n = 20`: the reduction kernel reads four columns per thread with vector loads.
    for (batch, m, n, k, parts) in [
        (None, 13usize, 21usize, 83usize, 3i64),
        (None, 5, 9, 40, 16),
        (None, 7, 20, 70, 3),
        (
            Some(Batch {
                batch: 2,
                a_batch: 2,
                b_batch: 1,
            }),
            19,
            10,
            37,
            4,
        ),
    ] {
        let split = KSplit::new(k as i64, schedule.block_k, parts);
        assert!(split.parts > 1 && split.parts <= parts, "{split:?}");
        // Every part multiplies at least one real k-tile.
        assert!((split.parts - 1) * split.tiles_per_part * schedule.block_k < k as i64);
        let nb = batch.map_or(1, |b| b.batch as usize);
        let (ab, bb) = batch.map_or((1, 1), |b| (b.a_batch as usize, b.b_batch as usize));
        let module =
            build_parallel_k(batch, m as i64, n as i64, k as i64, &schedule, parts).unwrap();
        let name = format!("{}_p{}", kernel_name(&schedule), split.parts);
        let sim = Simulator::from_module(&module, &name).unwrap();
        let mut rng = Rng::new(k as u64);
        let (a, b) = (ints(&mut rng, ab * m * k), ints(&mut rng, bb * k * n));
        let ws = split.parts as usize * nb * m * n;
        let mut args = vec![
            SimArg::Buffer(DeviceBuffer::from_f32(&a)),
            SimArg::Buffer(DeviceBuffer::from_f32(&b)),
            SimArg::Buffer(DeviceBuffer::output(f32t, ws)),
        ];
        let report = sim.launch(&mut args, &LaunchOptions::default()).unwrap();
        assert_eq!(report.grid[2], nb as i64 * split.parts);
        let partial = args[2].buffer().and_then(|b| b.to_f32()).unwrap();
        let out_shape: Vec<i64> = batch
            .map(|b| b.batch)
            .into_iter()
            .chain([m as i64, n as i64])
            .collect();
        let reduce = build_k_reduce("k_reduce", split.parts, &out_shape).unwrap();
        let module =
            hidet_ir::function::IRModule::new("k_reduce", hidet_ir::function::Target::Cuda)
                .with(reduce);
        let source = hidet_cuda::emit_cuda(&module).expect("the CUDA dialect emits the reduction");
        assert_eq!(source.contains("hidet_load_f32x4("), n % 4 == 0, "{source}");
        let sim = Simulator::from_module(&module, "k_reduce").unwrap();
        let mut args = vec![
            SimArg::Buffer(DeviceBuffer::from_f32(&partial)),
            SimArg::Buffer(DeviceBuffer::output(f32t, nb * m * n)),
        ];
        sim.launch(&mut args, &LaunchOptions::default()).unwrap();
        let c = args[1].buffer().and_then(|b| b.to_f32()).unwrap();
        for z in 0..nb {
            let (za, zb) = (if ab == 1 { 0 } else { z }, if bb == 1 { 0 } else { z });
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| {
                            f64::from(a[(za * m + i) * k + p]) * f64::from(b[(zb * k + p) * n + j])
                        })
                        .sum();
                    assert_eq!(
                        c[(z * m + i) * n + j].to_bits(),
                        (want as f32).to_bits(),
                        "{m}x{n}x{k} in {} parts: C[{z}, {i}, {j}]",
                        split.parts
                    );
                }
            }
        }
    }
}

/// A tile in dynamic shared memory (the paper's 128×128 block with a k-tile of 32: 64 KiB of
/// buffers, above the 48 KiB static limit), alone and split in parts, at a shape that is not
/// a multiple of the tile: bit for bit with the f64 product.
#[test]
fn dynamic_shared_memory_tile_matches_bit_for_bit() {
    let mut s = showcase_schedules()[0];
    s.block_k = 32;
    assert_eq!(s.dynamic_shared_bytes(), 64 * 1024);
    let module = build(130, 135, 70, &s).unwrap();
    let kernel = module.functions.iter().find(|f| f.is_cuda()).unwrap();
    let hidet_ir::function::FunctionKind::CudaKernel(launch) = &kernel.kind else {
        panic!("not a kernel");
    };
    assert_eq!(launch.dynamic_shared_bytes.as_int(), Some(64 * 1024));
    check(&s, 130, 135, 70, 7);
}
