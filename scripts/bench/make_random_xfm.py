#!/usr/bin/env python3
"""Writes an xf model file (.xfm) with random weights, for benchmarks and converter checks.

    make_random_xfm.py --out M.xfm [--d-model 256 --heads 4 --d-ff 1024 --layers 3]
                       [--vocab 8000 --spm-train $XF_DATA/train.tsv]
                       [--dtype f32|f16|int8] [--seed 1]

With --spm-train, a shared SentencePiece model (pad 0, unk 1, bos 2, eos 3, like xf-train's) is
trained on up to --spm-lines lines of that file (both TSV columns) and stored in the model, so
text tools (xf-bench, xf-run) work on it; the vocabulary size is then the SentencePiece model's.
Without it the model has --vocab ids and no tokenizer (xf-run --ids only).

Random weights make every token about equally likely, so decoding stops at random points. The
final LayerNorm's gain is multiplied by --sharpness to make argmax decisions well separated
(a converter check should not hinge on 1e-6 logit differences), and --eos-bias adds that much to
the EOS logit through an output bias, which makes output lengths geometric with a mean that
grows as the bias shrinks.
"""
import argparse
import io
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xfm  # noqa: E402


def train_sentencepiece(tsv_path, vocab_size, max_lines, seed):
    import sentencepiece as spm

    rng = np.random.default_rng(seed)
    with open(tsv_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if len(lines) > max_lines:
        lines = [lines[i] for i in sorted(rng.choice(len(lines), max_lines, replace=False))]
    sentences = [side for line in lines for side in line.split("\t") if side]
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=proto, vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        num_threads=2, minloglevel=2, hard_vocab_limit=False)
    return proto.getvalue()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--encoder-layers", type=int, help="overrides --layers for the encoder")
    p.add_argument("--decoder-layers", type=int, help="overrides --layers for the decoder")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--max-positions", type=int, default=1024)
    p.add_argument("--pre-norm", action="store_true")
    p.add_argument("--dtype", choices=["f32", "f16", "int8"], default="f32",
                   help="of the matrices (1-D tensors stay f32 with int8)")
    p.add_argument("--spm-train", help="TSV/text file to train the SentencePiece model on")
    p.add_argument("--spm-lines", type=int, default=50000)
    p.add_argument("--sharpness", type=float, default=4.0)
    p.add_argument("--eos-bias", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    encoder_layers = args.encoder_layers or args.layers
    decoder_layers = args.decoder_layers or args.layers

    tokenizer = b""
    vocab = args.vocab
    if args.spm_train:
        import sentencepiece as spm
        tokenizer = train_sentencepiece(args.spm_train, args.vocab, args.spm_lines, args.seed)
        vocab = spm.SentencePieceProcessor(model_proto=tokenizer).get_piece_size()

    config = dict(
        source_vocab_size=vocab, target_vocab_size=vocab, d_model=args.d_model,
        num_heads=args.heads, d_ff=args.d_ff, encoder_layers=encoder_layers,
        decoder_layers=decoder_layers, max_positions=args.max_positions,
        norm_position=1 if args.pre_norm else 0, shared_embeddings=True, tied_output=True,
        output_bias=args.eos_bias != 0.0, layer_norm_epsilon=1e-6,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3)

    rng = np.random.default_rng(args.seed)
    d = args.d_model
    final_norm = ("decoder.final_norm" if args.pre_norm
                  else "decoder.layers.%d.ffn_norm" % (decoder_layers - 1))
    tensors = {}
    for name, shape in xfm.transformer_parameters(config):
        if name.startswith("embedding.") or name == "output.weight":
            values = rng.standard_normal(shape) / np.sqrt(d)
        elif len(shape) == 2:
            bound = np.sqrt(6.0 / (shape[0] + shape[1]))  # Xavier uniform
            values = rng.uniform(-bound, bound, shape)
        elif name.endswith(".gamma"):
            values = rng.uniform(0.8, 1.2, shape)
        elif name == "output.bias":
            values = np.zeros(shape)
            values[config["eos_id"]] = args.eos_bias
        else:
            values = rng.uniform(-0.1, 0.1, shape)
        if name in (final_norm + ".gamma", final_norm + ".beta"):
            values = values * args.sharpness
        dtype = args.dtype if len(shape) == 2 or args.dtype == "f16" else "f32"
        tensors[name] = (dtype, values.astype(np.float32))

    metadata = {"xf.random_model": "scripts/bench/make_random_xfm.py seed %d" % args.seed}
    xfm.write_xfm(args.out, config, tensors, tokenizer, metadata)
    print("%s: d_model %d, %d+%d layers, %d heads, d_ff %d, vocab %d, %s, %d bytes"
          % (args.out, d, encoder_layers, decoder_layers, args.heads, args.d_ff, vocab, args.dtype,
             os.path.getsize(args.out)), file=sys.stderr)


if __name__ == "__main__":
    main()
