//! Shared by the scheduler tests: random non-zero inputs, the reference
//! (each node's naive kernel run through the IR interpreter), and building
//! and running scheduled kernels with several thread counts.
#![allow(dead_code)]

use half::{bf16, f16};
use hidet_cpu::schedule::schedule;
use hidet_cpu::{build, BuildOptions, CpuTarget, KernelArg};
use hidet_ir::compute::{tensor_dtype, tensor_shape, ComputeDef};
use hidet_ir::dtype::{DataType, ScalarType};
use hidet_ir::expr::{BinaryOp, Expr, ExprKind, Var};
use hidet_ir::function::{IRModule, Target};
use hidet_ir::interp::{run_function, Arg, Buffer, Scalar};
use std::collections::HashMap;
use std::ffi::c_void;

/// xorshift64*: deterministic test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A value of `dtype`, never zero (bools excepted): floats in
    /// `±[0.05, 2]`, signed integers in `±[1, 9]`, unsigned in `[1, 20]`.
    pub fn value(&mut self, dtype: DataType) -> f64 {
        let sign = if self.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
        match dtype.scalar {
            ScalarType::Bool => (self.next_u64() & 1) as f64,
            s if s.is_float() => round_to(sign * (0.05 + 1.95 * self.unit()), dtype),
            s if s.is_signed() => sign * (1 + self.next_u64() % 9) as f64,
            _ => (1 + self.next_u64() % 20) as f64,
        }
    }

    pub fn values(&mut self, dtype: DataType, len: usize) -> Vec<f64> {
        (0..len).map(|_| self.value(dtype)).collect()
    }
}

/// `v` rounded to a float `dtype`.
pub fn round_to(v: f64, dtype: DataType) -> f64 {
    match dtype.scalar {
        ScalarType::F32 => f64::from(v as f32),
        ScalarType::F16 => f16::from_f64(v).to_f64(),
        ScalarType::BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// Evaluates a shape expression with `scalars` bound.
pub fn eval_extent(e: &Expr, scalars: &HashMap<Var, i64>) -> i64 {
    match e.kind() {
        ExprKind::Const(c) => c.as_int().expect("integer extent"),
        ExprKind::Var(v) => scalars[v],
        ExprKind::Binary(op, a, b) => {
            let (a, b) = (eval_extent(a, scalars), eval_extent(b, scalars));
            match op {
                BinaryOp::Add => a + b,
                BinaryOp::Sub => a - b,
                BinaryOp::Mul => a * b,
                BinaryOp::Div => a / b,
                other => panic!("extent operator {other:?} not handled by the test harness"),
            }
        }
        other => panic!("extent {other:?} not handled by the test harness"),
    }
}

pub fn shape_of(v: &Var, scalars: &HashMap<Var, i64>) -> Vec<usize> {
    tensor_shape(v)
        .iter()
        .map(|d| eval_extent(d, scalars) as usize)
        .collect()
}

fn buffer(dtype: DataType, values: &[f64]) -> Buffer {
    if dtype.is_float() {
        Buffer::from_f64(dtype, values)
    } else if dtype.is_bool() {
        Buffer::from_bool(&values.iter().map(|&v| v != 0.0).collect::<Vec<_>>())
    } else {
        Buffer::from_i64(dtype, &values.iter().map(|&v| v as i64).collect::<Vec<_>>())
    }
}

/// Random inputs for `def`, one vector per input.
pub fn random_inputs(
    def: &ComputeDef,
    scalars: &HashMap<Var, i64>,
    rng: &mut Rng,
) -> Vec<Vec<f64>> {
    def.inputs
        .iter()
        .map(|v| {
            let len: usize = shape_of(v, scalars).iter().product();
            rng.values(tensor_dtype(v).expect("tensor input"), len)
        })
        .collect()
}

/// The scalar parameters of `def` in the scheduler's order, with values.
fn scalar_args(order: &[Var], scalars: &HashMap<Var, i64>) -> Vec<i64> {
    order.iter().map(|v| scalars[v]).collect()
}

/// Every output of `def` computed by the naive per-node kernels in the
/// interpreter.
pub fn reference(
    def: &ComputeDef,
    inputs: &[Vec<f64>],
    scalars: &HashMap<Var, i64>,
) -> Vec<Vec<f64>> {
    let mut env: HashMap<Var, Buffer> = HashMap::new();
    let mut order: Vec<Buffer> = Vec::new();
    for (v, data) in def.inputs.iter().zip(inputs) {
        let b = buffer(tensor_dtype(v).expect("tensor"), data);
        env.insert(v.clone(), b.clone());
        order.push(b);
    }
    for (i, (out, _)) in def.nodes.iter().enumerate() {
        let f = def.node_function(i, "node");
        let len: usize = shape_of(out, scalars).iter().product();
        let mut args: Vec<Arg> = order.iter().cloned().map(Arg::Buffer).collect();
        args.push(Arg::Buffer(Buffer::zeros(
            tensor_dtype(out).expect("tensor"),
            len,
        )));
        let tensors = args.len();
        for p in &f.params[tensors..] {
            args.push(Arg::Scalar(Scalar::Int(scalars[p_source(p, scalars)])));
        }
        run_function(&f, &mut args).expect("reference node kernel runs");
        let Some(Arg::Buffer(b)) = args.into_iter().nth(tensors - 1) else {
            panic!("the output argument is a buffer")
        };
        env.insert(out.clone(), b.clone());
        order.push(b);
    }
    def.outputs.iter().map(|o| env[o].to_f64()).collect()
}

/// The scalar variable a node-function parameter stands for (same name).
fn p_source<'a>(p: &Var, scalars: &'a HashMap<Var, i64>) -> &'a Var {
    scalars
        .keys()
        .find(|k| k.name() == p.name())
        .expect("every scalar parameter is bound by the test")
}

