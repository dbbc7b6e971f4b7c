#!/usr/bin/env python3
"""Rewrites an xf model file with its matrices in another dtype, for f32/int8 comparisons.

    xfm_convert_dtype.py IN.xfm OUT.xfm --dtype f32|f16|int8

Values are widened to float32 first (f16 exactly, int8 as q * scale), then stored as --dtype:
int8 with xf's per-row rule (scale = max|row| / 127, round half to even), for 2-D tensors only
(1-D tensors stay f32, as xf-convert does). Config, tokenizer and metadata are kept; the
metadata key "bench.converted_from" records the source dtype.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xfm  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--dtype", required=True, choices=["f32", "f16", "int8"])
    args = p.parse_args()
    try:
        model = xfm.read_xfm(args.input)
    except (OSError, xfm.XfmError) as e:
        raise SystemExit("xfm_convert_dtype: %s" % e)
    tensors = {}
    for name, stored in model.tensors.items():
        matrix = stored.values.ndim == 2
        dtype = args.dtype if matrix or args.dtype != "int8" else "f32"
        tensors[name] = (dtype, stored.to_float32())
    metadata = dict(model.metadata)
    source_dtypes = sorted({t.dtype for t in model.tensors.values()})
    metadata["bench.converted_from"] = "%s (%s)" % (os.path.basename(args.input),
                                                   "/".join(source_dtypes))
    xfm.write_xfm(args.output, model.config, tensors, model.source_tokenizer, metadata,
                  model.target_tokenizer)
    print("%s -> %s (%s matrices)" % (args.input, args.output, args.dtype), file=sys.stderr)


if __name__ == "__main__":
    main()
