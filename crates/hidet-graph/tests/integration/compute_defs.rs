//! Compute definitions of the elementwise, cast, clip, where, PRelu, variadic, reshape,
//! identity and matmul families ([`cases`]) and of the shape and data-movement family
//! ([`movement_cases`]) against the operators' reference `eval`.
//!
//! Every case builds the operator through the global registry, asks it for its compute
//! definition for the inputs' concrete types, runs each node's naive kernel
//! (`ComputeDef::node_function`) through the IR interpreter, and compares every output with
//! `eval` on the same inputs (each kernel also passes the IR verifier): same dtype, same shape, values exact for integers and bools
//! and, for floats, within a dtype-dependent tolerance (math) or bit for bit (data movement;
//! NaN matches NaN). Cases whose operator
//! has no definition for those inputs are listed with the reason; the test checks that
//! `compute` really returns `Ok(None)` there, so the coverage printed by
//! `cargo test -p hidet-graph --test integration compute_defs:: -- --nocapture` is the actual one.

use hidet_graph::{
    Attribute, Attributes, ComputeInput, DType, OpContext, Operator, Registry, Tensor,
};
use hidet_ir::compute::{tensor_dtype, tensor_shape, ComputeDef};
use hidet_ir::dtype::DataType;
use hidet_ir::function::Target;
use hidet_ir::interp::{run_function, Arg, Buffer};
use hidet_ir::verify::verify_function;

#[path = "compute_defs/reduction.rs"]
mod reduction;
#[path = "compute_defs/resize.rs"]
mod resize;
#[path = "compute_defs/window.rs"]
mod window;

/// Deterministic random numbers (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `[lo, hi]`.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

/// How a case's input is made.
#[derive(Clone)]
enum In {
    /// Floats uniform in `[lo, hi)`, never within 0.01 of zero, converted to the dtype.
    Float(DType, Vec<usize>, f64, f64),
    /// Non-zero integers in `[lo, hi]`, converted to the dtype (floats hold integer values,
    /// so comparisons see ties).
    Int(DType, Vec<usize>, i64, i64),
    /// Multiples of 1/2 in `[lo, hi]` (Round's ties).
    Halves(DType, Vec<usize>, i64, i64),
    /// Random bools.
    Bool(Vec<usize>),
    /// Floats in `[-3, 3)` with NaN, +inf, -inf and 1e10 mixed in.
    Special(DType, Vec<usize>),
    /// A fixed tensor.
    Value(Tensor),
    /// An absent optional input.
    Absent,
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl In {
    fn make(&self, rng: &mut Rng) -> Option<Tensor> {
        let from_f64 = |shape: &[usize], v: Vec<f64>, dt: DType| {
            Tensor::new(shape.to_vec(), v)
                .expect("length matches the shape")
                .cast(dt)
        };
        Some(match self {
            In::Float(dt, shape, lo, hi) => {
                let v = (0..numel(shape))
                    .map(|_| loop {
                        let x = rng.uniform(*lo, *hi);
                        if x.abs() >= 0.01 {
                            break x;
                        }
                    })
                    .collect();
                from_f64(shape, v, *dt)
            }
            In::Int(dt, shape, lo, hi) | In::Halves(dt, shape, lo, hi) => {
                let halves = matches!(self, In::Halves(..));
                let (lo, hi) = if halves { (2 * lo, 2 * hi) } else { (*lo, *hi) };
                let v: Vec<i64> = (0..numel(shape))
                    .map(|_| loop {
                        let x = rng.int(lo, hi);
                        if x != 0 {
                            break x;
                        }
                    })
                    .collect();
                if halves {
                    from_f64(shape, v.iter().map(|&x| x as f64 / 2.0).collect(), *dt)
                } else {
                    Tensor::new(shape.clone(), v)
                        .expect("length matches the shape")
                        .cast(*dt)
                }
            }
            In::Bool(shape) => {
                let v: Vec<bool> = (0..numel(shape)).map(|_| rng.next() & 1 == 1).collect();
                Tensor::new(shape.clone(), v).expect("length matches the shape")
            }
            In::Special(dt, shape) => {
                let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e10];
                let v = (0..numel(shape))
                    .map(|k| match specials.get(k % 7) {
                        Some(s) => *s,
                        None => rng.uniform(-3.0, 3.0),
                    })
                    .collect();
                from_f64(shape, v, *dt)
            }
            In::Value(t) => t.clone(),
            In::Absent => return None,
        })
    }
}

struct Case {
    op: &'static str,
    opset: i64,
    /// Number of outputs the node declares (Split).
    outputs: usize,
    attrs: Vec<(&'static str, Attribute)>,
    inputs: Vec<In>,
    /// `None`: a definition is expected; `Some(reason)`: `compute` must return `Ok(None)`.
    no_def: Option<&'static str>,
    /// `(absolute, relative)` float tolerance replacing [`tolerance`]'s.
    tol: Option<(f64, f64)>,
}

fn case(op: &'static str, inputs: Vec<In>) -> Case {
    Case {
        op,
        opset: 21,
        outputs: 1,
        attrs: Vec::new(),
        inputs,
        no_def: None,
        tol: None,
    }
}

impl Case {
    fn opset(mut self, opset: i64) -> Case {
        self.opset = opset;
        self
    }

    fn outputs(mut self, n: usize) -> Case {
        self.outputs = n;
        self
    }

    fn attr(mut self, name: &'static str, a: Attribute) -> Case {
        self.attrs.push((name, a));
        self
    }

    fn tol(mut self, atol: f64, rtol: f64) -> Case {
        self.tol = Some((atol, rtol));
        self
    }

    fn none(mut self, reason: &'static str) -> Case {
        self.no_def = Some(reason);
        self
    }

