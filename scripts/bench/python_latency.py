#!/usr/bin/env python3
"""Latency of xf.Translator.translate_batch from Python against xf-bench's, same model, same
sentences, same settings (one sentence a request, greedy by default), on the same machine.

    python scripts/bench/python_latency.py --model models/enfr.xfm --input sources.txt \
        --xf-bench build/bin/xf-bench [--beam 1] [--threads 1] [--rounds 4]

The two alternate, one pass over the file each per round (so a busy machine slows both alike);
prints the median over rounds of each one's p50 and p90 per-request latency (ms) and the ratios
Python / xf-bench. The Python figure includes tokenization, detokenization and building the
result objects; xf-bench times translate_ids on ids tokenized beforehand.
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
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()

    with open(args.input, encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f]
    translator = xf.Translator(args.model, max_batch=1, max_beam=args.beam, threads=args.threads)
    translator.translate_batch(sentences[:1], beam_size=args.beam)  # warm-up, as xf-bench does
    native, python = {"p50": [], "p90": []}, {"p50": [], "p90": []}
    for _ in range(args.rounds):
        bench = subprocess.run([args.xf_bench, "--model", args.model, "--input", args.input, "--batch", "1",
                                "--beam", str(args.beam), "--threads", str(args.threads), "--json"],
                               capture_output=True, text=True, check=True)
        figures = json.loads(bench.stdout)
        native["p50"].append(figures["latency_p50_ms"])
        native["p90"].append(figures["latency_p90_ms"])
        latencies = []
        for sentence in sentences:
            start = time.perf_counter()
            translator.translate_batch([sentence], beam_size=args.beam)
            latencies.append((time.perf_counter() - start) * 1000.0)
        python["p50"].append(percentile(latencies, 0.5))
        python["p90"].append(percentile(latencies, 0.9))
    result = {"sentences": len(sentences), "beam": args.beam, "threads": args.threads, "rounds": args.rounds}
    for q in ("p50", "p90"):
        result[f"xf_bench_{q}_ms"] = round(statistics.median(native[q]), 3)
        result[f"python_{q}_ms"] = round(statistics.median(python[q]), 3)
        result[f"ratio_{q}"] = round(result[f"python_{q}_ms"] / result[f"xf_bench_{q}_ms"], 4)
        result[f"ratio_{q}_per_round"] = [round(p / n, 4) for p, n in zip(python[q], native[q])]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
