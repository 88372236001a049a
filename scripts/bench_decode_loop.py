"""A greedy generation loop through a decoder exported with dynamic axes, in hidet and ONNX
Runtime side by side: ONNX Runtime generates the steps (the new token, its position, the
key/value cache so far; greedy), then each engine runs them alone, and hidet's outputs are
checked against ONNX Runtime's at every step. The cache grows by one position per step, so every step is a new set of
input shapes for hidet: the loop measures what a new shape costs (compiling it, or taking it
from the kernel cache) beside the run itself.

  .venv-models/bin/python scripts/export_probe_models.py models/probe decode_dyn
  .venv/bin/python scripts/bench_decode_loop.py models/probe/kv_decoder_dyn.onnx --steps 32

The model's inputs are `ids` [batch, 1] (int64), `position_ids` [batch, 1] (int64),
`past_keys` and `past_values` [layers, batch, kv heads, past, head dim]; its outputs the logits
and the grown keys and values (`export_probe_models.py decode_dyn`). The loop runs twice over
the same cache lengths: the second pass finds every shape compiled. `--fresh-cache` gives hidet
an empty kernel cache (what a first run on a machine costs).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=32, help="generated tokens per pass (default 32)")
    ap.add_argument("--past", type=int, default=16, help="cache length at the first step (default 16)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fresh-cache", action="store_true", help="hidet compiles into an empty kernel cache")
    ap.add_argument("--tolerance", type=float, default=1e-3, help="largest logits difference, relative to their largest magnitude")
    args = ap.parse_args()
    if args.fresh_cache:
        os.environ["HIDET_CACHE_DIR"] = tempfile.mkdtemp(prefix="hidet-decode-cache-")
    import hidet_rs
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    model = hidet_rs.compile(args.model, threads=args.threads)
    load_s = time.perf_counter() - start
    shape = next(i.shape for i in sess.get_inputs() if i.name == "past_keys")
    layers, kv_heads, head_dim = shape[0], shape[2], shape[4]
    if not all(isinstance(d, int) for d in (layers, kv_heads, head_dim)):
        print(f"past_keys must have fixed layers, heads and head size, has {shape}", file=sys.stderr)
        return 2

    rng = np.random.default_rng(0)
    cache = (layers, args.batch, kv_heads, args.past, head_dim)
    keys0 = rng.standard_normal(cache).astype(np.float32)
    values0 = rng.standard_normal(cache).astype(np.float32)
    ids0 = rng.integers(0, 10, (args.batch, 1)).astype(np.int64)

    # ONNX Runtime's trajectory first (greedy: the next token is its argmax), then each engine
    # alone over the same steps: ONNX Runtime's threads spin on after a run and would slow
    # an engine run between its runs.
    steps, want = [], []
    keys, values, ids = keys0, values0, ids0
    for step in range(args.steps):
        feeds = {"ids": ids, "position_ids": np.full((args.batch, 1), args.past + step, np.int64),
                 "past_keys": keys, "past_values": values}
        out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        steps.append(feeds)
        want.append(out)
        keys, values = out["keys"], out["values"]
        ids = out["logits"][:, -1:].argmax(-1).astype(np.int64)

    def timed(run) -> tuple:
        time.sleep(0.5)
        ms, worst = [], 0.0
        for feeds, expected in zip(steps, want):
            t = time.perf_counter()
            got = run(feeds)
            ms.append((time.perf_counter() - t) * 1e3)
            for name, w in expected.items():
                scale = max(float(np.abs(w).max()), 1e-30)
                worst = max(worst, float(np.abs(got[name] - w).max()) / scale)
        return (ms[0], statistics.median(ms[1:] if len(ms) > 1 else ms), sum(ms)), worst

    def rss_mib() -> float:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:
            return float("nan")

    names = [o.name for o in sess.get_outputs()]
    run_ort = lambda feeds: dict(zip(names, sess.run(None, feeds)))
    rows = []
    rss_before = rss_mib()
    for label in ["first (new shapes)", "again (shapes compiled)"]:
        h, worst = timed(model.run_dict)
        if not rows:
            grown = (rss_mib() - rss_before) / args.steps
        o, _ = timed(run_ort)
        rows.append({"pass": label, "worst": worst, "hidet": h, "onnxruntime": o})

    print(f"{args.model}: batch {args.batch}, cache {args.past} -> {args.past + args.steps}, "
          f"{args.steps} steps, {args.threads} threads; hidet.compile {load_s:.2f} s"
          f"{', empty kernel cache' if args.fresh_cache else ''}; "
          f"memory grew {grown:.1f} MiB per new shape")
    print("| pass | hidet first ms | hidet median ms | hidet total s | ORT first ms | ORT median ms | ORT total s | hidet/ORT total | max rel diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for r in rows:
        h, o = r["hidet"], r["onnxruntime"]
        print(f"| {r['pass']} | {h[0]:.1f} | {h[1]:.2f} | {h[2] / 1e3:.2f} | {o[0]:.1f} | {o[1]:.2f} | "
              f"{o[2] / 1e3:.2f} | {h[2] / o[2]:.2f} | {r['worst']:.1e} |")
        ok &= r["worst"] <= args.tolerance
    if not ok:
        print(f"logits differ by more than {args.tolerance}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
