#!/usr/bin/env python3
"""Latency of xf.Translator.translate_batch from Python against xf-bench's, same model, same
sentences, same settings (one sentence a request, greedy by default), on the same machine.

    python scripts/bench/python_latency.py --model models/enfr.xfm --input sources.txt \
        --xf-bench build/bin/xf-bench [--beam 1] [--threads 1] [--repeat 3]

Prints both p50/p90 per-request latencies (ms) and the ratio Python / xf-bench. The Python
figure includes tokenization, detokenization and building the result objects; xf-bench times
translate_ids on ids tokenized beforehand.
"""
import argparse
import json
import statistics
import subprocess
import time

import xf


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--xf-bench", required=True, help="path of the xf-bench executable")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    bench = subprocess.run([args.xf_bench, "--model", args.model, "--input", args.input, "--batch", "1",
                            "--beam", str(args.beam), "--threads", str(args.threads),
                            "--repeat", str(args.repeat), "--json"],
                           capture_output=True, text=True, check=True)
    native = json.loads(bench.stdout)

    with open(args.input, encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f]
    translator = xf.Translator(args.model, max_batch=1, max_beam=args.beam, threads=args.threads)
    translator.translate_batch(sentences[:1], beam_size=args.beam)  # warm-up, as xf-bench does
    latencies = []
    for _ in range(args.repeat):
        for sentence in sentences:
            start = time.perf_counter()
            translator.translate_batch([sentence], beam_size=args.beam)
            latencies.append((time.perf_counter() - start) * 1000.0)
    python_p50, python_p90 = percentile(latencies, 0.5), percentile(latencies, 0.9)
    print(json.dumps({
        "sentences": len(sentences), "beam": args.beam, "threads": args.threads,
        "xf_bench_p50_ms": native["latency_p50_ms"], "xf_bench_p90_ms": native["latency_p90_ms"],
        "python_p50_ms": round(python_p50, 3), "python_p90_ms": round(python_p90, 3),
        "python_mean_ms": round(statistics.mean(latencies), 3),
        "ratio_p50": round(python_p50 / native["latency_p50_ms"], 4),
        "ratio_p90": round(python_p90 / native["latency_p90_ms"], 4),
    }))


if __name__ == "__main__":
    main()
