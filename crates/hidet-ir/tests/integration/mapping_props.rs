//! Property tests of the task-mapping algebra, of its lowering and of the
//! simplifier (DESIGN §5).
//!
//! (a) every task of a random composition is assigned exactly once;
//! (b) composition is associative;
//! (c) the lowered, simplified code, run by the interpreter, visits exactly
//!     `tasks_of(w)` in order for every worker, including workers `>= n` and
//!     negative ones;
//! (d) the simplifier preserves the value of random integer expressions over
//!     variables with known (partly negative) ranges.

use hidet_ir::expr::{floor_div, floor_mod};
use hidet_ir::interp::{run_cuda_block, run_function, Arg, Buffer};
use hidet_ir::mapping::repeat_with;
use hidet_ir::passes::{lower_function, FunctionPass, Simplify};
use hidet_ir::prelude::*;
use proptest::collection::vec;
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Atom {
    spatial: bool,
    shape: Vec<i64>,
    ranks: Vec<usize>,
    unroll: Vec<bool>,
}

fn atom() -> impl Strategy<Value = Atom> {
    (1usize..=3).prop_flat_map(|rank| {
        (
            any::<bool>(),
            vec(1i64..=3, rank),
            Just((0..rank).collect::<Vec<usize>>()).prop_shuffle(),
            vec(any::<bool>(), rank),
        )
            .prop_map(|(spatial, shape, ranks, unroll)| Atom {
                spatial,
                shape,
                ranks,
                unroll,
            })
    })
}

fn build_atom(a: &Atom) -> TaskMapping {
    let mapping = if a.spatial {
        spatial_ranked(a.shape.clone(), a.ranks.clone())
    } else {
        let attrs = a
            .unroll
            .iter()
            .map(|&u| {
                if u {
                    LoopKind::Unroll(None)
                } else {
                    LoopKind::Serial
                }
            })
            .collect();
        repeat_with(a.shape.clone(), a.ranks.clone(), attrs)
    };
    mapping.expect("generated shapes are positive and ranks are permutations")
}

fn build(atoms: &[Atom]) -> TaskMapping {
    atoms
        .iter()
        .map(build_atom)
        .reduce(|a, b| a * b)
        .expect("at least one atom is generated")
}

fn total_tasks(m: &TaskMapping) -> i64 {
    m.task_shape().iter().product()
}

fn ravel(task: &[i64], shape: &[i64]) -> Option<usize> {
    let mut linear = 0i64;
    for (&t, &d) in task.iter().zip(shape) {
        if t < 0 || t >= d {
            return None;
        }
        linear = linear * d + t;
    }
    usize::try_from(linear).ok()
}

/// How the lowered mapping's worker is produced.
#[derive(Clone, Debug)]
enum Worker {
    /// `threadIdx.x` of a block of `n + extra` threads.
    Thread { extra: i64 },
    /// `t - offset` for a CPU loop `for t in 0..n + extra + offset`.
    Loop { extra: i64, offset: i64 },
}

fn worker() -> impl Strategy<Value = Worker> {
    prop_oneof![
        (0i64..3).prop_map(|extra| Worker::Thread { extra }),
        (0i64..3, 0i64..3).prop_map(|(extra, offset)| Worker::Loop { extra, offset }),
    ]
}

