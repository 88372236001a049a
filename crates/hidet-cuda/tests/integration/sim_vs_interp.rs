//! The simulator's scalar semantics against the IR interpreter's (`hidet_ir::interp`), the
//! oracle they are built on: random integer expressions per thread (floor division and
//! modulo of negative values, shifts, bitwise operations, narrowing and widening casts,
//! selects, min/max) and `f32` arithmetic, in kernels without barriers, which the
//! interpreter runs one thread after another. Both must agree on every output, and a
//! kernel one rejects (overflow, division by zero) the other must reject too.

use crate::common;

use common::Rng;
use hidet_cuda::sim::{DeviceBuffer, LaunchOptions, SimArg, SimError, Simulator};
use hidet_ir::interp::{run_cuda_block, Arg, Buffer};
use hidet_ir::prelude::*;

fn tid() -> Expr {
    Expr::thread_idx(Dim::X)
}

/// A random `i32` expression of depth at most `depth` over `tid` and `x[tid]`.
fn int_expr(rng: &mut Rng, x: &Var, depth: u32) -> Expr {
    let pick = rng.next_u64() % if depth == 0 { 3 } else { 16 };
    let sub = |rng: &mut Rng| int_expr(rng, x, depth.saturating_sub(1));
    match pick {
        0 => tid(),
        1 => x.at([tid()]),
        2 => Expr::int((rng.next_u64() % 19) as i64 - 9),
        3 => sub(rng) + sub(rng),
        4 => sub(rng) - sub(rng),
        5 => sub(rng) * sub(rng),
        6 => sub(rng) / sub(rng),
        7 => sub(rng) % sub(rng),
        8 => sub(rng).min(sub(rng)),
        9 => sub(rng).max(sub(rng)),
        10 => {
            let (a, b, c, d) = (sub(rng), sub(rng), sub(rng), sub(rng));
            Expr::select(a.lt(b), c, d)
        }
        11 => -sub(rng),
        12 => match rng.next_u64() % 3 {
            0 => sub(rng) & sub(rng),
            1 => sub(rng) | sub(rng),
            _ => sub(rng) ^ sub(rng),
        },
        13 => sub(rng) >> Expr::int((rng.next_u64() % 5) as i64),
        14 => sub(rng).cast(DataType::U8).cast(DataType::I32),
        _ => (sub(rng).cast(DataType::I64) * 3 - 1).cast(DataType::I32),
    }
}

fn module(name: &str, build: impl FnOnce(&mut FunctionBuilder)) -> (IRModule, Function) {
    let mut fb = FunctionBuilder::cuda_kernel(name, [1, 1, 1], [32, 1, 1]);
    build(&mut fb);
    let f = fb.finish();
    (IRModule::new(name, Target::Cuda).with(f.clone()), f)
}

#[test]
fn random_integer_expressions_agree_with_the_interpreter() {
    let mut rng = Rng::new(2024);
    let (mut agreed, mut rejected) = (0, 0);
    for case in 0..300 {
        let name = format!("ints_{case}");
        let mut expr = None;
        let (module, f) = module(&name, |fb| {
            let x = fb.tensor_param("x", DataType::I32, [32]);
            let y = fb.tensor_param("y", DataType::I32, [32]);
            let e = int_expr(&mut rng, &x, 4);
            expr = Some(e.clone());
            fb.store(&y, [tid()], e);
        });
        let xs: Vec<i64> = (0..32).map(|_| (rng.next_u64() % 41) as i64 - 20).collect();
        let mut iargs = vec![
            Arg::Buffer(Buffer::from_i64(DataType::I32, &xs)),
            Arg::Buffer(Buffer::zeros(DataType::I32, 32)),
        ];
        let interp = run_cuda_block(&f, [0, 0, 0], &mut iargs);
        let sim = Simulator::from_module(&module, &name).unwrap_or_else(|e| panic!("{e}"));
        let mut sargs = vec![
            SimArg::Buffer(DeviceBuffer::from_i64(DataType::I32, &xs)),
            SimArg::Buffer(DeviceBuffer::zeros(DataType::I32, 32)),
        ];
        let simulated = sim.launch(&mut sargs, &LaunchOptions::default());
        let e = expr.expect("built");
        match (interp, simulated) {
            (Ok(()), Ok(_)) => {
                let Arg::Buffer(want) = &iargs[1] else {
                    unreachable!("argument 1 is a buffer")
                };
                let got: Vec<i64> = sargs[1]
                    .buffer()
                    .expect("a buffer")
                    .to_f64()
                    .iter()
                    .map(|&v| v as i64)
                    .collect();
                assert_eq!(got, want.to_i64(), "case {case}: {e}");
                agreed += 1;
            }
            (Err(_), Err(SimError::Fault(_))) => rejected += 1,
            (i, s) => panic!("case {case}: {e}\ninterpreter: {i:?}\nsimulator: {s:?}"),
        }
    }
    assert!(
        agreed > 150 && rejected > 10,
        "{agreed} agreed, {rejected} rejected"
    );
}

#[test]
fn f32_arithmetic_agrees_with_the_interpreter() {
    let mut rng = Rng::new(7);
    for case in 0..50 {
        let name = format!("floats_{case}");
        let (module, f) = module(&name, |fb| {
            let x = fb.tensor_param("x", DataType::F32, [32]);
            let y = fb.tensor_param("y", DataType::F32, [32]);
            let a = x.at([tid()]);
            let b = x.at([(tid() + 1) % 32]);
            let c = Expr::f32(rng.unit());
            let e = match case % 5 {
                0 => (a.clone() + b.clone()) * c.clone() - a.clone() / b.clone(),
                1 => a.clone().max(b.clone()).min(c.clone()) * a.clone(),
                2 => Expr::select(a.clone().lt(b.clone()), a.clone() % b.clone(), c.clone()),
                3 => a.clone().sqrt().cast(DataType::F64).cast(DataType::F32) + c.clone(),
                _ => Expr::math(
                    MathFunc::Abs,
                    vec![a.clone().cast(DataType::I32).cast(DataType::F32) - b.clone()],
                ),
            };
            fb.store(&y, [tid()], e);
        });
        let xs: Vec<f32> = (0..32).map(|_| rng.unit() * 8.0).collect();
        let xs64: Vec<f64> = xs.iter().map(|&v| f64::from(v)).collect();
        let mut iargs = vec![
            Arg::Buffer(Buffer::from_f64(DataType::F32, &xs64)),
            Arg::Buffer(Buffer::zeros(DataType::F32, 32)),
        ];
        run_cuda_block(&f, [0, 0, 0], &mut iargs).unwrap_or_else(|e| panic!("{e}"));
        let sim = Simulator::from_module(&module, &name).unwrap_or_else(|e| panic!("{e}"));
        let mut sargs = vec![
            SimArg::Buffer(DeviceBuffer::from_f32(&xs)),
            SimArg::Buffer(DeviceBuffer::output(DataType::F32, 32)),
        ];
        sim.launch(&mut sargs, &LaunchOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let Arg::Buffer(want) = &iargs[1] else {
            unreachable!("argument 1 is a buffer")
        };
        let got = sargs[1].buffer().expect("a buffer").to_f64();
        for (i, (g, w)) in got.iter().zip(want.to_f64()).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "case {case}, y[{i}]: simulator {g}, interpreter {w}"
            );
        }
    }
}
