#!/usr/bin/env python3
"""Groups a `perf report --stdio --no-children --sort dso,symbol` profile into ops: where a
translation's CPU time goes (issue 40's breakdown). Reads the report on stdin; prints each op's
share of the samples and CPU seconds (perf's cpu-clock count), then the symbols of each op (their share, and the shape a template
argument names, e.g. int8_panel_products_512<..., 1024l>: k = 1024).

    perf report -i perf.data --stdio --no-children --sort dso,symbol | perf_ops.py [--symbols N]

The ops are named by the symbols of xf's kernels (kernels_cpu/src), oneDNN's JIT code (named
where the run had ONEDNN_JIT_PROFILE=2, else "[unknown]" in an anonymous mapping, counted as
products too), and CTranslate2's (libctranslate2: ops::Gemm, ops::SoftMax, ...; its GEMMs in
Intel MKL or oneDNN). Whatever matches none is "other" (listed, so a reader can see it).
"""
import argparse
import collections
import re
import sys

# (op, pattern over "dso symbol"), first match wins.
OPS = [
    ("products (xf int8 kernels)", r"int8_(panel|row)_products"),
    ("products (xf f32 kernels)", r"f32_panel_products"),
    ("products (oneDNN)", r"jit_|brgemm|gemm_|dnnl|libdnnl|\[unknown\]|\[JIT\]|sgemm|gemv|jit:|run_primitive"),
    ("products (MKL, CTranslate2)", r"mkl_|libiomp|libmkl"),
    ("products (CTranslate2 other)", r"ops::Gemm|primitives<.*>::gemm|cpu::gemm"),
    # Before "quantize x": a model stored in another dtype than asked is converted at load.
    ("model loading", r"int8_panels|f32_panels|seven_bit|row_shift_sums|packed_copy|flatbuffers|quantize_rows_int8|dequantize_int8_row|widen|to_float"),
    ("quantize x (int8)", r"quantize|shift_to_unsigned|Quantize"),
    ("product epilogue (scale, bias)", r"scale_rows_add_bias|add_bias|Dequantize|add_batch_broadcast"),
    ("softmax / top-k", r"softmax|top_k|TopK|SoftMax|log_softmax|topk"),
    ("attention", r"attend|attention|Attention|MultiHead"),
    ("layer norm", r"layer_norm|LayerNorm"),
    ("activation", r"gelu|relu|swish|GELU|ReLU|activation"),
    ("embedding", r"embed|Embeddings|sincos|__sin|__cos|position"),
    ("row copies (gather, beam reorder, cache)", r"memmove|memcpy|gather|reorder|Gather|index_select|Concat|Split|Transpose|transpose"),
    ("threads (pool, OpenMP, scheduler)", r"worker_pool|WorkerPool|gomp|GOMP|pthread|futex|sched|schedule|_raw_spin|finish_task_switch"),
    ("tokenizer", r"sentencepiece|Darts|unigram"),
    ("kernel: page faults, memory", r"page_fault|clear_page|\[k\].*(mm|page|pte)|do_anonymous|handle_mm"),
    ("Python interpreter", r"python|_PyEval|Py[A-Z]"),
    ("memory allocation", r"malloc|free|operator new|operator delete|_int_|cfree"),
]

# "  12.34%  dso name  [.] symbol  -  -": the dso may hold spaces ("[JIT] tid 123").
LINE = re.compile(r"^\s*([\d.]+)%\s+(.+?)\s+\[(.)\]\s+(.*?)(\s+-\s+-)?\s*$")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--symbols", type=int, default=6, help="symbols listed per op")
    args = p.parse_args()
    shares = collections.Counter()
    symbols = collections.defaultdict(collections.Counter)
    cpu_seconds = None  # cpu-clock counts nanoseconds
    for line in sys.stdin:
        count = re.match(r"# Event count \(approx\.\): (\d+)", line)
        if count:
            cpu_seconds = int(count.group(1)) / 1e9
        m = LINE.match(line)
        if not m:
            continue
        share, dso, kind, symbol = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        text = "%s [%s] %s" % (dso, kind, symbol)
        op = next((name for name, pattern in OPS if re.search(pattern, text)), "other")
        if op == "other" and kind == "k":
            op = "kernel: other"
        shares[op] += share
        short = re.sub(r"\(anonymous namespace\)::|xf::cpu::|detail::", "", symbol)[:110]
        symbols[op]["%s (%s)" % (short, dso)] += share
    total = sum(shares.values())
    print("CPU seconds sampled: %s" % ("%.2f" % cpu_seconds if cpu_seconds else "?"))
    print("%-44s %7s %8s" % ("op", "share", "cpu s"))
    for op, share in shares.most_common():
        fraction = share / total if total else 0.0
        print("%-44s %6.1f%% %8s" % (op, 100.0 * fraction,
                                     "%.3f" % (fraction * cpu_seconds) if cpu_seconds else "?"))
    print()
    for op, share in shares.most_common():
        print("%s:" % op)
        for symbol, s in symbols[op].most_common(args.symbols):
            print("    %6.2f%%  %s" % (100.0 * s / total, symbol))


if __name__ == "__main__":
    main()