/// A kernel that records, for each row `t` (worker `t - offset`), the tasks
/// it visits in order: `visits[t, k, :]` is the k-th task, `counts[t]` how
/// many there were. Returns the function and the number of rows.
fn recorder(m: &TaskMapping, worker: &Worker) -> (Function, i64, i64) {
    let n = m.num_workers();
    let per = m.tasks_per_worker();
    let rank = m.rank() as i64;
    let (rows, offset) = match worker {
        Worker::Thread { extra } => (n + extra, 0),
        Worker::Loop { extra, offset } => (n + extra + offset, *offset),
    };
    let mut fb = match worker {
        Worker::Thread { .. } => FunctionBuilder::cuda_kernel("rec", [1, 1, 1], [rows, 1, 1]),
        Worker::Loop { .. } => FunctionBuilder::cpu_kernel("rec"),
    };
    let visits = fb.tensor_param("visits", DataType::I32, [rows, per, rank]);
    let counts = fb.tensor_param("counts", DataType::I32, [rows]);
    let body = |fb: &mut FunctionBuilder, row: Expr, w: Expr| {
        let c = fb.var("c", Expr::int(0));
        fb.for_each(m.on(w), |fb, idx| {
            for (d, i) in idx.iter().enumerate() {
                fb.store(
                    &visits,
                    [row.clone(), c.expr(), Expr::int(d as i64)],
                    i.clone(),
                );
            }
            fb.assign(&c, &c + 1);
        });
        fb.store(&counts, [row], c.expr());
    };
    match worker {
        Worker::Thread { .. } => {
            let tid = Expr::thread_idx(Dim::X);
            body(&mut fb, tid.clone(), tid);
        }
        Worker::Loop { .. } => fb.for_range("t", rows, |fb, t| {
            let w = if offset == 0 { t.clone() } else { &t - offset };
            body(fb, t, w);
        }),
    }
    (fb.finish(), rows, offset)
}

