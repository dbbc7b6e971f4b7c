#!/usr/bin/env python3
"""Runs a CTranslate2 model made by xfm_to_ctranslate2.py the way xf-run and xf-bench run xf.

Translate stdin to stdout, one line each, in order (like xf-run):

    ct2_run.py --model CT2_DIR [--ids] [--beam 4] [--max-batch 32] [--threads 2] < in > out

Benchmark (xf-bench's procedure and JSON keys, those that apply; no allocation counts):

    ct2_run.py --model CT2_DIR --bench --input FILE [--beam 4 --max-batch 32 --threads 2]
               [--ids] [--repeat R] [--json]

  tokens/s     target tokens of the best hypotheses (EOS excluded) per second
  latency      p50 and p90 of the per-request wall time (one translate_batch call), in ms
               (--max-batch 1 only: larger batches are one call, see below)
  peak RSS     of the whole Python process

Batches (--max-batch above 1): CTranslate2 gets the whole input in ONE translate_batch call
with max_batch_size=--max-batch, so that it cuts the batches itself after sorting by length
(as xf-run and xf-bench sort theirs). Cutting requests of --max-batch lines in input order, as
this script did before, made CTranslate2 pad more and cost it up to 30% (issue 40).

Decoding follows xf's defaults: no minimum output length (CTranslate2's default is 1), length
penalty 0.6 (CTranslate2 divides the log-prob by length^penalty, xf by ((5+length)/6)^penalty,
so beam outputs may differ while greedy outputs must not), and a longest output of (source
tokens + EOS) + 50 tokens, EOS included. CTranslate2 takes one max_decoding_length per call:
the one call gets the limit of the input's longest sentence, and each output is cut to its own
sentence's limit (greedy outputs do not depend on the limit; a beam hypothesis could, only where
it runs past its own limit without EOS).

Text mode tokenizes with the SentencePiece model saved beside the CTranslate2 model
(sentencepiece.model); --ids reads and writes space-separated token ids (the vocabulary order is
xf's id order). One CTranslate2 worker (inter_threads 1) with --threads intra-op threads.
"""
import argparse
import json
import logging
import os
import resource
import sys
import time


