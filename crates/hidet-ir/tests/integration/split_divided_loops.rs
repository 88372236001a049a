//! Index-set splitting of vectorized loops that divide their variable: the
//! split loop computes what the original computes (interpreter), for row
//! offsets of either sign and loop lengths shorter and longer than a row, and
//! no division of a vectorized loop's variable is left where a read gathered.

use hidet_ir::interp::{run_function, Arg, Buffer, Scalar};
use hidet_ir::passes::lower_function;
use hidet_ir::passes::split_divided_loops::MIN_ROW;
use hidet_ir::prelude::*;

const PANELS: i64 = 5;

/// `out[p*n + j] = image[(base + p*n + j) / row + 1, (base + p*n + j) % row + width - row]`
/// for `p < PANELS` and `j < n` vectorized: an im2col-like read of a `[64, width]`
/// image. Its flat offset divides `j` (a gather) when `width > row`, and is
/// contiguous when `width == row`.
fn kernel(n: i64, row: i64, width: i64) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("pack");
    let base = fb.param("base", DataType::I32);
    let image = fb.tensor_param("image", DataType::I32, [64i64, width]);
    let out = fb.tensor_param("out", DataType::I32, [PANELS * n]);
    let base = base.expr();
    fb.for_range("p", PANELS, |fb, p| {
        fb.for_range_with("j", n, LoopKind::Vectorize, |fb, j| {
            let pixel = &base + &p * n + &j;
            let value = image.at([&pixel / row + 1, &pixel % row + (width - row)]);
            fb.store(&out, [&p * n + &j], value);
        });
    });
    fb.finish()
}

fn run(f: &Function, base: i64, n: i64, width: i64) -> Vec<i64> {
    let image: Vec<i64> = (0..64 * width).map(|i| i * 7 + 3).collect();
    run_on(f, base, &image, n)
}

/// Runs a pack kernel of `PANELS` panels of `n` over `image` from `base`; returns its output.
fn run_on(f: &Function, base: i64, image: &[i64], n: i64) -> Vec<i64> {
    let args = vec![
        Arg::Scalar(Scalar::Int(base)),
        Arg::Buffer(Buffer::from_i64(DataType::I32, image)),
        Arg::Buffer(Buffer::from_i64(
            DataType::I32,
            &vec![-1; (PANELS * n) as usize],
        )),
    ];
    last_buffer(f, args)
}

/// Runs `f` on `args` and returns its last argument, a buffer, as integers.
fn last_buffer(f: &Function, mut args: Vec<Arg>) -> Vec<i64> {
    run_function(f, &mut args).expect("kernel runs");
    match args.last() {
        Some(Arg::Buffer(b)) => b.to_i64(),
        _ => unreachable!("the last argument is a buffer"),
    }
}

fn expected(base: i64, n: i64, row: i64, width: i64) -> Vec<i64> {
    (0..PANELS * n)
        .map(|i| {
            let pixel = base + i;
            let (r, c) = (
                pixel.div_euclid(row) + 1,
                pixel.rem_euclid(row) + (width - row),
            );
            (r * width + c) * 7 + 3
        })
        .collect()
}

/// Whether some vectorized loop's body still divides that loop's variable.
fn divides_vector_lane(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |s| {
        if let Stmt::For {
            var,
            kind: LoopKind::Vectorize,
            body,
            ..
        } = s
        {
            body.visit(&mut |inner| {
                for e in inner.exprs() {
                    e.visit(&mut |x| {
                        if let ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, num, _) = x.kind() {
                            num.visit(&mut |y| found |= y.as_var() == Some(var));
                        }
                    });
                }
            });
        }
    });
    found
}

fn segment_loops(s: &Stmt) -> usize {
    let mut n = 0;
    s.visit(&mut |s| {
        if let Stmt::For { var, .. } = s {
            n += usize::from(var.name().ends_with("_seg"));
        }
    });
    n
}

#[test]
fn a_gathering_loop_is_cut_at_rows_and_computes_the_same() {
    for (n, row) in [(32, 21), (9, 21), (32, 147), (48, 17), (16, 16)] {
        let width = row + 2;
        let original = kernel(n, row, width);
        let lowered = lower_function(original.clone()).unwrap();
        assert_eq!(
            segment_loops(&lowered.body),
            1,
            "n={n} row={row}:\n{lowered}"
        );
        assert!(
            !divides_vector_lane(&lowered.body),
            "n={n} row={row}:\n{lowered}"
        );
        for base in [0, 5, row - 1, row, 3 * row + 2, -7] {
            let want = expected(base, n, row, width);
            assert_eq!(
                run(&original, base, n, width),
                want,
                "original n={n} row={row} base={base}"
            );
            assert_eq!(
                run(&lowered, base, n, width),
                want,
                "split n={n} row={row} base={base}"
            );
        }
    }
}

