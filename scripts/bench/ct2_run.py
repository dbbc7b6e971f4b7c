#!/usr/bin/env python3
"""Runs a CTranslate2 model made by xfm_to_ctranslate2.py the way xf-run and xf-bench run xf.

Translate stdin to stdout, one line each, in order (like xf-run):

    ct2_run.py --model CT2_DIR [--ids] [--beam 4] [--max-batch 32] [--threads 2] < in > out

Benchmark (like xf-bench; JSON keys as `xf-bench --json`, those that apply):

    ct2_run.py --model CT2_DIR --bench --input FILE [--beam 4 --max-batch 32 --threads 2]
               [--ids] [--repeat R] [--min-seconds S] [--json]

Decoding follows xf's defaults: length penalty 0.6 (note: CTranslate2 divides the log-prob by
length^penalty, xf by ((5+length)/6)^penalty, so beam outputs may differ while greedy outputs
must not), and the longest output is (source tokens + EOS) + 50 tokens, EOS included. CTranslate2
takes one max_decoding_length per call, so sentences are sorted by length and split into batches
of --max-batch here, as xf does, and each call gets the limit of its longest sentence.

Text mode tokenizes with the SentencePiece model saved beside the CTranslate2 model
(sentencepiece.model); --ids reads and writes space-separated token ids (the vocabulary order is
xf's id order).
"""
import argparse
import json
import os
import resource
import sys
import time


def load_vocabulary(model_dir):
    for name in ("shared_vocabulary.json", "target_vocabulary.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    raise SystemExit("ct2_run: no vocabulary JSON in %s" % model_dir)


class Ct2Runner:
    def __init__(self, args):
        import ctranslate2

        self.args = args
        self.translator = ctranslate2.Translator(
            args.model, device="cpu", compute_type="default", inter_threads=1,
            intra_threads=args.threads)
        self.tokens = load_vocabulary(args.model)
        self.token_ids = {t: i for i, t in enumerate(self.tokens)}
        self.sp = None
        if not args.ids:
            import sentencepiece as spm
            path = os.path.join(args.model, "sentencepiece.model")
            if not os.path.exists(path):
                raise SystemExit("ct2_run: %s missing (model without a tokenizer: use --ids)" % path)
            self.sp = spm.SentencePieceProcessor(model_file=path)

    def encode(self, line):
        """Source tokens (strings) without EOS; CTranslate2 appends it (add_source_eos)."""
        if self.sp is not None:
            return [self.tokens[i] for i in self.sp.encode(line)]
        try:
            return [self.tokens[int(x)] for x in line.split()]
        except (ValueError, IndexError):
            raise SystemExit("ct2_run: bad id line %r" % line)

    def decode(self, tokens):
        ids = [self.token_ids[t] for t in tokens]
        if self.sp is not None:
            return self.sp.decode(ids)
        return " ".join(str(i) for i in ids)

    def translate_batches(self, sources, on_batch=None, count_all=False):
        """sources: token lists. Returns output token lists in input order. on_batch(seconds,
        batch_size) is called after each CTranslate2 call. count_all: return what CTranslate2
        generated, not cut at each sentence's own length limit (the benchmark counts it all)."""
        a = self.args
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        outputs = [None] * len(sources)
        for start in range(0, len(order), a.max_batch):
            chunk = order[start:start + a.max_batch]
            batch = [sources[i] for i in chunk]
            longest = max(len(s) for s in batch) + 1  # + EOS
            t0 = time.perf_counter()
            results = self.translator.translate_batch(
                batch, max_batch_size=a.max_batch, beam_size=a.beam, num_hypotheses=1,
                length_penalty=a.length_penalty, max_decoding_length=longest + a.max_len_b,
                return_scores=False)
            if on_batch is not None:
                on_batch(time.perf_counter() - t0, len(chunk))
            for i, r in zip(chunk, results):
                # A shorter sentence of the batch may have run past its own limit; its first
                # tokens do not depend on the limit, so cut it there (greedy: exactly xf's rule).
                limit = len(sources[i]) + 1 + a.max_len_b
                outputs[i] = r.hypotheses[0] if count_all else r.hypotheses[0][:limit]
        return outputs


def read_lines(stream):
    return [line.rstrip("\n") for line in stream]


def run_translate(runner):
    lines = read_lines(sys.stdin)
    sources = [runner.encode(line) for line in lines]
    for tokens in runner.translate_batches(sources):
        sys.stdout.write(runner.decode(tokens) + "\n")


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def run_bench(runner):
    a = runner.args
    with open(a.input, encoding="utf-8") as f:
        lines = read_lines(f)
    if not lines:
        raise SystemExit("ct2_run: %s has no lines" % a.input)
    # Warm-up: one pass over the first batch (CTranslate2 allocates its caches lazily).
    runner.translate_batches([runner.encode(line) for line in lines[:a.max_batch]])

    latencies = []  # seconds per CTranslate2 call (one batch)
    output_tokens = sentences = passes = 0
    start = time.perf_counter()
    while True:
        # Tokenization and detokenization are inside the timed pass, as in a translation service.
        sources = [runner.encode(line) for line in lines]
        outputs = runner.translate_batches(sources, lambda s, n: latencies.append(s), count_all=True)
        for tokens in outputs:
            runner.decode(tokens)
            output_tokens += len(tokens)
        sentences += len(lines)
        passes += 1
        elapsed = time.perf_counter() - start
        if passes >= a.repeat and elapsed >= a.min_seconds:
            break
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    figures = {
        "engine": "ctranslate2",
        "model": a.model,
        "input": a.input,
        "sentences": sentences,
        "passes": passes,
        "beam": a.beam,
        "max_batch": a.max_batch,
        "threads": a.threads,
        "seconds": elapsed,
        "output_tokens": output_tokens,
        "tokens_per_s": output_tokens / elapsed,
        "sentences_per_s": sentences / elapsed,
        "latency_p50_ms": 1000.0 * percentile(latencies, 0.5),
        "latency_p90_ms": 1000.0 * percentile(latencies, 0.9),
        "peak_rss_mb": peak_rss_mb,
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
    p.add_argument("--repeat", type=int, default=1, help="--bench: passes over the input, at least")
    p.add_argument("--min-seconds", type=float, default=0.0, help="--bench: run at least this long")
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