    fn label(&self) -> String {
        let attrs: Vec<String> = self
            .attrs
            .iter()
            .map(|(n, a)| format!("{n}={a:?}"))
            .collect();
        format!("{}(opset {}; {})", self.op, self.opset, attrs.join(", "))
    }
}

use DType::{Bool as B, BF16, F16, F32, F64, I16, I32, I64, I8, U16, U32, U64, U8};

fn f(dt: DType, shape: &[usize]) -> In {
    In::Float(dt, shape.to_vec(), -3.0, 3.0)
}

fn range(dt: DType, shape: &[usize], lo: f64, hi: f64) -> In {
    In::Float(dt, shape.to_vec(), lo, hi)
}

fn int(dt: DType, shape: &[usize], lo: i64, hi: i64) -> In {
    In::Int(dt, shape.to_vec(), lo, hi)
}

fn boolean(shape: &[usize]) -> In {
    In::Bool(shape.to_vec())
}

fn special(dt: DType, shape: &[usize]) -> In {
    In::Special(dt, shape.to_vec())
}

fn i64s(shape: &[usize], v: &[i64]) -> In {
    In::Value(Tensor::new(shape.to_vec(), v.to_vec()).expect("length matches the shape"))
}

fn u64s(shape: &[usize], v: &[u64]) -> In {
    In::Value(Tensor::new(shape.to_vec(), v.to_vec()).expect("length matches the shape"))
}

fn cases() -> Vec<Case> {
    let mut c = Vec::new();
    // Unary math on floats: (op, low, high) of the data.
    let math: &[(&str, f64, f64)] = &[
        ("Sqrt", 0.05, 5.0),
        ("Reciprocal", -3.0, 3.0),
        ("Exp", -3.0, 3.0),
        ("Log", 0.05, 5.0),
        ("Erf", -3.0, 3.0),
        ("Sigmoid", -8.0, 8.0),
        ("Tanh", -3.0, 3.0),
        ("Floor", -3.0, 3.0),
        ("Ceil", -3.0, 3.0),
        ("Softplus", -40.0, 40.0),
        ("Softsign", -3.0, 3.0),
        ("Mish", -6.0, 6.0),
        ("HardSwish", -5.0, 5.0),
        ("Sin", -3.0, 3.0),
        ("Cos", -3.0, 3.0),
        ("Tan", -1.4, 1.4),
        ("Asin", -0.95, 0.95),
        ("Acos", -0.95, 0.95),
        ("Atan", -3.0, 3.0),
        ("Sinh", -3.0, 3.0),
        ("Cosh", -3.0, 3.0),
        ("Asinh", -3.0, 3.0),
        ("Acosh", 1.05, 4.0),
        ("Atanh", -0.95, 0.95),
        ("LeakyRelu", -3.0, 3.0),
        ("Elu", -3.0, 3.0),
        ("Selu", -3.0, 3.0),
        ("Celu", -3.0, 3.0),
        ("HardSigmoid", -4.0, 4.0),
        ("ThresholdedRelu", -3.0, 3.0),
        ("Gelu", -4.0, 4.0),
        ("Shrink", -3.0, 3.0),
    ];
    for &(op, lo, hi) in math {
        c.push(case(op, vec![range(F32, &[3, 5, 7], lo, hi)]));
        c.push(case(op, vec![range(F16, &[11], lo, hi)]));
        c.push(case(op, vec![range(F64, &[], lo, hi)]));
    }
    c.push(case("Round", vec![In::Halves(F32, vec![4, 9], -6, 6)]));
    c.push(case("Round", vec![In::Halves(BF16, vec![13], -6, 6)]));
    c.push(case("Round", vec![range(F64, &[5], -9.0, 9.0)]));
    c.push(case("LeakyRelu", vec![f(F32, &[2, 9])]).attr("alpha", Attribute::Float(0.37)));
    c.push(case("Elu", vec![f(F16, &[2, 9])]).attr("alpha", Attribute::Float(0.6)));
    c.push(
        case("Selu", vec![f(F32, &[17])])
            .attr("alpha", Attribute::Float(1.3))
            .attr("gamma", Attribute::Float(0.7)),
    );
    c.push(case("Celu", vec![f(F32, &[3, 3])]).attr("alpha", Attribute::Float(2.5)));
    c.push(
        case("HardSigmoid", vec![f(F32, &[3, 3])])
            .attr("alpha", Attribute::Float(0.3))
            .attr("beta", Attribute::Float(0.45)),
    );
    c.push(case("ThresholdedRelu", vec![f(F32, &[13])]).attr("alpha", Attribute::Float(0.7)));
    c.push(
        case("Gelu", vec![range(F32, &[3, 7], -4.0, 4.0)])
            .attr("approximate", Attribute::String("tanh".into())),
    );
    c.push(
        case("Gelu", vec![range(BF16, &[9], -4.0, 4.0)])
            .attr("approximate", Attribute::String("tanh".into())),
    );
    c.push(
        case("Shrink", vec![f(F32, &[5, 3])])
            .attr("bias", Attribute::Float(0.25))
            .attr("lambd", Attribute::Float(1.1)),
    );
    c.push(
        case("Shrink", vec![int(I32, &[4, 5], -9, 9)])
            .attr("bias", Attribute::Float(1.5))
            .attr("lambd", Attribute::Float(2.0)),
    );
    c.push(
        case("Shrink", vec![int(U8, &[3, 5], 1, 9)])
            .attr("bias", Attribute::Float(2.5))
            .attr("lambd", Attribute::Float(1.0)),
    );
    // Unary ops that also take integers.
    for op in ["Neg", "Abs", "Sign", "Relu"] {
        c.push(case(op, vec![f(F32, &[3, 1, 5])]));
        c.push(case(op, vec![f(F16, &[])]));
        c.push(case(op, vec![int(I32, &[2, 7], -50, 50)]));
        c.push(case(op, vec![int(I8, &[9], -100, 100)]));
        c.push(case(op, vec![int(U16, &[6], 1, 900)]));
    }
    c.push(case(
        "Sign",
        vec![In::Value(
            Tensor::new(vec![3], vec![0.0f32, -0.0, 2.0]).unwrap(),
        )],
    ));
    c.push(case("Not", vec![boolean(&[3, 4])]));
    c.push(case("Not", vec![boolean(&[])]));
    c.push(case("BitwiseNot", vec![int(I16, &[3, 4], -300, 300)]));
    c.push(case("BitwiseNot", vec![int(U8, &[7], 1, 255)]));
    c.push(case("IsNaN", vec![special(F32, &[3, 5])]));
    c.push(case("IsNaN", vec![special(F16, &[9])]));
    c.push(case("IsInf", vec![special(F32, &[3, 5])]));
    c.push(case("IsInf", vec![special(F64, &[11])]).attr("detect_negative", Attribute::Int(0)));
    c.push(case("IsInf", vec![special(F32, &[11])]).attr("detect_positive", Attribute::Int(0)));

    // Binary arithmetic with broadcasting and rank 0.
    for op in ["Add", "Sub", "Mul", "Div"] {
        c.push(case(op, vec![f(F32, &[3, 1, 5]), f(F32, &[4, 1])]));
        c.push(case(op, vec![f(F16, &[]), f(F16, &[2, 3])]));
        c.push(case(op, vec![f(BF16, &[7]), f(BF16, &[])]));
        c.push(case(op, vec![f(F64, &[]), f(F64, &[])]));
        c.push(case(
            op,
            vec![int(I32, &[5, 3], -60, 60), int(I32, &[3], -7, 7)],
        ));
        c.push(case(
            op,
            vec![
                int(I64, &[2, 1, 3], -1000, 1000),
                int(I64, &[1, 4, 1], -9, 9),
            ],
        ));
        c.push(case(op, vec![int(U8, &[6], 20, 90), int(U8, &[6], 1, 9)]));
    }
    c.push(case(
        "Pow",
        vec![range(F32, &[3, 4], 0.3, 3.0), f(F32, &[4])],
    ));
    c.push(case("Pow", vec![range(F16, &[5], 0.3, 2.0), f(F16, &[])]));
    c.push(case("Pow", vec![f(F32, &[2, 5]), int(I64, &[5], -3, 3)]));
    c.push(case(
        "Pow",
        vec![range(F64, &[7], 0.5, 2.0), range(F32, &[7], -2.0, 2.0)],
    ));
    c.push(case(
        "Pow",
        vec![int(I32, &[2, 3], 1, 6), range(F32, &[3], 0.2, 3.0)],
    ));
    c.push(
        case("Pow", vec![int(I32, &[2, 3], -5, 5), int(I32, &[3], 0, 4)])
            .none("integer Pow is wrapping repeated multiplication, which has no IR operation"),
    );
    for fmod in [0, 1] {
        c.push(case("Mod", vec![f(F32, &[4, 5]), f(F32, &[5])]).attr("fmod", Attribute::Int(fmod)));
        c.push(case("Mod", vec![f(F16, &[9]), f(F16, &[])]).attr("fmod", Attribute::Int(fmod)));
        c.push(
            case(
                "Mod",
                vec![int(I32, &[4, 5], -40, 40), int(I32, &[4, 1], -9, 9)],
            )
            .attr("fmod", Attribute::Int(fmod)),
        );
        c.push(
            case("Mod", vec![int(U16, &[7], 1, 500), int(U16, &[7], 1, 30)])
                .attr("fmod", Attribute::Int(fmod)),
        );
    }
    for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"] {
        c.push(case(
            op,
            vec![int(F32, &[3, 4], -2, 2), int(F32, &[4], -2, 2)],
        ));
        c.push(case(op, vec![int(I64, &[5], -2, 2), int(I64, &[], -2, 2)]));
        c.push(case(op, vec![special(F32, &[7]), f(F32, &[7])]));
        c.push(case(
            op,
            vec![int(U8, &[2, 3], 1, 3), int(U8, &[2, 1], 1, 3)],
        ));
    }
    c.push(case("Equal", vec![boolean(&[3, 4]), boolean(&[1, 4])]));
    for op in ["And", "Or", "Xor"] {
        c.push(case(op, vec![boolean(&[3, 1, 4]), boolean(&[5, 1])]));
        c.push(case(op, vec![boolean(&[]), boolean(&[3])]));
    }
    for dir in ["LEFT", "RIGHT"] {
        let d = || Attribute::String(dir.into());
        c.push(
            case(
                "BitShift",
                vec![int(U8, &[3, 4], 1, 255), int(U8, &[4], 1, 11)],
            )
            .attr("direction", d()),
        );
        c.push(
            case(
                "BitShift",
                vec![int(U32, &[5], 1, 1 << 20), int(U32, &[], 1, 40)],
            )
            .attr("direction", d()),
        );
        c.push(
            case(
                "BitShift",
                vec![
                    int(U64, &[2, 3], 1, 1 << 20),
                    u64s(&[2, 3], &[3, 40, 64, 70, 1, 43]),
                ],
            )
            .attr("direction", d()),
        );
    }
    for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"] {
        c.push(case(
            op,
            vec![int(I16, &[3, 4], -900, 900), int(I16, &[4], -900, 900)],
        ));
        c.push(case(op, vec![int(U8, &[5], 1, 255), int(U8, &[], 1, 255)]));
    }

    // Where, Clip, PRelu.
    c.push(case(
        "Where",
        vec![boolean(&[3, 1]), f(F32, &[1, 4]), f(F32, &[])],
    ));
    c.push(case(
        "Where",
        vec![
            boolean(&[]),
            int(I64, &[2, 3], -9, 9),
            int(I64, &[3], -9, 9),
        ],
    ));
    c.push(case(
        "Where",
        vec![boolean(&[5]), boolean(&[5]), boolean(&[1])],
    ));
    c.push(
        case("Clip", vec![f(F32, &[4, 5])])
            .opset(6)
            .attr("min", Attribute::Float(-1.25))
            .attr("max", Attribute::Float(0.7)),
    );
    c.push(
        case("Clip", vec![f(F16, &[9])])
            .opset(6)
            .attr("max", Attribute::Float(0.1)),
    );
    c.push(
        case("Clip", vec![special(F32, &[9])])
            .opset(6)
            .attr("min", Attribute::Float(-0.5)),
    );
    c.push(
        case("Clip", vec![int(I32, &[3, 5], -9, 9)])
            .opset(6)
            .attr("min", Attribute::Float(-2.5))
            .attr("max", Attribute::Float(3.7)),
    );
    c.push(
        case("Clip", vec![int(U64, &[6], 1, 900)])
            .opset(6)
            .attr("max", Attribute::Float(400.0)),
    );
    c.push(
        case(
            "Clip",
            vec![
                f(F32, &[3, 7]),
                range(F32, &[], -1.0, -0.5),
                range(F32, &[], 0.5, 1.0),
            ],
        )
        .opset(13),
    );
    c.push(
        case(
            "Clip",
            vec![
                int(I32, &[2, 3, 5], -20, 20),
                In::Absent,
                int(I32, &[], 1, 7),
            ],
        )
        .opset(13),
    );
    c.push(case("Clip", vec![int(U8, &[11], 1, 250), int(U8, &[1], 40, 60)]).opset(12));
    c.push(case("Clip", vec![f(F64, &[])]).opset(11));
    c.push(case("PRelu", vec![f(F32, &[2, 3, 4]), f(F32, &[3, 1])]));
    c.push(case("PRelu", vec![f(F16, &[5, 3]), f(F16, &[3])]));
    c.push(case(
        "PRelu",
        vec![int(I32, &[4, 5], -20, 20), int(I32, &[5], -3, 3)],
    ));

    // Variadic.
    c.push(case(
        "Sum",
        vec![f(F32, &[3, 1, 4]), f(F32, &[5, 1]), f(F32, &[4])],
    ));
    c.push(case("Sum", vec![f(F16, &[2, 3])]));
    c.push(case(
        "Sum",
        vec![int(I32, &[3, 4], -50, 50), int(I32, &[], -50, 50)],
    ));
    c.push(case(
        "Mean",
        vec![f(F32, &[3, 4]), f(F32, &[4]), f(F32, &[3, 1])],
    ));
    c.push(case("Mean", vec![f(F16, &[7]), f(F16, &[7])]));
    c.push(case(
        "Mean",
        vec![
            int(I32, &[9], -50, 50),
            int(I32, &[9], -50, 50),
            int(I32, &[1], -5, 5),
        ],
    ));
    c.push(case(
        "Mean",
        vec![int(U16, &[9], 1, 500), int(U16, &[9], 1, 500)],
    ));
    c.push(case(
        "Max",
        vec![special(F32, &[7]), f(F32, &[7]), special(F32, &[1])],
    ));
    c.push(case(
        "Max",
        vec![int(I64, &[2, 5], -9, 9), int(I64, &[5], -9, 9)],
    ));
    c.push(case("Min", vec![f(F32, &[7]), special(F32, &[7])]));
    c.push(case(
        "Min",
        vec![int(U8, &[3, 1], 1, 200), int(U8, &[1, 4], 1, 200)],
    ));
    c.push(case("Min", vec![f(BF16, &[])]));

    // Cast and CastLike.
    let to = |d: DType| Attribute::Int(i64::from(d.onnx_code()));
    c.push(case("Cast", vec![range(F32, &[3, 7], -400.0, 400.0)]).attr("to", to(I8)));
    c.push(case("Cast", vec![special(F32, &[3, 7])]).attr("to", to(I32)));
    c.push(case("Cast", vec![special(F32, &[9])]).attr("to", to(I64)));
    c.push(case("Cast", vec![range(F64, &[5, 3], -400.0, 400.0)]).attr("to", to(U8)));
    c.push(case("Cast", vec![special(F16, &[9])]).attr("to", to(U16)));
    c.push(case("Cast", vec![special(F32, &[9])]).attr("to", to(U32)));
    c.push(case("Cast", vec![special(F32, &[9])]).attr("to", to(B)));
    c.push(
        case("Cast", vec![f(F32, &[9])])
            .attr("to", to(U64))
            .none("u64's saturation value is beyond the IR's 64-bit signed integer constants"),
    );
    c.push(case("Cast", vec![int(I64, &[4, 3], -300, 300)]).attr("to", to(U8)));
    c.push(case("Cast", vec![int(I32, &[4, 3], -3000, 3000)]).attr("to", to(F16)));
    c.push(case("Cast", vec![int(U8, &[6], 1, 255)]).attr("to", to(I8)));
    c.push(case("Cast", vec![f(F64, &[2, 5])]).attr("to", to(F32)));
    c.push(
        case("Cast", vec![f(F32, &[2, 5])])
            .attr("to", to(BF16))
            .none("casts to bf16 truncate (ONNX reference); no IR form of the truncation yet"),
    );
    c.push(case("Cast", vec![boolean(&[2, 5])]).attr("to", to(F32)));
    c.push(case("Cast", vec![int(I16, &[], -9, 9)]).attr("to", to(B)));
    c.push(case("Cast", vec![f(F32, &[4])]).attr("to", to(F32)));
    c.push(case(
        "CastLike",
        vec![range(F32, &[3, 4], -40.0, 40.0), int(I16, &[2], 1, 2)],
    ));
    c.push(case("CastLike", vec![int(I32, &[5], -9, 9), f(F64, &[])]));

    // Reshape and Identity.
    c.push(case(
        "Reshape",
        vec![f(F32, &[2, 3, 5]), i64s(&[2], &[5, -1])],
    ));
    c.push(case(
        "Reshape",
        vec![int(I64, &[6, 1, 4], -9, 9), i64s(&[3], &[0, 2, -1])],
    ));
    c.push(case("Reshape", vec![boolean(&[1, 1]), i64s(&[0], &[])]));
    c.push(case("Reshape", vec![f(F16, &[]), i64s(&[3], &[1, 1, 1])]));
    c.push(case("Reshape", vec![f(F32, &[3, 7]), i64s(&[2], &[3, 7])]));
    c.push(
        case("Reshape", vec![f(F32, &[4, 0, 3]), i64s(&[2], &[0, 5])])
            .attr("allowzero", Attribute::Int(1)),
    );
    c.push(case("Identity", vec![int(I64, &[3, 5], -9, 9)]));
    c.push(case("Identity", vec![boolean(&[])]));
    c.push(case("Identity", vec![f(BF16, &[2, 1, 3])]));

    // MatMul: batch broadcasting, 1-D promotion, every accumulation type.
    c.push(case(
        "MatMul",
        vec![f(F32, &[2, 1, 3, 5]), f(F32, &[4, 5, 2])],
    ));
    c.push(case("MatMul", vec![f(F32, &[7]), f(F32, &[3, 7, 2])]));
    c.push(case("MatMul", vec![f(F32, &[2, 3, 7]), f(F32, &[7])]));
    c.push(case("MatMul", vec![f(F32, &[13]), f(F32, &[13])]));
    c.push(case("MatMul", vec![f(F32, &[3, 0]), f(F32, &[0, 2])]));
    c.push(case("MatMul", vec![f(F16, &[3, 17]), f(F16, &[17, 5])]));
    c.push(case("MatMul", vec![f(BF16, &[2, 3, 9]), f(BF16, &[9, 4])]));
    c.push(case(
        "MatMul",
        vec![f(F64, &[1, 3, 11]), f(F64, &[5, 11, 2])],
    ));
    c.push(case(
        "MatMul",
        vec![int(I32, &[3, 4], -20, 20), int(I32, &[4, 6], -20, 20)],
    ));
    c.push(case(
        "MatMul",
        vec![int(U32, &[2, 5], 1, 30), int(U32, &[5], 1, 30)],
    ));
    c
}

