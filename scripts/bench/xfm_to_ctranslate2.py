#!/usr/bin/env python3
"""Builds a CTranslate2 model with exactly the weights of an xf model file (.xfm).

    xfm_to_ctranslate2.py MODEL.xfm OUT_DIR [--quantization int8|float32] [--force]

The model is xf's (format/src/parameters.cc, tests/reference/README.md): embeddings scaled by
sqrt(d_model) plus sinusoidal positions PE(p, 2j) = sin(p / 10000^(2j/d)), PE(p, 2j+1) = cos(..),
post- or pre-norm sub-layers, fused q/k/v [3d, d] in self-attention, cross-attention query [d, d]
and fused key/value [2d, d], ReLU FFN, weights [out, in]. The same math in CTranslate2's terms:

  - TransformerSpec.from_config(pre_norm=...): each sub-layer's `layer_norm` is applied after the
    residual sum when pre_norm is False (the fairseq converter relies on the same), before the
    sub-layer when True, with a final `layer_norm` per stack;
  - self-attention linear[0] is the fused q/k/v, linear[1] the output; cross-attention linear[0]
    the query, linear[1] the fused key/value, linear[2] the output (CTranslate2 splits fused
    matrices in this order, as its OpenNMT-py converter shows);
  - the position table is given explicitly (xf interleaves sin and cos; CTranslate2's built-in
    table does not), max_positions rows;
  - the source gets EOS appended (add_source_eos) and decoding starts from BOS, as in xf.

Weights stored as f16 or int8 are widened to float32 (int8: q * scale), then saved with the
requested quantization. CTranslate2's int8 rule (scale = 127 / max|row|, round) applied to
xf's dequantized rows gives back xf's int8 values; the script checks that and says so.

The vocabulary is the SentencePiece model's pieces (written to OUT_DIR/sentencepiece.model too);
a model without a tokenizer gets "<pad>", "<unk>", "<s>", "</s>" at its special ids and "t<id>"
elsewhere. Token i of the CTranslate2 vocabulary is xf's id i.
"""
import argparse
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xfm  # noqa: E402


def sinusoid_positions(length, d):
    """[length, d] float32, interleaved like xf (tests/reference/make_golden.py)."""
    position = np.arange(length, dtype=np.float64)[:, None]
    two_j = np.arange(0, d, 2, dtype=np.float64)[None, :]
    angle = position / np.power(10000.0, two_j / d)
    table = np.zeros((length, d))
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table.astype(np.float32)


def vocabulary(tokenizer, size, config):
    """Token strings indexed by xf id."""
    if tokenizer:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_proto=tokenizer)
        if sp.get_piece_size() != size:
            raise SystemExit("tokenizer has %d pieces, the model's vocabulary %d"
                             % (sp.get_piece_size(), size))
        tokens = [sp.id_to_piece(i) for i in range(size)]
    else:
        special = {config["pad_id"]: "<pad>", config["unk_id"]: "<unk>",
                   config["bos_id"]: "<s>", config["eos_id"]: "</s>"}
        tokens = [special.get(i, "t%d" % i) for i in range(size)]
    if len(set(tokens)) != len(tokens):
        raise SystemExit("vocabulary has duplicate token strings")
    return tokens