fn run_recorder(f: &Function, rows: i64, per: i64, rank: i64) -> (Vec<i64>, Vec<i64>) {
    let mut args = vec![
        Arg::Buffer(Buffer::from_i64(
            DataType::I32,
            &vec![-1; (rows * per * rank) as usize],
        )),
        Arg::Buffer(Buffer::from_i64(DataType::I32, &vec![-1; rows as usize])),
    ];
    if f.is_cuda() {
        run_cuda_block(f, [0, 0, 0], &mut args).expect("recorder kernel runs");
    } else {
        run_function(f, &mut args).expect("recorder kernel runs");
    }
    let take = |a: &Arg| match a {
        Arg::Buffer(b) => b.to_i64(),
        Arg::Scalar(_) => Vec::new(),
    };
    (take(&args[0]), take(&args[1]))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_task_is_assigned_exactly_once(atoms in vec(atom(), 1..=3)) {
        let m = build(&atoms);
        let shape = m.task_shape();
        let mut seen = vec![0u32; total_tasks(&m) as usize];
        for w in 0..m.num_workers() {
            let tasks = m.tasks_of(w);
            prop_assert_eq!(tasks.len() as i64, m.tasks_per_worker());
            for t in tasks {
                let i = ravel(&t, &shape);
                prop_assert!(i.is_some(), "task {:?} outside {:?}", t, shape);
                if let Some(i) = i {
                    seen[i] += 1;
                }
            }
        }
        prop_assert!(seen.iter().all(|&c| c == 1), "{}: {:?}", m, seen);
        prop_assert!(m.tasks_of(-1).is_empty() && m.tasks_of(m.num_workers()).is_empty());
    }

    #[test]
    fn composition_is_associative(a in atom(), b in atom(), c in atom()) {
        let (a, b, c) = (build_atom(&a), build_atom(&b), build_atom(&c));
        let left = (&a * &b) * c.clone();
        let right = a * (b * c);
        prop_assert_eq!(left.num_workers(), right.num_workers());
        prop_assert_eq!(left.task_shape(), right.task_shape());
        for w in -1..=left.num_workers() {
            prop_assert_eq!(left.tasks_of(w), right.tasks_of(w), "worker {}", w);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn lowered_code_visits_exactly_the_enumerated_tasks(
        atoms in vec(atom(), 1..=3),
        worker in worker(),
    ) {
        let m = build(&atoms);
        prop_assume!(total_tasks(&m) <= 1500 && m.num_workers() <= 1000);
        let (f, rows, offset) = recorder(&m, &worker);
        let lowered = lower_function(f).expect("lowering succeeds");
        let mut no_mapping = true;
        lowered.body.visit(&mut |s| no_mapping &= !matches!(s, Stmt::ForMapping { .. }));
        prop_assert!(no_mapping);

        let (per, rank) = (m.tasks_per_worker(), m.rank() as i64);
        let (visits, counts) = run_recorder(&lowered, rows, per, rank);
        for row in 0..rows {
            let expected = m.tasks_of(row - offset);
            prop_assert_eq!(counts[row as usize], expected.len() as i64, "row {} of {}", row, lowered);
            for (k, task) in expected.iter().enumerate() {
                let at = ((row * per + k as i64) * rank) as usize;
                prop_assert_eq!(&visits[at..at + rank as usize], task.as_slice(), "row {} task {}", row, k);
            }
        }
    }
}

/// A random integer expression over `x` in `[-8, 8]`, `y` in `[0, 16)` and
/// `z` in `[0, 6)`.
#[derive(Clone, Debug)]
enum Int {
    X,
    Y,
    Z,
    Const(i64),
    Add(Box<Int>, Box<Int>),
    Sub(Box<Int>, Box<Int>),
    Mul(Box<Int>, Box<Int>),
    Div(Box<Int>, i64),
    Mod(Box<Int>, i64),
    Min(Box<Int>, Box<Int>),
    Max(Box<Int>, Box<Int>),
    /// `(a * c + b) / c`
    SplitDiv(Box<Int>, Box<Int>, i64),
    /// `(a * c + b) % c`
    SplitMod(Box<Int>, Box<Int>, i64),
    /// `(a / c) * c + a % c`
    Recombine(Box<Int>, i64),
}

fn divisor() -> impl Strategy<Value = i64> {
    prop::sample::select(vec![1i64, 2, 3, 4, 5, 7, 8, 16, 32, -1, -2, -3, -4, -8])
}

fn int_expr() -> impl Strategy<Value = Int> {
    let leaf = prop_oneof![
        Just(Int::X),
        Just(Int::Y),
        Just(Int::Z),
        (-9i64..=9).prop_map(Int::Const),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        let b = |e: Int| Box::new(e);
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(move |(p, q)| Int::Add(b(p), b(q))),
            (inner.clone(), inner.clone()).prop_map(move |(p, q)| Int::Sub(b(p), b(q))),
            (inner.clone(), inner.clone()).prop_map(move |(p, q)| Int::Mul(b(p), b(q))),
            (inner.clone(), divisor()).prop_map(move |(p, c)| Int::Div(b(p), c)),
            (inner.clone(), divisor()).prop_map(move |(p, c)| Int::Mod(b(p), c)),
            (inner.clone(), inner.clone()).prop_map(move |(p, q)| Int::Min(b(p), b(q))),
            (inner.clone(), inner.clone()).prop_map(move |(p, q)| Int::Max(b(p), b(q))),
            (inner.clone(), inner.clone(), divisor()).prop_map(move |(p, q, c)| Int::SplitDiv(
                b(p),
                b(q),
                c
            )),
            (inner.clone(), inner.clone(), divisor()).prop_map(move |(p, q, c)| Int::SplitMod(
                b(p),
                b(q),
                c
            )),
            (inner, divisor()).prop_map(move |(p, c)| Int::Recombine(b(p), c)),
        ]
    })
}

fn to_expr(e: &Int, x: &Expr, y: &Expr, z: &Expr) -> Expr {
    let r = |e: &Int| to_expr(e, x, y, z);
    match e {
        Int::X => x.clone(),
        Int::Y => y.clone(),
        Int::Z => z.clone(),
        Int::Const(c) => Expr::int(*c),
        Int::Add(p, q) => r(p) + r(q),
        Int::Sub(p, q) => r(p) - r(q),
        Int::Mul(p, q) => r(p) * r(q),
        Int::Div(p, c) => r(p) / *c,
        Int::Mod(p, c) => r(p) % *c,
        Int::Min(p, q) => r(p).min(r(q)),
        Int::Max(p, q) => r(p).max(r(q)),
        Int::SplitDiv(p, q, c) => (r(p) * *c + r(q)) / *c,
        Int::SplitMod(p, q, c) => (r(p) * *c + r(q)) % *c,
        Int::Recombine(p, c) => (r(p) / *c) * *c + r(p) % *c,
    }
}

