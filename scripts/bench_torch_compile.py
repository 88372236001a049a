#!/usr/bin/env python3
"""torch.compile with the hidet_rs backend beside torch.compile's default backend (Inductor)
and eager PyTorch, on the CPU, side by side in one process.

Models: torchvision ResNet-50 and a BERT-base encoder from a transformers config (random
weights, nothing downloaded), batch 1, in inference mode. Every variant runs on the same
thread count (`--threads`, default 2: torch.set_num_threads and the hidet kernels). Each is
compiled and warmed up first (compile times are reported), then the variants run in
interleaved rounds of `--runs` calls each; per variant the median over all calls is
reported, with the ratio of medians to Inductor's, and per-round paired ratios (their
median) to show the spread. Outputs are checked against eager PyTorch.

Run it in an environment with torch, torchvision, transformers and the hidet_rs package, for
example the one scripts/test_torch_backend.sh makes:

    .venv-torch/bin/python scripts/bench_torch_compile.py --markdown
"""

import argparse
import statistics
import time

import torch

import hidet_rs.dynamo


def resnet50():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()
    return model, (torch.randn(1, 3, 224, 224),)


def bert_base():
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig()  # BERT-base: 12 layers, hidden 768, 12 heads
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    return model, (ids, mask)


MODELS = {"resnet50": resnet50, "bert_base": bert_base}


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    raise TypeError(f"no tensor in {type(out)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="repeatable")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10, help="calls per variant per round")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.model or list(MODELS):
        model, inputs = MODELS[name]()
        variants = {
            "eager": model,
            "inductor": torch.compile(model),
            "hidet_rs": torch.compile(model, backend=hidet_rs.dynamo.backend(threads=args.threads)),
        }
        with torch.inference_mode():
            want = first_tensor(model(*inputs))
            compile_s = {}
            for label, fn in variants.items():
                start = time.perf_counter()
                got = first_tensor(fn(*inputs))
                compile_s[label] = time.perf_counter() - start
                err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
                print(f"{name} {label}: first call {compile_s[label]:.1f} s, max rel err {err:.2e}")
                for _ in range(2):
                    fn(*inputs)
            times = {label: [] for label in variants}
            paired = {label: [] for label in variants}
            for _ in range(args.rounds):
                medians = {}
                for label, fn in variants.items():
                    ts = []
                    for _ in range(args.runs):
                        start = time.perf_counter()
                        fn(*inputs)
                        ts.append(time.perf_counter() - start)
                    times[label].extend(ts)
                    medians[label] = statistics.median(ts)
                for label in variants:
                    paired[label].append(medians[label] / medians["inductor"])
        median_ms = {label: 1e3 * statistics.median(ts) for label, ts in times.items()}
        for label in variants:
            rows.append(
                (
                    name,
                    label,
                    median_ms[label],
                    median_ms[label] / median_ms["inductor"],
                    statistics.median(paired[label]),
                    compile_s[label],
                )
            )
            print(
                f"{name} {label}: median {median_ms[label]:.2f} ms, "
                f"{median_ms[label] / median_ms['inductor']:.2f}x Inductor"
            )
    if args.markdown:
        print()
        print("| model | variant | median ms | / Inductor | paired / Inductor | first call s |")
        print("|---|---|---|---|---|---|")
        for name, label, ms, ratio, paired_ratio, first in rows:
            print(f"| {name} | {label} | {ms:.2f} | {ratio:.2f} | {paired_ratio:.2f} | {first:.1f} |")


if __name__ == "__main__":
    main()