def build_spec(model):
    """(TransformerSpec, [(LinearSpec or EmbeddingsSpec, xf tensor name)] for the int8 check)."""
    from ctranslate2.specs import transformer_spec

    c = model.config
    pre_norm = c["norm_position"] == 1
    weights = {name: t.to_float32() for name, t in model.tensors.items()}
    spec = transformer_spec.TransformerSpec.from_config(
        (c["encoder_layers"], c["decoder_layers"]), c["num_heads"], pre_norm=pre_norm)
    matrices = []

    def set_linear(linear, name):
        linear.weight = weights[name + ".weight"]
        linear.bias = weights[name + ".bias"]
        matrices.append((linear, name + ".weight"))

    def set_norm(norm, name):
        norm.gamma = weights[name + ".gamma"]
        norm.beta = weights[name + ".beta"]

    positions = sinusoid_positions(c["max_positions"], c["d_model"])
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = weights[xfm.source_embedding_name(c)]
    matrices.append((encoder.embeddings[0], xfm.source_embedding_name(c)))
    encoder.position_encodings.encodings = positions
    encoder.scale_embeddings = True

    def set_self_attention_and_ffn(layer, p):
        set_linear(layer.self_attention.linear[0], p + "self_attention.qkv")
        set_linear(layer.self_attention.linear[1], p + "self_attention.output")
        set_norm(layer.self_attention.layer_norm, p + "self_attention_norm")
        set_linear(layer.ffn.linear_0, p + "ffn.inner")
        set_linear(layer.ffn.linear_1, p + "ffn.outer")
        set_norm(layer.ffn.layer_norm, p + "ffn_norm")

    for i, layer in enumerate(encoder.layer):
        set_self_attention_and_ffn(layer, "encoder.layers.%d." % i)
    if pre_norm:
        set_norm(encoder.layer_norm, "encoder.final_norm")

    decoder.embeddings.weight = weights[xfm.target_embedding_name(c)]
    if not c["shared_embeddings"]:
        matrices.append((decoder.embeddings, xfm.target_embedding_name(c)))
    decoder.position_encodings.encodings = positions
    decoder.scale_embeddings = True
    for i, layer in enumerate(decoder.layer):
        p = "decoder.layers.%d." % i
        set_self_attention_and_ffn(layer, p)
        set_linear(layer.attention.linear[0], p + "cross_attention.query")
        set_linear(layer.attention.linear[1], p + "cross_attention.key_value")
        set_linear(layer.attention.linear[2], p + "cross_attention.output")
        set_norm(layer.attention.layer_norm, p + "cross_attention_norm")
    if pre_norm:
        set_norm(decoder.layer_norm, "decoder.final_norm")
    decoder.projection.weight = weights[xfm.output_projection_name(c)]
    if not c["tied_output"]:
        matrices.append((decoder.projection, "output.weight"))
    if c["output_bias"]:
        decoder.projection.bias = weights["output.bias"]

    source_tokens = vocabulary(model.source_tokenizer, c["source_vocab_size"], c)
    target_tokens = vocabulary(model.target_tokenizer or model.source_tokenizer,
                               c["target_vocab_size"], c)
    spec.register_source_vocabulary(source_tokens)
    spec.register_target_vocabulary(target_tokens)
    spec.config.unk_token = target_tokens[c["unk_id"]]
    spec.config.bos_token = target_tokens[c["bos_id"]]
    spec.config.eos_token = target_tokens[c["eos_id"]]
    spec.config.decoder_start_token = target_tokens[c["bos_id"]]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = float(c["layer_norm_epsilon"])
    return spec, matrices


def int8_differences(model, matrices):
    """After optimize(int8): (matrices compared, values that differ from xf's int8 values)."""
    compared = differing = 0
    for layer, name in matrices:
        stored = model.tensors[name]
        if stored.dtype != "int8" or isinstance(layer.weight, str):  # str: an alias
            continue
        ct2_values = layer.weight.numpy()
        compared += 1
        differing += int(np.count_nonzero(ct2_values.astype(np.int16) - stored.values))
    return compared, differing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("out_dir")
    p.add_argument("--quantization", default="float32",
                   choices=["float32", "int8", "int8_float32", "float16", "int8_float16"])
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    args = p.parse_args()

    try:
        model = xfm.read_xfm(args.model)
    except (OSError, xfm.XfmError) as e:
        raise SystemExit("xfm_to_ctranslate2: %s" % e)
    if os.path.exists(args.out_dir):
        if not args.force:
            raise SystemExit("xfm_to_ctranslate2: %s exists (use --force)" % args.out_dir)
        shutil.rmtree(args.out_dir)

    spec, matrices = build_spec(model)
    spec.validate()
    spec.optimize(quantization=args.quantization)
    if args.quantization.startswith("int8"):
        compared, differing = int8_differences(model, matrices)
        if compared:
            print("int8 check: %d int8 matrices of the .xfm, %d values differ in CTranslate2's "
                  "quantization" % (compared, differing), file=sys.stderr)
    os.makedirs(args.out_dir)
    spec.save(args.out_dir)
    if model.source_tokenizer:
        with open(os.path.join(args.out_dir, "sentencepiece.model"), "wb") as f:
            f.write(model.source_tokenizer)
    if model.target_tokenizer:
        with open(os.path.join(args.out_dir, "sentencepiece.target.model"), "wb") as f:
            f.write(model.target_tokenizer)
    print("%s -> %s (%s)" % (args.model, args.out_dir, args.quantization), file=sys.stderr)


if __name__ == "__main__":
    main()