fn i32s(shape: &[usize], v: &[i64]) -> In {
    In::Value(
        Tensor::new(shape.to_vec(), v.to_vec())
            .expect("length matches the shape")
            .cast(I32),
    )
}

fn scalar<T: hidet_graph::Element>(v: T) -> In {
    In::Value(Tensor::scalar(v))
}

fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

fn int_attr(v: i64) -> Attribute {
    Attribute::Int(v)
}

/// The shape and data-movement family: Flatten, Squeeze, Unsqueeze, Transpose, Concat,
/// Split, Slice, the gathers, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, Trilu, the
/// generators, ReverseSequence; the scatters, NonZero and Compress have no definition.
fn movement_cases() -> Vec<Case> {
    // Flatten, Squeeze, Unsqueeze.
    let mut c = vec![
        case("Flatten", vec![f(F32, &[2, 3, 5, 7])]).attr("axis", int_attr(2)),
        case("Flatten", vec![f(F32, &[2, 5, 3])]),
        case("Flatten", vec![int(I64, &[3, 1, 5], -90, 90)])
            .opset(9)
            .attr("axis", int_attr(0)),
        case("Flatten", vec![boolean(&[3, 1, 5])]).attr("axis", int_attr(-1)),
        case("Flatten", vec![f(F16, &[4, 3])]).attr("axis", int_attr(2)),
        case("Flatten", vec![f(F32, &[])]).attr("axis", int_attr(0)),
        case(
            "Squeeze",
            vec![f(F32, &[1, 3, 1, 5, 1]), i64s(&[2], &[0, -1])],
        ),
        case("Squeeze", vec![int(I64, &[1, 3, 1, 5, 1], -50, 50)]),
        case("Squeeze", vec![boolean(&[3, 1, 5])])
            .opset(11)
            .attr("axes", ints(&[1])),
        case("Squeeze", vec![f(F16, &[1, 1]), i64s(&[1], &[-2])]).opset(13),
        case("Squeeze", vec![f(F32, &[1])]),
        case("Unsqueeze", vec![f(F32, &[3, 5]), i64s(&[2], &[3, 0])]),
        case(
            "Unsqueeze",
            vec![int(I64, &[2, 3], -9, 9), i64s(&[1], &[-1])],
        ),
        case("Unsqueeze", vec![boolean(&[4])])
            .opset(11)
            .attr("axes", ints(&[0, 2])),
        case("Unsqueeze", vec![f(F16, &[]), i64s(&[2], &[0, 1])]),
    ];

    // Transpose.
    c.push(case("Transpose", vec![f(F32, &[3, 4, 5])]).attr("perm", ints(&[2, 0, 1])));
    c.push(case("Transpose", vec![int(I64, &[2, 3, 5, 7], -99, 99)]));
    c.push(case("Transpose", vec![boolean(&[3, 1, 4])]).attr("perm", ints(&[1, 2, 0])));
    c.push(case("Transpose", vec![f(F16, &[5])]));
    c.push(case("Transpose", vec![f(F32, &[])]));

    // Concat and Split.
    c.push(
        case(
            "Concat",
            vec![f(F32, &[2, 3, 5]), f(F32, &[2, 1, 5]), f(F32, &[2, 4, 5])],
        )
        .attr("axis", int_attr(-2)),
    );
    c.push(
        case(
            "Concat",
            vec![
                int(I64, &[0, 3], -9, 9),
                int(I64, &[2, 3], -9, 9),
                int(I64, &[1, 3], -9, 9),
            ],
        )
        .attr("axis", int_attr(0)),
    );
    c.push(case("Concat", vec![boolean(&[3, 2]), boolean(&[3, 5])]).attr("axis", int_attr(1)));
    c.push(case("Concat", vec![f(F16, &[7])]).attr("axis", int_attr(0)));
    c.push(case("Concat", vec![f(F32, &[2, 3]), f(F32, &[2, 0])]).attr("axis", int_attr(-1)));
    c.push(
        case("Concat", vec![f(F32, &[3, 2]), f(F32, &[1, 2])])
            .opset(4)
            .attr("axis", int_attr(0)),
    );
    c.push(
        case("Split", vec![f(F32, &[3, 7])])
            .outputs(3)
            .attr("axis", int_attr(1))
            .attr("num_outputs", int_attr(3)),
    );
    c.push(
        case("Split", vec![f(F32, &[3, 7]), i64s(&[3], &[2, 0, 5])])
            .opset(13)
            .outputs(3)
            .attr("axis", int_attr(-1)),
    );
    c.push(
        case("Split", vec![int(I64, &[5, 3], -9, 9)])
            .opset(11)
            .outputs(2)
            .attr("split", ints(&[1, 4])),
    );
    c.push(case("Split", vec![f(F16, &[6, 5])]).opset(11).outputs(3));
    c.push(
        case("Split", vec![boolean(&[4, 6])])
            .opset(18)
            .outputs(2)
            .attr("axis", int_attr(1)),
    );

    // Slice.
    c.push(case(
        "Slice",
        vec![
            f(F32, &[5, 7]),
            i64s(&[2], &[-1, 1]),
            i64s(&[2], &[0, 100]),
            i64s(&[2], &[-1, 0]),
            i64s(&[2], &[-2, 2]),
        ],
    ));
    c.push(
        case(
            "Slice",
            vec![
                int(I64, &[4, 6, 3], -9, 9),
                i64s(&[1], &[1]),
                i64s(&[1], &[-1]),
            ],
        )
        .opset(13),
    );
    c.push(
        case("Slice", vec![boolean(&[3, 4])])
            .opset(9)
            .attr("starts", ints(&[1]))
            .attr("ends", ints(&[3]))
            .attr("axes", ints(&[1])),
    );
    c.push(case(
        "Slice",
        vec![
            f(F16, &[10]),
            i64s(&[1], &[-100]),
            i64s(&[1], &[100]),
            i64s(&[1], &[0]),
            i64s(&[1], &[3]),
        ],
    ));
    c.push(case(
        "Slice",
        vec![
            f(F32, &[4, 5]),
            i64s(&[1], &[3]),
            i64s(&[1], &[1]),
            i64s(&[1], &[1]),
        ],
    ));
    c.push(case(
        "Slice",
        vec![
            f(F32, &[6, 5]),
            i64s(&[1], &[1]),
            i64s(&[1], &[i64::MAX]),
            i64s(&[1], &[0]),
            i64s(&[1], &[i64::MAX]),
        ],
    ));
    c.push(case(
        "Slice",
        vec![
            int(I64, &[7, 2], -9, 9),
            i32s(&[1], &[-1]),
            i32s(&[1], &[i32::MIN as i64]),
            In::Absent,
            i32s(&[1], &[-1]),
        ],
    ));

    // Gather, GatherElements, GatherND (random, often negative indices).
    c.push(
        case("Gather", vec![f(F32, &[5, 4, 3]), int(I64, &[2, 3], -4, 3)])
            .attr("axis", int_attr(1)),
    );
    c.push(case(
        "Gather",
        vec![int(I64, &[7], -99, 99), int(I32, &[4], -7, 6)],
    ));
    c.push(case("Gather", vec![boolean(&[3, 4]), i64s(&[], &[-2])]).attr("axis", int_attr(-1)));
    c.push(case(
        "Gather",
        vec![f(F16, &[6, 2]), int(I64, &[2, 2, 2], -6, 5)],
    ));
    c.push(
        case(
            "GatherElements",
            vec![f(F32, &[3, 4]), int(I64, &[3, 5], -4, 3)],
        )
        .attr("axis", int_attr(1)),
    );
    c.push(
        case(
            "GatherElements",
            vec![int(I64, &[4, 3, 2], -9, 9), int(I32, &[2, 3, 2], -4, 3)],
        )
        .attr("axis", int_attr(-3)),
    );
    c.push(case(
        "GatherElements",
        vec![boolean(&[5]), int(I64, &[3], -5, 4)],
    ));
    c.push(case(
        "GatherElements",
        vec![f(F16, &[3, 3]), int(I64, &[3, 3], -3, 2)],
    ));
    c.push(case(
        "GatherND",
        vec![f(F32, &[3, 4, 5]), int(I64, &[2, 2], -3, 2)],
    ));
    c.push(
        case(
            "GatherND",
            vec![f(F32, &[2, 3, 4]), int(I64, &[2, 5, 1], -3, 2)],
        )
        .attr("batch_dims", int_attr(1)),
    );
    c.push(
        case(
            "GatherND",
            vec![int(I64, &[4, 3], -9, 9), int(I32, &[3, 2], -3, 2)],
        )
        .opset(11),
    );
    c.push(case(
        "GatherND",
        vec![boolean(&[3, 5]), int(I64, &[2, 1], -3, 2)],
    ));

    // Expand and Tile.
    c.push(case(
        "Expand",
        vec![f(F32, &[3, 1]), i64s(&[3], &[2, 1, 5])],
    ));
    c.push(case(
        "Expand",
        vec![int(I64, &[4], -9, 9), i64s(&[2], &[3, 1])],
    ));
    c.push(case("Expand", vec![boolean(&[1]), i64s(&[1], &[6])]));
    c.push(case("Expand", vec![f(F16, &[2, 3]), i64s(&[1], &[1])]));
    c.push(case("Expand", vec![f(F32, &[]), i64s(&[2], &[2, 3])]));
    c.push(case("Tile", vec![f(F32, &[2, 3]), i64s(&[2], &[3, 2])]));
    c.push(case(
        "Tile",
        vec![int(I64, &[3, 1, 2], -9, 9), i64s(&[3], &[1, 4, 2])],
    ));
    c.push(case("Tile", vec![boolean(&[5]), i64s(&[1], &[0])]));
    c.push(case("Tile", vec![f(F16, &[1, 3]), i64s(&[2], &[2, 1])]));

    // Pad: every mode, negative pads (cropping), the axes input, attribute forms.
    let mode = |m: &str| Attribute::String(m.into());
    c.push(case(
        "Pad",
        vec![f(F32, &[3, 4]), i64s(&[4], &[1, -1, 2, 3]), f(F32, &[])],
    ));
    c.push(
        case("Pad", vec![f(F32, &[4, 5]), i64s(&[4], &[2, 1, 3, 4])]).attr("mode", mode("reflect")),
    );
    c.push(
        case(
            "Pad",
            vec![int(I64, &[3, 4], -9, 9), i64s(&[4], &[0, 2, 4, 1])],
        )
        .attr("mode", mode("edge")),
    );
    c.push(
        case("Pad", vec![f(F16, &[3, 5]), i64s(&[4], &[4, -1, 2, 6])]).attr("mode", mode("wrap")),
    );
    c.push(case(
        "Pad",
        vec![
            f(F32, &[2, 3, 4]),
            i64s(&[2], &[1, 2]),
            In::Absent,
            i64s(&[1], &[-1]),
        ],
    ));
    c.push(
        case(
            "Pad",
            vec![
                int(I64, &[2, 3, 4], -9, 9),
                i64s(&[4], &[1, 2, 0, 1]),
                i64s(&[], &[-7]),
                i64s(&[2], &[0, 2]),
            ],
        )
        .opset(18),
    );
    c.push(case("Pad", vec![boolean(&[3, 3]), i64s(&[4], &[1, 1, 0, 2])]).opset(11));
    c.push(
        case("Pad", vec![f(F32, &[1, 4]), i64s(&[4], &[2, 0, 1, 0])])
            .opset(13)
            .attr("mode", mode("reflect")),
    );
    c.push(case(
        "Pad",
        vec![f(F32, &[0, 3]), i64s(&[4], &[1, 0, 1, 0]), f(F32, &[1])],
    ));
    c.push(
        case("Pad", vec![f(F32, &[3, 4])])
            .opset(2)
            .attr("pads", ints(&[1, 0, 0, 2]))
            .attr("value", Attribute::Float(1.5)),
    );
    c.push(
        case("Pad", vec![int(I64, &[3, 4], -9, 9)])
            .opset(10)
            .attr("pads", ints(&[0, 1, 2, 0]))
            .attr("value", Attribute::Float(-2.7)),
    );
    c.push(
        case("Pad", vec![f(F16, &[3, 4])])
            .opset(10)
            .attr("pads", ints(&[2, 3, 1, 3]))
            .attr("mode", mode("reflect")),
    );

    c.push(
        case(
            "Pad",
            vec![f(F32, &[3, 4]), i64s(&[4], &[i64::MAX, 0, i64::MIN, 0])],
        )
        .none("pads beyond the i32 index arithmetic"),
    );

    // DepthToSpace and SpaceToDepth.
    let block = |b: i64| Attribute::Int(b);
    c.push(case("DepthToSpace", vec![f(F32, &[2, 8, 3, 2])]).attr("blocksize", block(2)));
    c.push(
        case("DepthToSpace", vec![int(I64, &[1, 18, 2, 3], -9, 9)])
            .attr("blocksize", block(3))
            .attr("mode", mode("CRD")),
    );
    c.push(
        case("DepthToSpace", vec![f(F16, &[1, 4, 1, 3])])
            .opset(1)
            .attr("blocksize", block(2)),
    );
    c.push(
        case("DepthToSpace", vec![boolean(&[2, 4, 2, 1])])
            .attr("blocksize", block(2))
            .attr("mode", mode("CRD")),
    );
    c.push(case("SpaceToDepth", vec![f(F32, &[2, 3, 4, 6])]).attr("blocksize", block(2)));
    c.push(case("SpaceToDepth", vec![int(I64, &[1, 2, 6, 3], -9, 9)]).attr("blocksize", block(3)));
    c.push(case("SpaceToDepth", vec![boolean(&[1, 1, 2, 2])]).attr("blocksize", block(2)));

    // Trilu.
    c.push(case("Trilu", vec![f(F32, &[2, 3, 5]), i64s(&[], &[-1])]));
    c.push(case("Trilu", vec![f(F32, &[4, 3])]).attr("upper", int_attr(0)));
    c.push(case(
        "Trilu",
        vec![int(I64, &[3, 4], -9, 9), i64s(&[], &[2])],
    ));
    c.push(case("Trilu", vec![boolean(&[2, 2, 3]), i64s(&[], &[100])]).attr("upper", int_attr(0)));
    c.push(case("Trilu", vec![f(F16, &[5, 5]), i64s(&[1], &[-100])]));
    c.push(case("Trilu", vec![f(F32, &[5, 6]), i64s(&[], &[i64::MIN])]));

    // Generators.
    let dtype = |d: DType| Attribute::Int(i64::from(d.onnx_code()));
    c.push(case("EyeLike", vec![f(F32, &[3, 5])]).attr("k", int_attr(1)));
    c.push(case("EyeLike", vec![int(I64, &[4, 4], -9, 9)]).attr("k", int_attr(-2)));
    c.push(case("EyeLike", vec![f(F32, &[5, 3])]).attr("dtype", dtype(B)));
    c.push(
        case("EyeLike", vec![boolean(&[2, 7])])
            .attr("dtype", dtype(F16))
            .attr("k", int_attr(10)),
    );
    c.push(
        case(
            "OneHot",
            vec![int(I64, &[2, 3], -5, 4), i64s(&[], &[5]), f(F32, &[2])],
        )
        .opset(11),
    );
    c.push(
        case(
            "OneHot",
            vec![
                int(I32, &[4], -3, 2),
                scalar(3.7f32),
                int(I64, &[2], -99, 99),
            ],
        )
        .attr("axis", int_attr(0)),
    );
    c.push(
        case(
            "OneHot",
            vec![int(I64, &[3, 2], -4, 3), i64s(&[1], &[4]), f(F16, &[2])],
        )
        .opset(9)
        .attr("axis", int_attr(1)),
    );
    c.push(case(
        "OneHot",
        vec![
            range(F32, &[5], -4.9, 4.9),
            i64s(&[1], &[5]),
            int(I64, &[1, 2], -99, 99),
        ],
    ));
    c.push(case(
        "OneHot",
        vec![int(I64, &[3], -3, 2), i64s(&[], &[3]), boolean(&[2])],
    ));
    c.push(case(
        "Range",
        vec![scalar(1.5f32), scalar(-2.0f32), scalar(-0.75f32)],
    ));
    c.push(case(
        "Range",
        vec![scalar(10i64), scalar(-3i64), scalar(-4i64)],
    ));
    c.push(case(
        "Range",
        vec![
            scalar(hidet_graph::half::f16::from_f32(0.5)),
            scalar(hidet_graph::half::f16::from_f32(3.3)),
            scalar(hidet_graph::half::f16::from_f32(0.4)),
        ],
    ));
    c.push(case(
        "Range",
        vec![scalar(3i32), scalar(17i32), scalar(5i32)],
    ));
    c.push(case(
        "Range",
        vec![scalar(0.1f64), scalar(1.0f64), scalar(0.3f64)],
    ));
    c.push(case(
        "Range",
        vec![scalar(3i64), scalar(1i64), scalar(2i64)],
    ));
    c.push(case("ConstantOfShape", vec![i64s(&[3], &[2, 3, 4])]));
    c.push(case("ConstantOfShape", vec![i64s(&[2], &[3, 1])]).attr(
        "value",
        Attribute::Tensor(Tensor::new(vec![1], vec![-7i64]).unwrap()),
    ));
    c.push(case("ConstantOfShape", vec![i64s(&[1], &[0])]).attr(
        "value",
        Attribute::Tensor(
            Tensor::new(vec![1], vec![hidet_graph::half::f16::from_f32(2.5)]).unwrap(),
        ),
    ));
    c.push(
        case("ConstantOfShape", vec![i64s(&[0], &[])])
            .attr("value", Attribute::Tensor(Tensor::scalar(true))),
    );
    c.push(case("Size", vec![f(F32, &[3, 4, 5])]));
    c.push(case("Size", vec![boolean(&[])]));

    // ReverseSequence.
    c.push(case(
        "ReverseSequence",
        vec![f(F32, &[4, 3, 2]), i64s(&[3], &[4, 1, 2])],
    ));
    c.push(
        case(
            "ReverseSequence",
            vec![int(I64, &[3, 5], -9, 9), i32s(&[3], &[5, 0, 3])],
        )
        .attr("batch_axis", int_attr(0))
        .attr("time_axis", int_attr(1)),
    );
    c.push(
        case(
            "ReverseSequence",
            vec![boolean(&[2, 4, 2, 3]), i64s(&[2], &[2, 3])],
        )
        .attr("batch_axis", int_attr(0))
        .attr("time_axis", int_attr(1)),
    );

    // Other element types move the same way.
    c.push(case("Transpose", vec![f(BF16, &[2, 5, 3])]).attr("perm", ints(&[1, 2, 0])));
    c.push(case(
        "Gather",
        vec![int(U8, &[4, 3], 1, 250), int(I32, &[5], -4, 3)],
    ));
    c.push(case(
        "Pad",
        vec![f(BF16, &[3, 2]), i64s(&[4], &[0, 2, 1, 1]), f(BF16, &[])],
    ));
    c.push(case(
        "Pad",
        vec![f(F16, &[2, 3]), i64s(&[4], &[1, 1, 1, 1]), f(F16, &[1])],
    ));
    c.push(
        case(
            "Concat",
            vec![int(I8, &[2, 2], -99, 99), int(I8, &[2, 3], -99, 99)],
        )
        .attr("axis", int_attr(1)),
    );
    c.push(case(
        "Range",
        vec![
            scalar(hidet_graph::half::bf16::from_f32(-1.25)),
            scalar(hidet_graph::half::bf16::from_f32(2.0)),
            scalar(hidet_graph::half::bf16::from_f32(0.3)),
        ],
    ));
    c.push(
        case("ConstantOfShape", vec![i64s(&[1], &[3])])
            .attr("value", Attribute::Tensor(Tensor::scalar(u64::MAX - 1)))
            .none("a u64 value beyond i64::MAX has no IR constant"),
    );
    c.push(
        case("ConstantOfShape", vec![i64s(&[2], &[2, 2])])
            .attr("value", Attribute::Tensor(Tensor::scalar(7u64))),
    );

    // Data-dependent shapes and indexed writes: no definition.
    let shape_why = "the output shape depends on the data";
    c.push(case("NonZero", vec![f(F32, &[3, 4])]).none(shape_why));
    c.push(
        case("Compress", vec![f(F32, &[3, 4]), boolean(&[3])])
            .attr("axis", int_attr(0))
            .none(shape_why),
    );
    // ScatterElements (and Scatter) in gather form: the last duplicate along the axis wins,
    // indices smaller than the data off the axis leave the rest alone, a reduction reduces
    // every duplicate (integer-valued floats, so sums are exact in any order).
    c.push(
        case(
            "Scatter",
            vec![f(F32, &[3, 4]), i64s(&[1, 2], &[1, -1]), f(F32, &[1, 2])],
        )
        .opset(10)
        .attr("axis", int_attr(1)),
    );
    c.push(case(
        "ScatterElements",
        vec![f(F32, &[3, 4]), i64s(&[2, 1], &[2, -3]), f(F32, &[2, 1])],
    ));
    c.push(
        case(
            "ScatterElements",
            vec![
                f(F32, &[3, 5]),
                i64s(&[2, 3], &[4, 0, 4, -1, 2, 0]),
                f(F32, &[2, 3]),
            ],
        )
        .attr("axis", int_attr(1)),
    );
    c.push(
        case(
            "ScatterElements",
            vec![
                int(F32, &[4, 3], -9, 9),
                i64s(&[3, 2], &[1, 3, 1, -4, 0, 1]),
                int(F32, &[3, 2], -9, 9),
            ],
        )
        .opset(16)
        .attr("reduction", Attribute::String("add".into())),
    );
    c.push(
        case(
            "ScatterElements",
            vec![
                int(I32, &[2, 3, 4], -9, 9),
                i64s(&[2, 2, 1], &[3, 3, 0, -1]),
                int(I32, &[2, 2, 1], -9, 9),
            ],
        )
        .opset(18)
        .attr("axis", int_attr(2))
        .attr("reduction", Attribute::String("max".into())),
    );
    // ScatterND in gather form: the last of duplicate tuples wins; a reduction reduces them.
    c.push(case(
        "ScatterND",
        vec![
            f(F32, &[4, 3]),
            i64s(&[3, 1], &[1, -1, -3]),
            f(F32, &[3, 3]),
        ],
    ));
    c.push(
        case(
            "ScatterND",
            vec![
                f(F32, &[4, 3]),
                i64s(&[3, 2], &[1, 2, 0, 0, -3, -1]),
                f(F32, &[3]),
            ],
        )
        .attr("reduction", Attribute::String("max".into())),
    );
    c
}