/// A host buffer of any element type the tests use.
pub enum Host {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
    /// f16 or bf16 bits.
    Half(DataType, Vec<u16>),
}

impl Host {
    pub fn new(dtype: DataType, values: &[f64]) -> Host {
        match dtype.scalar {
            ScalarType::F32 => Host::F32(values.iter().map(|&v| v as f32).collect()),
            ScalarType::F64 => Host::F64(values.to_vec()),
            ScalarType::I32 => Host::I32(values.iter().map(|&v| v as i32).collect()),
            ScalarType::I64 => Host::I64(values.iter().map(|&v| v as i64).collect()),
            ScalarType::I8 => Host::I8(values.iter().map(|&v| v as i8).collect()),
            ScalarType::U8 => Host::U8(values.iter().map(|&v| v as u8).collect()),
            ScalarType::Bool => Host::Bool(values.iter().map(|&v| v != 0.0).collect()),
            ScalarType::F16 => Host::Half(
                dtype,
                values.iter().map(|&v| f16::from_f64(v).to_bits()).collect(),
            ),
            ScalarType::BF16 => Host::Half(
                dtype,
                values
                    .iter()
                    .map(|&v| bf16::from_f64(v).to_bits())
                    .collect(),
            ),
            other => panic!("dtype {other} not handled by the test harness"),
        }
    }

    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            Host::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Host::F64(v) => v.clone(),
            Host::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Host::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Host::I8(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Host::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Host::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
            Host::Half(d, v) if *d == DataType::F16 => {
                v.iter().map(|&x| f16::from_bits(x).to_f64()).collect()
            }
            Host::Half(_, v) => v.iter().map(|&x| bf16::from_bits(x).to_f64()).collect(),
        }
    }

    pub fn arg(&mut self, shape: &[usize], mutable: bool) -> KernelArg<'_> {
        macro_rules! typed {
            ($v:expr) => {
                if mutable {
                    KernelArg::tensor_mut($v, shape)
                } else {
                    KernelArg::tensor($v, shape)
                }
            };
        }
        match self {
            Host::F32(v) => typed!(v),
            Host::F64(v) => typed!(v),
            Host::I32(v) => typed!(v),
            Host::I64(v) => typed!(v),
            Host::I8(v) => typed!(v),
            Host::U8(v) => typed!(v),
            Host::Bool(v) => typed!(v),
            Host::Half(d, v) => {
                // SAFETY: `v` holds `v.len()` initialized 16-bit elements of
                // dtype `d`, exclusively borrowed for the argument's lifetime.
                unsafe {
                    KernelArg::raw(v.as_mut_ptr() as *mut c_void, v.len(), *d, shape, mutable)
                }
            }
        }
    }
}

/// One definition to run: its inputs, the values of its shape variables
/// and the order of its scalar parameters.
pub struct Case<'a> {
    pub def: &'a ComputeDef,
    pub inputs: &'a [Vec<f64>],
    pub scalars: &'a HashMap<Var, i64>,
    pub scalar_order: &'a [Var],
}