#[test]
fn contiguous_reads_and_short_rows_are_left_whole() {
    let contiguous = lower_function(kernel(32, 21, 21)).unwrap();
    assert_eq!(segment_loops(&contiguous.body), 0, "{contiguous}");
    let short = lower_function(kernel(32, MIN_ROW - 1, MIN_ROW + 1)).unwrap();
    assert_eq!(segment_loops(&short.body), 0, "{short}");
    assert_eq!(
        run(&short, 4, 32, MIN_ROW + 1),
        expected(4, 32, MIN_ROW - 1, MIN_ROW + 1)
    );
}

/// `out[p*n + j] = planes[x / (h·w), (x / w) % h, x % w + 1]` with `x = base + p*n + j`: an
/// im2col read over several images (batch folded into the pixels). The divisions by the
/// plane and of the row index are divisions of the same row, so the loop is cut at rows once.
#[test]
fn planes_and_row_indices_are_cut_at_rows_too() {
    let (h, w, images) = (5i64, 19i64, 3i64);
    for n in [16i64, 40, 7] {
        let mut fb = FunctionBuilder::cpu_kernel("planes");
        let base = fb.param("base", DataType::I32);
        let planes = fb.tensor_param("planes", DataType::I32, [images, h, w + 2]);
        let out = fb.tensor_param("out", DataType::I32, [PANELS * n]);
        let base = base.expr();
        fb.for_range("p", PANELS, |fb, p| {
            fb.for_range_with("j", n, LoopKind::Vectorize, |fb, j| {
                let x = &base + &p * n + &j;
                let value = planes.at([&x / (h * w), (&x / w) % h, &x % w + 1]);
                fb.store(&out, [&p * n + &j], value);
            });
        });
        let original = fb.finish();
        let lowered = lower_function(original.clone()).unwrap();
        assert_eq!(segment_loops(&lowered.body), 1, "n={n}:\n{lowered}");
        assert!(!divides_vector_lane(&lowered.body), "n={n}:\n{lowered}");
        let data: Vec<i64> = (0..images * h * (w + 2)).map(|i| i * 5 - 11).collect();
        // Bases whose reads all fall inside the images.
        let bases = [0, 3, w - 1, h * w - 2, 2 * h * w + 1];
        for base_value in bases
            .into_iter()
            .filter(|b| b + PANELS * n <= images * h * w)
        {
            let go = |f: &Function| {
                let args = vec![
                    Arg::Scalar(Scalar::Int(base_value)),
                    Arg::Buffer(Buffer::from_i64(DataType::I32, &data)),
                    Arg::Buffer(Buffer::from_i64(
                        DataType::I32,
                        &vec![-1; (PANELS * n) as usize],
                    )),
                ];
                last_buffer(f, args)
            };
            let want: Vec<i64> = (0..PANELS * n)
                .map(|i| {
                    let x = base_value + i;
                    let (img, r, c) = (x / (h * w), (x / w) % h, x % w + 1);
                    data[((img * h + r) * (w + 2) + c) as usize]
                })
                .collect();
            assert_eq!(go(&original), want, "original n={n} base={base_value}");
            assert_eq!(go(&lowered), want, "split n={n} base={base_value}");
        }
    }
}

/// A stride-2 read (`image[x / w, 2·(x % w)]`, a strided convolution's pack) stays strided
/// within a row, so the loop is left whole (the gather is the better code); it still
/// computes the same.
#[test]
fn strided_reads_are_left_whole() {
    let (n, w) = (32i64, 20i64);
    let mut fb = FunctionBuilder::cpu_kernel("strided");
    let image = fb.tensor_param("image", DataType::I32, [64i64, 2 * w]);
    let out = fb.tensor_param("out", DataType::I32, [PANELS * n]);
    fb.for_range("p", PANELS, |fb, p| {
        fb.for_range_with("j", n, LoopKind::Vectorize, |fb, j| {
            let x = &p * n + &j;
            let value = image.at([&x / w, (&x % w) * 2]);
            fb.store(&out, [&p * n + &j], value);
        });
    });
    let original = fb.finish();
    let lowered = lower_function(original.clone()).unwrap();
    assert_eq!(segment_loops(&lowered.body), 0, "{lowered}");
    let data: Vec<i64> = (0..64 * 2 * w).map(|i| i * 3 + 1).collect();
    let go = |f: &Function| {
        let args = vec![
            Arg::Buffer(Buffer::from_i64(DataType::I32, &data)),
            Arg::Buffer(Buffer::from_i64(
                DataType::I32,
                &vec![-1; (PANELS * n) as usize],
            )),
        ];
        last_buffer(f, args)
    };
    let want: Vec<i64> = (0..PANELS * n)
        .map(|x| data[((x / w) * 2 * w + (x % w) * 2) as usize])
        .collect();
    assert_eq!(go(&lowered), want);
}