/// Every operator of the shape and data-movement family; each must appear in
/// [`movement_cases`].
const MOVEMENT_OPS: &[&str] = &[
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "Expand",
    "Tile",
    "Pad",
    "DepthToSpace",
    "SpaceToDepth",
    "Trilu",
    "EyeLike",
    "OneHot",
    "Range",
    "ConstantOfShape",
    "Size",
    "ReverseSequence",
    "NonZero",
    "Compress",
    "Scatter",
    "ScatterElements",
    "ScatterND",
];

/// Every operator of the families under test; each must appear in [`cases`].
const OPS: &[&str] = &[
    "Neg",
    "Abs",
    "Sign",
    "Relu",
    "Sqrt",
    "Reciprocal",
    "Exp",
    "Log",
    "Erf",
    "Sigmoid",
    "Tanh",
    "Floor",
    "Ceil",
    "Round",
    "Softplus",
    "Softsign",
    "Mish",
    "HardSwish",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "ThresholdedRelu",
    "Gelu",
    "Shrink",
    "Not",
    "BitwiseNot",
    "IsNaN",
    "IsInf",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "Where",
    "Clip",
    "PRelu",
    "Sum",
    "Mean",
    "Max",
    "Min",
    "Cast",
    "CastLike",
    "Reshape",
    "Identity",
    "MatMul",
];

