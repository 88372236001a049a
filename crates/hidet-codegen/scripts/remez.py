"""Minimax coefficients for the f32 math helpers of the C dialect (c_math.rs).

Linear Remez exchange in float64 for
    minimize over c:  max_{x in [lo, hi]} | w(x) * (f(x) - sum_k c_k * x**p_k) |
on a dense grid. Coefficients are then rounded to float32 one at a time, from
the lowest power up, refitting the remaining ones after each rounding so that
the rounded set stays close to minimax. Prints each fit's coefficients (as C
hex-float literals) and its weighted error. Needs only numpy:

    .venv/bin/python crates/hidet-codegen/scripts/remez.py
"""

import math

import numpy as np


def _solve_levelled(xs, f, w, powers, fixed):
    """Coefficients c (free powers) and level e with w(x)(f - P)(x) = (-1)^i e."""
    n = len(powers)
    a = np.zeros((n + 1, n + 1))
    b = np.zeros(n + 1)
    for i, x in enumerate(xs):
        for k, p in enumerate(powers):
            a[i, k] = x**p
        a[i, n] = (-1) ** i / w(x)
        b[i] = f(x) - sum(c * x**p for p, c in fixed)
    sol = np.linalg.solve(a, b)
    return sol[:n], sol[n]


def remez(f, w, lo, hi, powers, fixed=(), grid=20001, iters=60):
    """Remez exchange; returns (coefficients for `powers`, max weighted error)."""
    powers = list(powers)
    n = len(powers) + 1
    # Chebyshev-like start points.
    k = np.arange(n)
    xs = lo + (hi - lo) * (1 - np.cos(np.pi * k / (n - 1))) / 2
    g = np.linspace(lo, hi, grid)
    fg = np.array([f(x) for x in g])
    wg = np.array([w(x) for x in g])
    fixed_part = np.zeros_like(g)
    for p, c in fixed:
        fixed_part += c * g**p
    best = None
    for _ in range(iters):
        c, _level = _solve_levelled(xs, f, w, powers, fixed)
        err = wg * (fg - fixed_part - sum(ck * g**p for p, ck in zip(powers, c)))
        # Extrema of alternating sign: one per sign run.
        sign = np.sign(err)
        sign[sign == 0] = 1
        runs = np.split(np.arange(grid), np.where(np.diff(sign) != 0)[0] + 1)
        ext = [r[np.argmax(np.abs(err[r]))] for r in runs]
        while len(ext) > n:
            # Drop the smaller end, or merge the smallest neighbour pair.
            if abs(err[ext[0]]) < abs(err[ext[-1]]):
                ext.pop(0)
            else:
                ext.pop()
        m = np.max(np.abs(err))
        if best is None or m < best[1]:
            best = (c, m)
        if len(ext) < n:
            break
        new = g[ext]
        if np.allclose(new, xs, rtol=0, atol=(hi - lo) / grid / 2):
            break
        xs = new
    return best


def rounded(f, w, lo, hi, powers, fixed=()):
    """Remez, then round coefficients to f32 from the lowest power up."""
    powers = list(powers)
    fixed = list(fixed)
    while powers:
        c, _ = remez(f, w, lo, hi, powers, fixed)
        fixed.append((powers[0], float(np.float32(c[0]))))
        powers = powers[1:]
    g = np.linspace(lo, hi, 200001)
    err = max(
        abs(w(x) * (f(x) - sum(c * x**p for p, c in fixed))) for x in g[::10]
    )
    return fixed, err


def show(name, fit):
    coeffs, err = fit
    print(f"{name}: max weighted error {err:.3e}")
    for p, c in coeffs:
        mant, exp = float(np.float32(c)).hex().split("p")
        mant = mant.rstrip("0").rstrip(".")
        print(f"    x^{p}: {mant}p{exp}f  /* {c:.9e} */")


LN2 = math.log(2.0)


def main():
    # exp(r) = 1 + r + r^2 * Q(r), |r| <= ln2/2 (+ slack for the reduction).
    h = LN2 / 2 * 1.0001

    def exp_q(r):
        if abs(r) < 1e-4:
            return 0.5 + r / 6 + r * r / 24 + r**3 / 120
        return (math.expm1(r) - r) / (r * r)

    show(
        "exp Q(r), r in [-ln2/2, ln2/2], relative error of exp",
        rounded(exp_q, lambda r: r * r / math.exp(r), -h, h, range(0, 5)),
    )

    # log1p(f) = f - s*(f - T(z)), s = f/(2+f), z = s^2, T(z) = 2 atanh(s)/s - 2.
    s_max = (math.sqrt(2) - 1) / (math.sqrt(2) + 1) * 1.0001

    def log_t(z):
        if z < 1e-8:
            return 2 * z / 3 + 2 * z * z / 5
        s = math.sqrt(z)
        return 2 * math.atanh(s) / s - 2

    show(
        "log T(z), z = s^2 in [0, s_max^2], absolute error of T",
        rounded(log_t, lambda z: 1.0, 0.0, s_max * s_max, range(1, 4)),
    )

    # tanh(a) = a + a*z*Q(z), z = a^2, a in [0, TANH_SPLIT].
    split = 0.5625

    def tanh_q(z):
        if z < 1e-6:
            return -1 / 3 + 2 * z / 15 - 17 * z * z / 315
        a = math.sqrt(z)
        return (math.tanh(a) / a - 1) / z

    def tanh_w(z):
        if z < 1e-6:
            return z
        a = math.sqrt(z)
        return a * z / math.tanh(a)

    show(
        f"tanh Q(z), z in [0, {split}^2], relative error of tanh",
        rounded(tanh_q, tanh_w, 1e-7, split * split, range(0, 5)),
    )

    # erf(a) = a + a * R(z), z = a^2, a in [0, ERF_SPLIT].
    erf_split = 1.0

    def erf_r(z):
        if z < 1e-12:
            return 2 / math.sqrt(math.pi) * (1 - z / 3) - 1
        a = math.sqrt(z)
        return math.erf(a) / a - 1

    def erf_w(z):
        if z < 1e-12:
            return 1.0
        a = math.sqrt(z)
        return a / math.erf(a)

    show(
        f"erf R(z), z in [0, {erf_split}^2], relative error of erf",
        rounded(erf_r, erf_w, 0.0, erf_split * erf_split, range(0, 7)),
    )

    # erf(a) = 1 - exp(G(t)), t = a - ERF_SPLIT, a in [ERF_SPLIT, ERF_ONE]:
    # G approximates log(erfc(a)); the weight erfc(a) makes the error absolute
    # in erf. Expanding at the left end keeps the f32 evaluation of G free of
    # cancellation where erfc, and so the error it carries into erf, is largest.
    erf_one = 3.9375
    center = erf_split
    show(
        f"erf G(t), a in [{erf_split}, {erf_one}], t = a - {center}, absolute error of erf",
        rounded(
            lambda t: math.log(math.erfc(t + center)),
            lambda t: math.erfc(t + center),
            erf_split - center,
            erf_one - center,
            range(0, 8),
        ),
    )


if __name__ == "__main__":
    main()