/// The value with floor semantics; `None` when an intermediate leaves `i32`.
fn eval(e: &Int, x: i64, y: i64, z: i64) -> Option<i64> {
    let r = |e: &Int| eval(e, x, y, z);
    let v = match e {
        Int::X => x,
        Int::Y => y,
        Int::Z => z,
        Int::Const(c) => *c,
        Int::Add(p, q) => r(p)? + r(q)?,
        Int::Sub(p, q) => r(p)? - r(q)?,
        Int::Mul(p, q) => r(p)?.checked_mul(r(q)?)?,
        Int::Div(p, c) => floor_div(r(p)?, *c),
        Int::Mod(p, c) => floor_mod(r(p)?, *c),
        Int::Min(p, q) => r(p)?.min(r(q)?),
        Int::Max(p, q) => r(p)?.max(r(q)?),
        Int::SplitDiv(p, q, c) => {
            let scaled = i32::try_from(r(p)?.checked_mul(*c)?).ok()?;
            floor_div(i64::from(scaled) + r(q)?, *c)
        }
        Int::SplitMod(p, q, c) => {
            let scaled = i32::try_from(r(p)?.checked_mul(*c)?).ok()?;
            floor_mod(i64::from(scaled) + r(q)?, *c)
        }
        Int::Recombine(p, c) => {
            let a = r(p)?;
            let scaled = i32::try_from(floor_div(a, *c) * c).ok()?;
            i64::from(scaled) + floor_mod(a, *c)
        }
    };
    i32::try_from(v).ok().map(i64::from)
}

fn size(e: &Expr) -> usize {
    let mut n = 0;
    e.visit(&mut |_| n += 1);
    n
}

/// `out[(a * 16 + y) * 6 + z] = e` with `x = a - 8` bound by a `Let`.
fn expression_kernel(e: &Int) -> (Function, Expr) {
    let mut fb = FunctionBuilder::cpu_kernel("expr");
    let out = fb.tensor_param("out", DataType::I32, [17i64 * 16 * 6]);
    let mut stored = Expr::int(0);
    fb.for_range("a", 17, |fb, a| {
        fb.let_in("x", &a - 8, |fb, x| {
            fb.for_range("y", 16, |fb, y| {
                fb.for_range("z", 6, |fb, z| {
                    stored = to_expr(e, &x, &y, &z);
                    fb.store(&out, [(&a * 16 + &y) * 6 + &z], stored.clone());
                });
            });
        });
    });
    (fb.finish(), stored)
}

fn stored_value(s: &Stmt) -> Option<Expr> {
    let mut found = None;
    s.visit(&mut |s| {
        if let Stmt::Store { value, .. } = s {
            found = Some(value.clone());
        }
    });
    found
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn simplifier_preserves_values(e in int_expr()) {
        let mut expected = Vec::new();
        for a in 0..17i64 {
            for y in 0..16 {
                for z in 0..6 {
                    expected.push(eval(&e, a - 8, y, z));
                }
            }
        }
        prop_assume!(expected.iter().all(Option::is_some));
        let expected: Vec<i64> = expected.into_iter().flatten().collect();

        let (f, original) = expression_kernel(&e);
        let simplified = Simplify.run(f.clone()).expect("simplification succeeds");
        let run = |f: &Function| {
            let mut args = vec![Arg::Buffer(Buffer::zeros(DataType::I32, expected.len()))];
            run_function(f, &mut args).map(|_| match &args[0] {
                Arg::Buffer(b) => b.to_i64(),
                Arg::Scalar(_) => Vec::new(),
            })
        };
        prop_assert_eq!(run(&f).expect("original runs"), expected.clone());
        let after = stored_value(&simplified.body);
        let out = run(&simplified);
        prop_assert!(out.is_ok(), "{:?}: {} -> {:?}", out, original, after);
        prop_assert_eq!(out.unwrap_or_default(), expected, "{} -> {:?}", original, after);
        if let Some(after) = after {
            prop_assert!(size(&after) <= size(&original), "{} grew into {}", original, after);
        }
    }
}