fn build(c: &Case) -> Box<dyn Operator> {
    let mut attrs = Attributes::new();
    for (n, a) in &c.attrs {
        attrs.insert(*n, a.clone());
    }
    // `domain::Op` names an operator outside the default domain.
    let (domain, op_type) = c.op.split_once("::").unwrap_or(("", c.op));
    let ctx = OpContext {
        domain,
        op_type,
        opset: c.opset,
        attrs: &attrs,
        num_inputs: c.inputs.len(),
        num_outputs: c.outputs,
    };
    Registry::global()
        .lookup(domain, op_type, c.opset)
        .unwrap_or_else(|| panic!("{} is registered at opset {}", c.op, c.opset))
        .build(&ctx)
        .unwrap_or_else(|e| panic!("{}: {e}", c.label()))
}

fn buffer(t: &Tensor) -> Buffer {
    let dt = t.dtype();
    if dt.is_float() {
        Buffer::from_f64(dt.to_ir(), &t.to_f64_vec())
    } else if dt == DType::Bool {
        let v: Vec<bool> = t.to_f64_vec().iter().map(|&x| x != 0.0).collect();
        Buffer::from_bool(&v)
    } else {
        Buffer::from_i64(dt.to_ir(), &t.to_i64_vec())
    }
}

fn const_shape(v: &hidet_ir::expr::Var) -> Vec<usize> {
    tensor_shape(v)
        .iter()
        .map(|d| d.as_int().expect("static shapes only") as usize)
        .collect()
}