def load_vocabulary(model_dir, side):
    """side: "source" or "target"; a shared vocabulary serves both."""
    for name in ("shared_vocabulary.json", side + "_vocabulary.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    raise SystemExit("ct2_run: no vocabulary JSON in %s" % model_dir)


class Ct2Runner:
    def __init__(self, args):
        import ctranslate2

        self.args = args
        if args.bench:  # CTranslate2 logs the ISA and GEMM backends it picked at INFO level
            ctranslate2.set_log_level(logging.INFO)
        self.translator = ctranslate2.Translator(
            args.model, device="cpu", compute_type="default", inter_threads=1,
            intra_threads=args.threads)
        if args.bench:
            ctranslate2.set_log_level(logging.WARNING)
        self.version = ctranslate2.__version__
        self.compute_type = self.translator.compute_type
        self.tokens = load_vocabulary(args.model, "source")
        self.target_tokens = load_vocabulary(args.model, "target")
        self.token_ids = {t: i for i, t in enumerate(self.target_tokens)}
        self.sp = self.target_sp = None
        if not args.ids:
            import sentencepiece as spm
            path = os.path.join(args.model, "sentencepiece.model")
            if not os.path.exists(path):
                raise SystemExit("ct2_run: %s missing (model without a tokenizer: use --ids)" % path)
            self.sp = spm.SentencePieceProcessor(model_file=path)
            # A pruned target vocabulary (xf-convert --target-vocabulary-from) has its own model.
            target = os.path.join(args.model, "sentencepiece.target.model")
            self.target_sp = (spm.SentencePieceProcessor(model_file=target)
                              if os.path.exists(target) else self.sp)

    def encode(self, line):
        """Source tokens (strings) without EOS; CTranslate2 appends it (add_source_eos)."""
        if self.sp is not None:
            return [self.tokens[i] for i in self.sp.encode(line)]
        try:
            ids = [int(x) for x in line.split()]
        except ValueError:
            ids = [-1]
        if any(i < 0 or i >= len(self.tokens) for i in ids):
            raise SystemExit("ct2_run: not a line of token ids within the vocabulary: %r" % line)
        return [self.tokens[i] for i in ids]

    def decode(self, tokens):
        ids = [self.token_ids[t] for t in tokens]
        if self.target_sp is not None:
            return self.target_sp.decode(ids)
        return " ".join(str(i) for i in ids)

    def translate_request(self, request):
        """One CTranslate2 call for a request of up to --max-batch token lists; returns the best
        hypothesis of each (EOS excluded). The call's max_decoding_length is the limit of the
        request's longest sentence: (tokens + EOS) + max_len_b."""
        a = self.args
        longest = max(len(s) for s in request) + 1
        results = self.translator.translate_batch(
            request, max_batch_size=a.max_batch, beam_size=a.beam, num_hypotheses=1,
            length_penalty=a.length_penalty, max_decoding_length=longest + a.max_len_b,
            min_decoding_length=0,  # CTranslate2's default 1 forbids EOS first; xf allows it
            return_scores=False)
        return [r.hypotheses[0] for r in results]

    def requests(self, sources):
        """Batch 1: one request a sentence, in input order, as xf-bench makes them. Larger
        batches: the whole input as one request; CTranslate2 sorts and cuts it (max_batch_size)."""
        if self.args.max_batch <= 1:
            return [[s] for s in sources]
        return [sources]


def read_lines(stream):
    return [line.rstrip("\n") for line in stream]


def run_translate(runner):
    lines = read_lines(sys.stdin)
    sources = [runner.encode(line) for line in lines]
    for request in runner.requests(sources):
        for source, tokens in zip(request, runner.translate_request(request)):
            # Another sentence of the request may have allowed a longer output than this one's
            # own limit; greedy tokens do not depend on the limit, so cutting at it gives xf's.
            tokens = tokens[:len(source) + 1 + runner.args.max_len_b]
            sys.stdout.write(runner.decode(tokens) + "\n")


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def run_bench(runner):
    """xf-bench's procedure: tokenize first (untimed), requests of --max-batch lines in file
    order (batch 1; above, the whole input as one request), one warm-up request (at most
    --max-batch sentences), then every request --repeat times, each timed alone."""
    a = runner.args
    with open(a.input, encoding="utf-8") as f:
        lines = read_lines(f)
    if not lines:
        raise SystemExit("ct2_run: %s has no lines" % a.input)
    requests = runner.requests([runner.encode(line) for line in lines])
    runner.translate_request(requests[0][:max(1, a.max_batch)])

    latencies = []  # seconds per request (batch 1); one call for the whole input above
    tokens = sentences = 0
    start = time.perf_counter()
    for _ in range(a.repeat):
        for request in requests:
            t0 = time.perf_counter()
            outputs = runner.translate_request(request)
            latencies.append(time.perf_counter() - t0)
            # Everything CTranslate2 generated counts, also past a sentence's own length limit.
            tokens += sum(len(o) for o in outputs)
            sentences += len(request)
    seconds = time.perf_counter() - start
    figures = {
        "engine": "ctranslate2 " + runner.version,
        "tokens_per_s": tokens / seconds,
        "sentences_per_s": sentences / seconds,
        "latency_p50_ms": 1000.0 * percentile(latencies, 0.5) if a.max_batch <= 1 else None,
        "latency_p90_ms": 1000.0 * percentile(latencies, 0.9) if a.max_batch <= 1 else None,
        # The whole Python process: interpreter, numpy, sentencepiece and CTranslate2 included.
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "sentences": sentences,
        "tokens": tokens,
        "seconds": seconds,
        "beam": a.beam,
        "batch": a.max_batch,
        "threads": a.threads,
        "compute_type": runner.compute_type,
        # CTranslate2's backend switches, when set (see its docs: environment variables).
        "ct2_env": {k: v for k, v in os.environ.items() if k.startswith("CT2_")},
    }
    if a.json:
        print(json.dumps(figures, sort_keys=True))
    else:
        for key in sorted(figures):
            print("%-16s %s" % (key, figures[key]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="CTranslate2 model directory")
    p.add_argument("--ids", action="store_true", help="space-separated token ids in and out")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument("--max-len-b", type=int, default=50)
    p.add_argument("--bench", action="store_true")
    p.add_argument("--input", help="sentences for --bench")
    p.add_argument("--repeat", type=int, default=1, help="--bench: passes over the input")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.bench and not args.input:
        raise SystemExit("ct2_run: --bench needs --input FILE")

    runner = Ct2Runner(args)
    if args.bench:
        run_bench(runner)
    else:
        run_translate(runner)


if __name__ == "__main__":
    main()
