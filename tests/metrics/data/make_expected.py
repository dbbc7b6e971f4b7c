#!/usr/bin/env python3
"""Computes the expected figures of tests/metrics with sacreBLEU itself (run by hand, commit the output).

    cd tests/metrics/data && python3 make_expected.py      # python3 with sacrebleu 2.x installed

Reads the sample files in this folder and writes:
  expected.txt                 'key value...' lines: corpus BLEU statistics and scores (full
                               precision), chrF, sentence-level scores, sacreBLEU's text lines
  tokenize_13a.expected.txt    sacreBLEU's 13a tokenization of each line of tokenize_13a.cases.txt
Files are split on '\n' only (a final newline ends the last line; one trailing '\r' is dropped),
the way xf-eval reads them; sacreBLEU's own reader would not split them differently.
"""
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a


def read_lines(path):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def bleu_entries(key, score):
    yield f"{key}.score {score.score!r}"
    yield f"{key}.precisions " + " ".join(repr(p) for p in score.precisions)
    yield f"{key}.bp {score.bp!r}"
    yield f"{key}.ratio {score.ratio!r}"
    yield f"{key}.hyp_len {score.sys_len}"
    yield f"{key}.ref_len {score.ref_len}"
    yield f"{key}.counts " + " ".join(str(c) for c in score.counts)
    yield f"{key}.totals " + " ".join(str(t) for t in score.totals)


def main():
    hyps = read_lines("hyp.txt")
    ref_a, ref_b = read_lines("ref.a.txt"), read_lines("ref.b.txt")
    out = [f"# made by make_expected.py with sacrebleu {sacrebleu.__version__}; do not edit"]

    # Parallel reference files: one reference, then two.
    for key, refs in (("single", [ref_a]), ("multi", [ref_a, ref_b])):
        bleu = BLEU().corpus_score(hyps, refs)
        chrf = CHRF().corpus_score(hyps, refs)
        out += bleu_entries(f"corpus_bleu.{key}", bleu)
        out.append(f"corpus_chrf.{key} {chrf.score!r}")
        out.append(f"text.{key} {bleu}")
        out.append(f"text.{key} {chrf}")

    # Sentence level against both references, with and without effective order.
    for i in (0, 1, 3, 5, 8, 10, 12, 16, 25, 28, 29, 34):
        refs = [ref_a[i], ref_b[i]]
        out.append(f"sentence_bleu.{i} {BLEU().sentence_score(hyps[i], refs).score!r}")
        out.append(f"sentence_bleu_effective.{i} {BLEU(effective_order=True).sentence_score(hyps[i], refs).score!r}")
        out.append(f"sentence_chrf.{i} {CHRF().sentence_score(hyps[i], refs).score!r}")

    # References grouped from a TSV by source, a variable number per source (None pads the streams).
    groups = {}
    for line in read_lines("refs.tsv"):
        source, target = line.split("\t")[:2]
        groups.setdefault(source, []).append(target)
    sources = list(groups)  # first-appearance order
    tsv_hyps = read_lines("hyp.tsv-sources.txt")
    assert len(tsv_hyps) == len(sources)
    depth = max(len(g) for g in groups.values())
    streams = [[groups[s][k] if k < len(groups[s]) else None for s in sources] for k in range(depth)]
    bleu = BLEU().corpus_score(tsv_hyps, streams)
    chrf = CHRF().corpus_score(tsv_hyps, streams)
    out += bleu_entries("corpus_bleu.tsv", bleu)
    out.append(f"corpus_chrf.tsv {chrf.score!r}")
    out.append(f"text.tsv {bleu}")
    out.append(f"text.tsv {chrf}")

    with open("expected.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out) + "\n")

    tokenize = Tokenizer13a()
    with open("tokenize_13a.expected.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(tokenize(case) + "\n" for case in read_lines("tokenize_13a.cases.txt")))


if __name__ == "__main__":
    main()