/// Runs every node of `def` through the interpreter; returns each output's dtype, shape and
/// buffer.
fn run_def(
    def: &ComputeDef,
    inputs: &[Option<Tensor>],
) -> Result<Vec<(DataType, Vec<usize>, Buffer)>, String> {
    let mut buffers: Vec<Buffer> = inputs
        .iter()
        .map(|t| match t {
            Some(t) => buffer(t),
            None => Buffer::from_bool(&[false]),
        })
        .collect();
    for (i, (out, _)) in def.nodes.iter().enumerate() {
        let f = def.node_function(i, "node");
        verify_function(&f, Target::Cpu).map_err(|e| format!("node {i} does not verify: {e}"))?;
        let dtype = tensor_dtype(out).ok_or("node output is not a tensor")?;
        let mut args: Vec<Arg> = buffers.iter().cloned().map(Arg::Buffer).collect();
        args.push(Arg::Buffer(Buffer::zeros(dtype, numel(&const_shape(out)))));
        run_function(&f, &mut args).map_err(|e| format!("node {i} ({}): {e}", out.name()))?;
        match args.pop() {
            Some(Arg::Buffer(b)) => buffers.push(b),
            _ => return Err("the output argument is not a buffer".into()),
        }
    }
    def.outputs
        .iter()
        .map(|o| {
            let k = def
                .inputs
                .iter()
                .chain(def.nodes.iter().map(|(v, _)| v))
                .position(|v| v == o)
                .ok_or("an output is neither an input nor a node")?;
            let dtype = tensor_dtype(o).ok_or("output is not a tensor")?;
            Ok((dtype, const_shape(o), buffers[k].clone()))
        })
        .collect()
}