/// The scheduled kernels of `defs` (each with every thread count of
/// `threads`) built into one module, run on `inputs`; returns, per
/// definition and thread count, every output as `f64`.
pub fn run_scheduled(defs: &[Case<'_>], threads: &[i64]) -> Vec<Vec<Vec<Vec<f64>>>> {
    let target = CpuTarget::host();
    let mut module = IRModule::new("schedule_test", Target::Cpu);
    for (d, case) in defs.iter().enumerate() {
        let def = case.def;
        for &t in threads {
            let f = schedule(def, &format!("k{d}_t{t}"), target, t).expect("definition schedules");
            module = module.with(f);
        }
    }
    let compiled = build(module, &BuildOptions::default()).expect("scheduled kernels build");
    let mut results = Vec::new();
    for (d, case) in defs.iter().enumerate() {
        let Case {
            def,
            inputs,
            scalars,
            scalar_order: order,
        } = case;
        let mut per_threads = Vec::new();
        for &t in threads {
            compiled
                .set_num_threads(t as usize)
                .expect("the module exports the thread setter");
            let mut ins: Vec<(Host, Vec<usize>)> = def
                .inputs
                .iter()
                .zip(inputs.iter())
                .map(|(v, data)| {
                    (
                        Host::new(tensor_dtype(v).expect("tensor"), data),
                        shape_of(v, scalars),
                    )
                })
                .collect();
            let mut outs: Vec<(Host, Vec<usize>)> = def
                .outputs
                .iter()
                .map(|v| {
                    let shape = shape_of(v, scalars);
                    let len: usize = shape.iter().product();
                    // Outputs start as garbage-like non-zero values, so a kernel that skips elements is caught.
                    (
                        Host::new(tensor_dtype(v).expect("tensor"), &vec![7.0; len]),
                        shape,
                    )
                })
                .collect();
            let scalar_values = scalar_args(order, scalars);
            {
                let mut args: Vec<KernelArg<'_>> = Vec::new();
                for (h, s) in ins.iter_mut() {
                    args.push(h.arg(s, false));
                }
                for (h, s) in outs.iter_mut() {
                    args.push(h.arg(s, true));
                }
                for &v in &scalar_values {
                    args.push(KernelArg::scalar(v as i32));
                }
                compiled
                    .kernel(&format!("k{d}_t{t}"))
                    .expect("kernel exists")
                    .call(&mut args)
                    .expect("kernel runs");
            }
            per_threads.push(outs.iter().map(|(h, _)| h.to_f64()).collect());
        }
        results.push(per_threads);
    }
    results
}

/// Asserts `|got - want| <= atol + rtol·|want|` element-wise.
pub fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Tolerances for a dtype: exact for integers and bools.
pub fn tolerance(dtype: DataType) -> (f64, f64) {
    match dtype.scalar {
        ScalarType::F32 => (2e-5, 2e-5),
        ScalarType::F64 => (1e-10, 1e-10),
        ScalarType::F16 | ScalarType::BF16 => (2e-2, 2e-2),
        _ => (0.0, 0.0),
    }
}

/// Checks every definition of `defs` (static shapes) against the
/// interpreter reference with 1 and 2 threads, all kernels in one module.
pub fn check_all(defs: &[ComputeDef], seed: u64) {
    let mut rng = Rng::new(seed);
    let none: HashMap<Var, i64> = HashMap::new();
    let inputs: Vec<Vec<Vec<f64>>> = defs
        .iter()
        .map(|d| random_inputs(d, &none, &mut rng))
        .collect();
    let cases: Vec<Case<'_>> = defs
        .iter()
        .zip(&inputs)
        .map(|(d, i)| Case {
            def: d,
            inputs: i,
            scalars: &none,
            scalar_order: &[],
        })
        .collect();
    let results = run_scheduled(&cases, &[1, 2]);
    for ((def, ins), per_threads) in defs.iter().zip(&inputs).zip(results) {
        let want = reference(def, ins, &none);
        for (t, outs) in [1, 2].iter().zip(per_threads) {
            for ((o, got), want) in def.outputs.iter().zip(&outs).zip(&want) {
                let (rtol, atol) = tolerance(tensor_dtype(o).expect("tensor"));
                assert_close(
                    got,
                    want,
                    rtol,
                    atol,
                    &format!("output `{}` with {t} threads", o.name()),
                );
            }
        }
    }
}
