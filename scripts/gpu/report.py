#!/usr/bin/env python3
"""The GPU check's report (scripts/gpu_check.sh): tables from its results.jsonl, most important
first, and the token-by-token comparison of two files of greedy outputs.

    report.py RESULTS.jsonl [--traces DIR]        markdown tables on stdout
    report.py --compare XF.ids PYTORCH.ids --label L   one JSON line: sentences equal, tokens equal
"""
import argparse
import glob
import json
import os


def compare(xf_path, pt_path, label):
    with open(xf_path) as f:
        xf = [line.split() for line in f]
    with open(pt_path) as f:
        pt = [line.split() for line in f]
    n = min(len(xf), len(pt))
    equal = sum(xf[i] == pt[i] for i in range(n))
    # Tokens equal up to the first difference, over the longer output's tokens: how far the two
    # agree before a near-tie is decided differently.
    prefix = total = 0
    for a, b in zip(xf[:n], pt[:n]):
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        prefix += k
        total += max(len(a), len(b))
    return {"kind": "compare", "label": label, "sentences": n, "equal": equal,
            "share_equal": equal / n if n else 0.0,
            "tokens_before_first_difference": prefix / total if total else 1.0}


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def setting(r):
    return "batch %d %s" % (r["batch"], "greedy" if r["beam"] == 1 else "beam %d" % r["beam"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results", nargs="?")
    p.add_argument("--traces")
    p.add_argument("--compare", nargs=2)
    p.add_argument("--label", default="")
    a = p.parse_args()
    if a.compare:
        print(json.dumps(compare(a.compare[0], a.compare[1], a.label)))
        return
    records = []
    with open(a.results) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    out = []

    # 1. Decoding, xf beside PyTorch.
    xf = {}
    pt = {}
    pt_nocudnn = {}  # PyTorch with cuDNN's attention switched off (f16)
    for r in records:
        if r.get("kind") != "decode":
            continue
        if r["tool"] == "xf":
            res = r["result"]
            xf[(r["model"], r["dtype"], res["batch"], res["beam"])] = res
        else:
            key = (r["model"], r["dtype"], r["batch"], r["beam"])
            (pt_nocudnn if r.get("sdpa") == "no-cudnn" else pt)[key] = r
    rows = []
    for key in sorted(set(xf) | set(pt) | set(pt_nocudnn), key=lambda k: (k[0], k[1], k[2] != 1, k[2], k[3])):
        x, t, n = xf.get(key), pt.get(key), pt_nocudnn.get(key)
        model, dtype, batch, beam = key
        label = "%s %s %s" % (model, dtype, setting({"batch": batch, "beam": beam}))
        if batch == 1:
            xs = "%.3f / %.3f ms" % (x["ms_per_step_p50"], x["ms_per_step_p90"]) if x else "-"
            ts = "%.3f / %.3f ms" % (t["ms_per_step_p50"], t["ms_per_step_p90"]) if t else "-"
        else:
            xs = ts = ""
        rows.append([label,
                     "%.0f" % x["tokens_per_s"] if x else "FAILED",
                     "%.0f" % t["tokens_per_s"] if t else "-",
                     "%.2f" % (x["tokens_per_s"] / t["tokens_per_s"]) if x and t else "-",
                     "%.0f (%.2f)" % (n["tokens_per_s"], x["tokens_per_s"] / n["tokens_per_s"]) if x and n else "-",
                     xs, ts,
                     "%.3f / %.3f ms" % (n["ms_per_step_p50"], n["ms_per_step_p90"]) if n and batch == 1 else "",
                     "%.0f" % x["device_memory_mb"] if x else "-",
                     "%.0f / %.0f" % (t["device_used_mb"], t["device_peak_mb"]) if t else "-",
                     x["device_allocations"] if x else "-"])
    out.append("## Decoding: xf-bench --device cuda against PyTorch, same weights and sources\n")
    out.append(table(["model dtype setting", "xf tokens/s", "PyTorch tokens/s", "xf / PyTorch",
                      "PyTorch, cuDNN attention off: tokens/s (xf / it)",
                      "xf ms/step p50 / p90", "PyTorch ms/step p50 / p90",
                      "PyTorch cuDNN off ms/step p50 / p90",
                      "xf device MB in use", "PyTorch MB in use / tensor peak",
                      "xf device allocations"], rows))

    # 2. Greedy outputs compared.
    rows = [[r["label"], r["sentences"], r["equal"], "%.1f%%" % (100 * r["share_equal"]),
             "%.1f%%" % (100 * r["tokens_before_first_difference"])]
            for r in records if r.get("kind") == "compare"]
    out.append("\n## Greedy outputs, xf-run --device cuda against PyTorch (batch 128), token by token\n")
    out.append(table(["model dtype", "sentences", "identical", "share", "tokens before the first difference"], rows))

    # 3. Training step.
    ceiling = next((r for r in records if r.get("kind") == "ceiling"), None)
    peak_dense = 989.4  # H100/H200 SXM datasheet, dense f16/bf16 tensor TFLOP/s
    rows = []
    for r in records:
        if r.get("kind") != "train":
            continue
        seconds = r["seconds_per_step"]
        tokens = (r["source_tokens"] + r["target_tokens"]) / seconds
        tflops = r["model_flops_per_step"] / seconds / 1e12 if r.get("model_flops_per_step") else 0.0
        rows.append([r["tool"], r["precision"], "%.4f" % seconds, "%.0f" % tokens,
                     "%.1f" % tflops, "%.1f%%" % (100 * tflops / peak_dense),
                     "%.1f%%" % (100 * tflops / ceiling["bf16_matmul_tflops"]) if ceiling else "-"])
    out.append("\n## Training step, base model (6+6, d 512, vocab 8000, 200 pairs of 24-31 tokens)\n")
    out.append(table(["tool", "precision", "s/step", "source+target tokens/s", "model TFLOP/s",
                      "MFU (989 TFLOP/s datasheet)", "of the measured bf16 product"], rows))
    if ceiling:
        out.append("\nMeasured ceilings: device copy %.2f TB/s (read + write), bf16 8192^3 product %.0f TFLOP/s."
                   % (ceiling["copy_tb_per_s"], ceiling["bf16_matmul_tflops"]))

    # 4. Where the time goes.
    if a.traces:
        for path in sorted(glob.glob(os.path.join(a.traces, "trace_*.tsv"))):
            with open(path) as f:
                lines = f.read().splitlines()
            if not lines:
                continue
            out.append("\n### %s: %s\n" % (os.path.basename(path), lines[0].lstrip("# ")))
            rows = [l.split("\t") for l in lines[2:10]]
            out.append(table(["kind", "name", "calls", "total us", "mean us", "share of busy"],
                             [r[:2] + r[2:5] + ["%.1f%%" % (100 * float(r[5]))] for r in rows if len(r) >= 6]))
    print("\n".join(out))


if __name__ == "__main__":
    main()