/// `(absolute, relative)` tolerance of a float dtype.
fn tolerance(d: DataType) -> (f64, f64) {
    match d {
        DataType::F64 => (1e-12, 1e-12),
        DataType::F32 => (1e-5, 1e-5),
        DataType::F16 => (2e-3, 2e-3),
        _ => (1e-2, 1e-2),
    }
}

/// Compares one output with `eval`'s; floats within [`tolerance`], or bit for bit (NaN
/// matching NaN) where `exact`.
fn compare(
    c: &Case,
    want: &Tensor,
    got: &(DataType, Vec<usize>, Buffer),
    exact: bool,
) -> Result<(), String> {
    let (dtype, shape, buf) = got;
    if *dtype != want.dtype().to_ir() || shape.as_slice() != want.shape() {
        return Err(format!(
            "{}: definition gives {dtype}{shape:?}, eval {}{:?}",
            c.label(),
            want.dtype(),
            want.shape()
        ));
    }
    if dtype.is_float() {
        let (atol, rtol) = c.tol.unwrap_or_else(|| tolerance(*dtype));
        for (k, (g, w)) in buf.to_f64().iter().zip(want.to_f64_vec()).enumerate() {
            let same = (g.is_nan() && w.is_nan())
                || g.to_bits() == w.to_bits()
                || (!exact && (g - w).abs() <= atol + rtol * w.abs());
            if !same {
                return Err(format!(
                    "{}: element {k}: definition {g}, eval {w}",
                    c.label()
                ));
            }
        }
    } else {
        let w: Vec<i64> = if want.dtype() == DType::Bool {
            want.to_f64_vec().iter().map(|&x| x as i64).collect()
        } else {
            want.to_i64_vec()
        };
        if buf.to_i64() != w {
            return Err(format!(
                "{}: definition {:?}, eval {w:?}",
                c.label(),
                buf.to_i64()
            ));
        }
    }
    Ok(())
}

fn check(c: &Case, rng: &mut Rng, exact: bool) -> Result<bool, String> {
    let op = build(c);
    let tensors: Vec<Option<Tensor>> = c.inputs.iter().map(|i| i.make(rng)).collect();
    let refs: Vec<Option<&Tensor>> = tensors.iter().map(Option::as_ref).collect();
    let want = op
        .eval(&refs)
        .map_err(|e| format!("{}: eval failed: {e}", c.label()))?;
    let cinputs: Vec<Option<ComputeInput<'_>>> = tensors
        .iter()
        .map(|t| {
            t.as_ref().map(|t| ComputeInput {
                dtype: t.dtype(),
                shape: t.shape(),
                value: Some(t),
            })
        })
        .collect();
    let def = op
        .compute(&cinputs)
        .map_err(|e| format!("{}: compute failed: {e}", c.label()))?;
    let def = match (def, c.no_def) {
        (Some(def), None) => def,
        (None, Some(_)) => return Ok(false),
        (Some(_), Some(why)) => {
            return Err(format!(
                "{}: has a definition, expected none ({why})",
                c.label()
            ))
        }
        (None, None) => return Err(format!("{}: no definition", c.label())),
    };
    // A definition may cover only the outputs the node declares (MaxPool without Indices).
    let covered_outputs = def.outputs.len() == want.len() || def.outputs.len() == c.outputs;
    if def.inputs.len() != c.inputs.len() || !covered_outputs {
        return Err(format!(
            "{}: definition has the wrong number of inputs or outputs",
            c.label()
        ));
    }
    let got = run_def(&def, &tensors).map_err(|e| format!("{}: {e}", c.label()))?;
    for (w, g) in want.iter().zip(&got) {
        compare(c, w, g, exact)?;
    }
    Ok(true)
}

#[test]
fn compute_definitions_agree_with_eval() {
    run_table(&cases(), 0x5eed_2024, false);
}

#[test]
fn reduction_definitions_agree_with_eval() {
    run_table(&reduction::reduction_cases(), 0x2ed0_2026, false);
}

#[test]
fn window_definitions_agree_with_eval() {
    run_table(&window::window_cases(), 0x3c0f_2027, false);
}

#[test]
fn resize_definitions_agree_with_eval() {
    run_table(&resize::resize_cases(), 0x7e51_2028, false);
}

#[test]
fn movement_definitions_agree_with_eval() {
    run_table(&movement_cases(), 0x6d0e_2025, true);
}

