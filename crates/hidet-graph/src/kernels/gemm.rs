//! The float64 matrix product of the reference kernels (`matrixmultiply`'s `dgemm`), split
//! over threads by rows.

/// Products smaller than this many multiply-adds run on one thread.
const PARALLEL_WORK: usize = 1 << 20;

/// How a matrix operand lies in its slice: element `(i, j)` at `i · rows + j · cols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strides {
    pub rows: usize,
    pub cols: usize,
}

impl Strides {
    /// A row-major matrix of `cols` columns.
    pub fn row_major(cols: usize) -> Strides {
        Strides {
            rows: cols,
            cols: 1,
        }
    }

    /// The transpose of a row-major matrix of `rows` rows (a column-major one).
    pub fn col_major(rows: usize) -> Strides {
        Strides {
            rows: 1,
            cols: rows,
        }
    }

    /// Whether every element of an `r × c` matrix lies inside a slice of `len` elements.
    fn fits(self, r: usize, c: usize, len: usize) -> bool {
        r == 0
            || c == 0
            || (r - 1)
                .checked_mul(self.rows)
                .zip((c - 1).checked_mul(self.cols))
                .and_then(|(x, y)| x.checked_add(y))
                .is_some_and(|last| last < len)
    }
}

/// `c[i, :] += Σ_p a[i, p] · b[p, :]` for row-major `a: [rows, k]`, `b: [k, n]` and
/// `c: [rows, n]` (`rows = c.len() / n`), split over the host's threads by rows.
///
/// Requires `a.len() >= rows · k` and `b.len() >= k · n`; panics otherwise (callers size the
/// slices from the same shapes).
pub fn gemm_rows(a: &[f64], b: &[f64], c: &mut [f64], k: usize, n: usize) {
    gemm(
        1.0,
        a,
        Strides::row_major(k),
        b,
        Strides::row_major(n),
        c,
        k,
        n,
    );
}

/// An element type `matrixmultiply` multiplies: `f64` (the reference) or `f32` (host steps,
/// summing in `f32` as compiled kernels do: see `Operator::eval_host`).
pub trait GemmElement: Copy + Send + Sync {
    /// `matrixmultiply`'s `sgemm`/`dgemm` with `beta = 1` and a row-major `c` of `n` columns.
    ///
    /// # Safety
    /// The `m × k` matrix at `a` and the `k × n` one at `b` (with their strides) and the
    /// `m × n` one at `c` must lie in live allocations, `c` written by no one else.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        sa: Strides,
        b: *const Self,
        sb: Strides,
        c: *mut Self,
    );
}

macro_rules! gemm_element {
    ($t:ty, $f:path) => {
        impl GemmElement for $t {
            unsafe fn gemm(
                m: usize,
                k: usize,
                n: usize,
                alpha: $t,
                a: *const $t,
                sa: Strides,
                b: *const $t,
                sb: Strides,
                c: *mut $t,
            ) {
                // SAFETY: the caller's contract is `matrixmultiply`'s.
                unsafe {
                    $f(
                        m,
                        k,
                        n,
                        alpha,
                        a,
                        sa.rows as isize,
                        sa.cols as isize,
                        b,
                        sb.rows as isize,
                        sb.cols as isize,
                        1.0,
                        c,
                        n as isize,
                        1,
                    )
                }
            }
        }
    };
}

gemm_element!(f64, matrixmultiply::dgemm);
gemm_element!(f32, matrixmultiply::sgemm);

/// `c[i, :] += alpha · Σ_p a[i, p] · b[p, :]` for `a: [rows, k]` and `b: [k, n]` laid out as
/// `sa` and `sb`, row-major `c: [rows, n]` (`rows = c.len() / n`), split over the host's
/// threads by rows. Panics when an operand's last element lies beyond its slice.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: GemmElement>(
    alpha: T,
    a: &[T],
    sa: Strides,
    b: &[T],
    sb: Strides,
    c: &mut [T],
    k: usize,
    n: usize,
) {
    by_rows(a, sa, b, sb, c, k, n, |m, a, b, c| {
        // SAFETY: `by_rows` checked that every element of the `m × k` matrix at `a` and of
        // the `k × n` one at `b` lies inside its slice with these strides, and passes `c`
        // with `m · n` elements (row-major); `c` is borrowed mutably, so nothing else reads
        // or writes it.
        unsafe {
            T::gemm(
                m,
                k,
                n,
                alpha,
                a.as_ptr(),
                sa,
                b.as_ptr(),
                sb,
                c.as_mut_ptr(),
            )
        }
    });
}

/// Runs `product(m, a_rows, b, c_rows)` on row blocks of `c` (on one thread for a small
/// product, else one block per host thread), `a_rows` starting at the block's first row of
/// `a`. Panics unless every element of `a` (`rows × k` as `sa`) and `b` (`k × n` as `sb`)
/// lies inside its slice.
#[allow(clippy::too_many_arguments)]
fn by_rows<T: Send + Sync>(
    a: &[T],
    sa: Strides,
    b: &[T],
    sb: Strides,
    c: &mut [T],
    k: usize,
    n: usize,
    product: impl Fn(usize, &[T], &[T], &mut [T]) + Sync,
) {
    if n == 0 || k == 0 {
        return;
    }
    let rows = c.len() / n;
    assert!(
        sa.fits(rows, k, a.len()) && sb.fits(k, n, b.len()),
        "gemm: operands smaller than their shapes"
    );
    if rows == 0 {
        return;
    }
    let work = rows.saturating_mul(k).saturating_mul(n);
    let threads = if work < PARALLEL_WORK {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(rows)
    };
    let per = rows.div_ceil(threads.max(1)).max(1);
    let run = |c_rows: &mut [T], row0: usize| {
        let m = c_rows.len() / n;
        product(m, &a[row0 * sa.rows..], b, c_rows);
    };
    if threads <= 1 {
        run(&mut c[..rows * n], 0);
        return;
    }
    std::thread::scope(|s| {
        for (i, chunk) in c[..rows * n].chunks_mut(per * n).enumerate() {
            let run = &run;
            s.spawn(move || run(chunk, i * per));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the plain triple loop, on a product large enough to be split over threads,
    /// with a non-zero `c` (accumulated into), in `f64` and in `f32` with a transposed `b`.
    #[test]
    fn matches_the_triple_loop() {
        let (rows, k, n) = (67, 131, 129);
        let a: Vec<f64> = (0..rows * k).map(|i| ((i * 7 % 13) as f64) - 6.5).collect();
        let b: Vec<f64> = (0..k * n)
            .map(|i| ((i * 5 % 11) as f64) * 0.25 - 1.0)
            .collect();
        let c0: Vec<f64> = (0..rows * n).map(|i| (i % 3) as f64 + 0.5).collect();
        let mut c = c0.clone();
        gemm_rows(&a, &b, &mut c, k, n);
        let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let mut c32 = f(&c0);
        // `b` handed over transposed (column-major), `a` as it is.
        let bt: Vec<f64> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let (sa, sb) = (Strides::row_major(k), Strides::col_major(k));
        gemm(1.0f32, &f(&a), sa, &f(&bt), sb, &mut c32, k, n);
        for i in 0..rows {
            for j in 0..n {
                let want: f64 =
                    c0[i * n + j] + (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum::<f64>();
                let got = c[i * n + j];
                assert!((got - want).abs() <= 1e-9 * (1.0 + want.abs()), "{i},{j}");
                let got32 = c32[i * n + j] as f64;
                assert!(
                    (got32 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "f32 {i},{j}"
                );
            }
        }
    }
}