/// The extents of the vectorized loops in `s`, as written (constants or expressions).
fn vector_extents(s: &Stmt) -> Vec<Expr> {
    let mut out = Vec::new();
    s.visit(&mut |s| {
        if let Stmt::For {
            extent,
            kind: LoopKind::Vectorize,
            ..
        } = s
        {
            out.push(extent.clone());
        }
    });
    out
}

#[test]
fn a_loop_inside_one_row_keeps_its_constant_extent() {
    // Eight pixels of 111-pixel rows (a column-stored register tile of a convolution at
    // batch > 1): the split keeps a branch whose vector loop is the original 8-wide one.
    let (n, row) = (8, 111);
    let width = row + 2;
    let original = kernel(n, row, width);
    let lowered = lower_function(original.clone()).unwrap();
    assert_eq!(segment_loops(&lowered.body), 1, "{lowered}");
    assert!(!divides_vector_lane(&lowered.body), "{lowered}");
    let extents = vector_extents(&lowered.body);
    assert!(extents.iter().any(|e| e.as_int() == Some(n)), "{lowered}");
    for base in [
        0,
        50,
        row - n,
        row - n + 1,
        row - 1,
        2 * row + 100,
        -3,
        -n - 1,
    ] {
        let want = expected(base, n, row, width);
        assert_eq!(run(&lowered, base, n, width), want, "base={base}");
    }
}

/// `out[p*n + j] = x[(c / 49), 1, (c % 49) / 7, c % 7]` with `c = base + p*n + j`, `j`
/// vectorized: the columns of a product over `[8, 3, 7, 7]` images folded into its columns
/// (each image's 49 pixels contiguous). The indices divide `c` by 7, the flat offset only by
/// 49: the loop is cut at images, and within one every flat offset is affine in the lane.
fn folded_images(n: i64) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("pack_folded");
    let base = fb.param("base", DataType::I32);
    let x = fb.tensor_param("x", DataType::I32, [8i64, 3, 7, 7]);
    let out = fb.tensor_param("out", DataType::I32, [PANELS * n]);
    let base = base.expr();
    fb.for_range("p", PANELS, |fb, p| {
        fb.for_range_with("j", n, LoopKind::Vectorize, |fb, j| {
            let c = &base + &p * n + &j;
            let value = x.at([&c / 49, Expr::int(1), (&c % 49) / 7, &c % 7]);
            fb.store(&out, [&p * n + &j], value);
        });
    });
    fb.finish()
}

/// Whether some read in a vectorized loop has a flat offset (as the codegen simplifies it)
/// that divides the loop's variable.
fn flat_offsets_divide_the_lane(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |s| {
        let Stmt::For {
            var,
            kind: LoopKind::Vectorize,
            body,
            ..
        } = s
        else {
            return;
        };
        body.visit(&mut |inner| {
            for e in inner.exprs() {
                e.visit(&mut |x| {
                    let ExprKind::TensorElement { tensor, indices } = x.kind() else {
                        return;
                    };
                    let Some(t) = tensor.ty().as_tensor() else {
                        return;
                    };
                    let offset = hidet_ir::passes::simplify_expr(
                        &t.layout.offset(indices),
                        &hidet_ir::passes::VarRanges::new(),
                    );
                    offset.visit(&mut |y| {
                        if let ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, num, _) = y.kind() {
                            num.visit(&mut |z| found |= z.as_var() == Some(var));
                        }
                    });
                });
            }
        });
    });
    found
}

#[test]
fn images_folded_into_columns_are_cut_at_images_not_at_their_rows() {
    let image: Vec<i64> = (0..8 * 3 * 49).map(|i| i * 5 + 1).collect();
    for n in [16, 8, 64] {
        let original = folded_images(n);
        let lowered = lower_function(original.clone()).unwrap();
        assert_eq!(segment_loops(&lowered.body), 1, "n={n}:\n{lowered}");
        assert!(
            !flat_offsets_divide_the_lane(&lowered.body),
            "n={n}: a read still gathers:\n{lowered}"
        );
        for base in [0, 3, 40, 48, 49, 70] {
            let want: Vec<i64> = (0..PANELS * n)
                .map(|i| {
                    let c = base + i;
                    image[((c / 49 * 3 + 1) * 49 + c % 49) as usize]
                })
                .collect();
            for (f, what) in [(&original, "original"), (&lowered, "split")] {
                assert_eq!(run_on(f, base, &image, n), want, "{what} n={n} base={base}");
            }
        }
    }
}