/// Checks every case of a table (floats bit for bit where `exact`); prints the coverage and
/// fails with every failing case.
fn run_table(cases: &[Case], seed: u64, exact: bool) {
    let mut rng = Rng(seed);
    let mut failures = Vec::new();
    let mut with_def = std::collections::BTreeSet::new();
    let mut without: Vec<String> = Vec::new();
    for c in cases {
        match check(c, &mut rng, exact) {
            Ok(true) => {
                with_def.insert(c.op);
            }
            Ok(false) => without.push(format!("{}: {}", c.label(), c.no_def.unwrap_or(""))),
            Err(e) => failures.push(e),
        }
    }
    println!(
        "{} cases; operators with compute definitions: {}",
        cases.len(),
        with_def.iter().copied().collect::<Vec<_>>().join(" ")
    );
    println!("cases without a definition:");
    for w in &without {
        println!("  {w}");
    }
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_operator_of_the_families_is_covered() {
    covered(&cases(), OPS);
    covered(&movement_cases(), MOVEMENT_OPS);
    covered(&reduction::reduction_cases(), reduction::REDUCTION_OPS);
    covered(&window::window_cases(), window::WINDOW_OPS);
    covered(&resize::resize_cases(), resize::RESIZE_OPS);
}

/// Every operator of `ops` has a case in `cases`, and no case is of another operator.
fn covered(cases: &[Case], ops: &[&str]) {
    let missing: Vec<&str> = ops
        .iter()
        .copied()
        .filter(|op| !cases.iter().any(|c| c.op == *op))
        .collect();
    assert!(missing.is_empty(), "operators without a case: {missing:?}");
    let unknown: Vec<&str> = cases
        .iter()
        .map(|c| c.op)
        .filter(|op| !ops.contains(op))
        .collect();
    assert!(
        unknown.is_empty(),
        "cases of operators outside the list: {unknown:?}"
    );
}

#[test]
fn reshape_without_a_known_target_has_no_definition() {
    let op = build(&case("Reshape", vec![]).opset(14));
    let x = [2usize, 6];
    let inputs = [
        Some(ComputeInput {
            dtype: F32,
            shape: &x,
            value: None,
        }),
        Some(ComputeInput {
            dtype: I64,
            shape: &[2],
            value: None,
        }),
    ];
    assert!(op.compute(&inputs).expect("valid inputs").is_none());
}

#[test]
fn invalid_inputs_are_errors_not_definitions() {
    let shape = [3usize];
    let other = [4usize];
    let inp = |dtype, shape| {
        Some(ComputeInput {
            dtype,
            shape,
            value: None,
        })
    };
    let add = build(&case("Add", vec![]));
    assert!(
        add.compute(&[inp(F32, &shape), inp(F32, &other)]).is_err(),
        "shapes do not broadcast"
    );
    assert!(
        add.compute(&[inp(F32, &shape), inp(I32, &shape)]).is_err(),
        "dtypes differ"
    );
    assert!(add.compute(&[inp(F32, &shape)]).is_err(), "missing input");
    assert!(build(&case("Exp", vec![]))
        .compute(&[inp(I32, &shape)])
        .is_err());
    assert!(build(&case("MatMul", vec![]))
        .compute(&[inp(F32, &[2, 3]), inp(F32, &[4, 2])])
        .is_err());
    assert!(build(&case("Where", vec![]))
        .compute(&[inp(I32, &shape), inp(F32, &shape), inp(F32, &shape)])
        .is_err());
    let clip = build(&case("Clip", vec![]).opset(13));
    assert!(
        clip.compute(&[inp(F32, &shape), inp(F32, &[2])]).is_err(),
        "bound of two elements"
    );
}

/// A compute input of `dtype` and `shape` whose value is unknown.
fn unknown<'a>(dtype: DType, shape: &'a [usize]) -> Option<ComputeInput<'a>> {
    Some(ComputeInput {
        dtype,
        shape,
        value: None,
    })
}

/// A compute input whose value is known.
fn known(t: &Tensor) -> Option<ComputeInput<'_>> {
    Some(ComputeInput {
        dtype: t.dtype(),
        shape: t.shape(),
        value: Some(t),
    })
}

#[test]
fn movement_ops_need_their_shape_like_inputs_but_not_their_data() {
    let x = [3usize, 4];
    let one = [1usize];
    let two = [2usize];
    let four = [4usize];
    let none_of = |c: Case, inputs: &[Option<ComputeInput<'_>>]| {
        let label = c.label();
        let def = build(&c)
            .compute(inputs)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(
            def.is_none(),
            "{label}: a definition from unknown parameters"
        );
    };
    let data = unknown(F32, &x);
    let ints = |shape| unknown(I64, shape);
    none_of(case("Squeeze", vec![]), &[data, ints(&one)]);
    none_of(case("Unsqueeze", vec![]), &[data, ints(&one)]);
    none_of(
        case("Split", vec![]).opset(13).outputs(2),
        &[data, ints(&two)],
    );
    none_of(
        case("Slice", vec![]),
        &[data, ints(&one), ints(&one), None, None],
    );
    none_of(case("Expand", vec![]), &[data, ints(&two)]);
    none_of(case("Tile", vec![]), &[data, ints(&two)]);
    none_of(case("Pad", vec![]), &[data, ints(&four)]);
    none_of(case("Trilu", vec![]), &[data, ints(&[])]);
    let scalar_i64 = unknown(I64, &[]);
    none_of(case("Range", vec![]), &[scalar_i64, scalar_i64, scalar_i64]);
    none_of(case("ConstantOfShape", vec![]), &[ints(&two)]);
    let values = unknown(F32, &two);
    none_of(case("OneHot", vec![]), &[ints(&x), ints(&[]), values]);

    let pads = Tensor::new(vec![4], vec![1i64, 0, 0, 2]).unwrap();
    none_of(
        case("Pad", vec![]).opset(18),
        &[data, known(&pads), None, ints(&one)],
    );

    // Indices are data: gathers have definitions without knowing them.
    let reverse = case("ReverseSequence", vec![])
        .attr("batch_axis", Attribute::Int(0))
        .attr("time_axis", Attribute::Int(1));
    for (c, indices) in [
        (case("Gather", vec![]), [2usize, 5].as_slice()),
        (case("GatherElements", vec![]), &[3, 4]),
        (case("GatherND", vec![]), &[5, 2]),
        (reverse, &[3]),
    ] {
        let op = c.op;
        let def = build(&c)
            .compute(&[data, ints(indices)])
            .unwrap_or_else(|e| panic!("{op}: {e}"));
        assert!(def.is_some(), "{op}: no definition without index values");
    }
}

#[test]
fn invalid_movement_inputs_are_errors_not_definitions() {
    let x = [3usize, 4];
    let err = |c: Case, inputs: &[Option<ComputeInput<'_>>], why: &str| {
        let label = c.label();
        assert!(
            build(&c).compute(inputs).is_err(),
            "{label}: no error for {why}"
        );
    };
    let data = unknown(F32, &x);
    err(
        case("Gather", vec![]),
        &[data, unknown(F32, &[2])],
        "float indices",
    );
    err(
        case("Gather", vec![]),
        &[unknown(F32, &[0, 4]), unknown(I64, &[2])],
        "indices into an empty axis",
    );
    err(
        case("GatherElements", vec![]),
        &[data, unknown(I64, &[3, 5])],
        "indices larger than the data outside the axis",
    );
    err(
        case("GatherND", vec![]).attr("batch_dims", Attribute::Int(1)),
        &[data, unknown(I64, &[2, 1])],
        "different batch dimensions",
    );
    err(
        case("Concat", vec![]).attr("axis", Attribute::Int(0)),
        &[data, unknown(I64, &x)],
        "mixed dtypes",
    );
    err(
        case("Concat", vec![]).attr("axis", Attribute::Int(0)),
        &[data, unknown(F32, &[3, 5])],
        "shapes that differ outside the axis",
    );
    err(
        case("Transpose", vec![]).attr("perm", Attribute::Ints(vec![0, 0])),
        &[data],
        "a perm that is not a permutation",
    );
    let sizes = Tensor::new(vec![2], vec![1i64, 1]).unwrap();
    err(
        case("Split", vec![]).opset(13).outputs(2),
        &[data, known(&sizes)],
        "sizes that do not add up",
    );
    let pads = Tensor::new(vec![4], vec![1i64, 0, 1, 0]).unwrap();
    err(
        case("Pad", vec![]).attr("mode", Attribute::String("edge".into())),
        &[unknown(F32, &[0, 4]), known(&pads)],
        "edge padding of an empty axis",
    );
    err(
        case("DepthToSpace", vec![]).attr("blocksize", Attribute::Int(2)),
        &[unknown(F32, &[1, 6, 2, 2])],
        "channels not divisible by blocksize²",
    );
    err(case("Trilu", vec![]), &[unknown(F32, &[5])], "rank below 2");
    err(
        case("EyeLike", vec![]),
        &[unknown(F32, &[2, 2, 2])],
        "rank other than 2",
    );
    let depth = Tensor::scalar(0i64);
    err(
        case("OneHot", vec![]),
        &[unknown(I64, &[3]), known(&depth), unknown(F32, &[2])],
        "a depth of 0",
    );
    err(
        case("ReverseSequence", vec![]),
        &[data, unknown(I64, &[3])],
        "lengths that do not match the batch",
    );
}
