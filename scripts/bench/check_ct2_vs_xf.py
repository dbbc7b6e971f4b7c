#!/usr/bin/env python3
"""Checks that CTranslate2, given an xf model's weights, decodes what xf-run decodes.

    check_ct2_vs_xf.py --xf-run BUILD/bin/xf-run MODEL.xfm [--quantization float32|int8]
                       [--lines 200] [--max-len 30] [--seed 1] [--work-dir DIR]
                       [--text SENTENCES.txt]

Converts MODEL.xfm with xfm_to_ctranslate2.py, makes --lines random source lines of token ids
(1..--max-len ids, none of PAD/UNK/BOS/EOS) -- or, with --text, takes the first --lines lines of
a text file (the model needs its tokenizer) --, translates them with xf-run and with ct2_run.py
(--ids mode for ids), greedy (batch 32) and beam 4, and compares line by line. Greedy outputs must be
identical with float32 weights (exit status 1 otherwise); beam-4 agreement is reported only,
because the two length penalties and beam bookkeeping differ (see ct2_run.py).

Use --quantization int8 on an int8 .xfm (xfm_convert_dtype.py makes one): CTranslate2 then holds
the same int8 weights (the converter checks it). The products still differ: xf quantizes a
matmul's input with one scale per tensor, CTranslate2 with one scale per row, so int8 outputs
agree only where no decision is closer than that rounding; their agreement is reported, not
required.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import xfm  # noqa: E402


def run(command, stdin_text):
    result = subprocess.run(command, input=stdin_text, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("%s failed (%d): %s" % (command[0], result.returncode, result.stderr.strip()))
    return result.stdout.splitlines()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--xf-run", required=True)
    p.add_argument("--quantization", default="float32", choices=["float32", "int8"])
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--max-len", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--work-dir")
    p.add_argument("--text", help="sentences to translate instead of random ids")
    args = p.parse_args()

    model = xfm.read_xfm(args.model)
    c = model.config
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="xf-ct2-check-")
    os.makedirs(work_dir, exist_ok=True)
    ct2_dir = os.path.join(work_dir, "ct2_" + args.quantization)
    subprocess.run([sys.executable, os.path.join(HERE, "xfm_to_ctranslate2.py"), args.model,
                    ct2_dir, "--quantization", args.quantization, "--force"], check=True)

    if args.text:
        with open(args.text, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f][:args.lines]
        mode = []
    else:
        rng = np.random.default_rng(args.seed)
        first = max(c["pad_id"], c["unk_id"], c["bos_id"], c["eos_id"]) + 1
        lines = [" ".join(str(x) for x in rng.integers(first, c["source_vocab_size"],
                                                          rng.integers(1, args.max_len + 1)))
                 for _ in range(args.lines)]
        mode = ["--ids"]
    text = "\n".join(lines) + "\n"
    threads = str(args.threads)

    failed = False
    for beam in (1, 4):
        # ct2_run.py's length penalty, not the model's own (xf-run's default).
        xf_out = run([args.xf_run, "--model", args.model] + mode + ["--beam", str(beam), "--length-penalty", "0.6",
                      "--max-batch", "32", "--threads", threads], text)
        ct2_out = run([sys.executable, os.path.join(HERE, "ct2_run.py"), "--model", ct2_dir] + mode
                      + ["--beam", str(beam), "--max-batch", "32", "--threads", threads], text)
        if len(xf_out) != len(lines) or len(ct2_out) != len(lines):
            raise SystemExit("line counts: input %d, xf-run %d, CTranslate2 %d"
                             % (len(lines), len(xf_out), len(ct2_out)))
        same = sum(a == b for a, b in zip(xf_out, ct2_out))
        lengths = [len(x.split()) for x in xf_out]
        required = beam == 1 and args.quantization == "float32"
        print("%s %s beam %d: %d of %d outputs identical (xf output lengths %d..%d, mean %.1f)%s"
              % (os.path.basename(args.model), args.quantization, beam, same, len(lines),
                 min(lengths), max(lengths), float(np.mean(lengths)),
                 "" if required else " [reported, not required]"))
        if required and same != len(lines):
            failed = True
            for i, (a, b) in enumerate(zip(xf_out, ct2_out)):
                if a != b:
                    print("  first difference, line %d: %s\n    xf:   %s\n    ct2:  %s"
                          % (i + 1, lines[i], a, b))
                    break
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
