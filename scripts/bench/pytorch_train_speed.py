#!/usr/bin/env python3
"""Training speed of xf's Transformer in PyTorch on the CPU: the baseline of issue 4's goal.

    pytorch_train_speed.py [--train $XF_DATA/train.tsv] [--spm SPM.model]
                           [--d-model 256 --layers 3 --heads 4 --d-ff 1024 --vocab 8000]
                           [--batch-tokens 4096] [--threads 2] [--warmup-steps 3 --steps 20]
                           [--autocast off|bf16] [--json]

The model is xf's (tests/reference/README.md): post-norm (or --norm pre) encoder-decoder, one
embedding table shared by source, target and the output projection, embeddings scaled by
sqrt(d_model) plus interleaved sinusoidal positions, dropout 0.1 on embedding sums and sub-layer
outputs only (xf-train's defaults: no attention dropout, none inside the FFN), ReLU FFN,
label-smoothed (0.1) cross-entropy over non-PAD targets, Adam (0.9, 0.98, 1e-9) with the
warmup / inverse-square-root schedule. It is built from torch.nn's TransformerEncoderLayer and
TransformerDecoderLayer (norm_first=False and no final norms; with --norm pre, norm_first=True
and a final LayerNorm per stack) -- what a PyTorch user would write -- with their attention and
FFN-inner dropouts switched off to match xf.

The data are those xf-train sees: pairs of train.tsv tokenized with a shared SentencePiece model
(--spm, e.g. the sentencepiece.model xf-train wrote; otherwise one of --vocab pieces is trained
here on --spm-lines lines), source + EOS and BOS + target, batches cut the way xf's
plan_batches() cuts them (sorted by length, rows * max(source, target length) <= batch tokens,
batch order shuffled).

tokens/s counts source tokens (with EOS) plus target tokens (n + 1 per sentence), padding
excluded -- the figure xf-train's progress line prints. Each step (forward, backward, Adam) is
timed after --warmup-steps untimed steps; the figure is the timed tokens over the timed seconds.
"""
import argparse
import io
import json
import math
import os
import platform
import sys
import time

import numpy as np


def train_sentencepiece(sentences, vocab_size):
    import sentencepiece as spm
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=proto, vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        num_threads=2, minloglevel=2, hard_vocab_limit=False)
    return spm.SentencePieceProcessor(model_proto=proto.getvalue())


def load_pairs(path, count, rng):
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t") for line in f]
    pairs = [p for p in lines if len(p) == 2 and p[0] and p[1]]
    if len(pairs) > count:
        pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), count, replace=False))]
    return pairs


def plan_batches(lengths, batch_tokens, rng):
    """lengths: [(source + 1, target + 1)]. xf's rule: sort by length with random tie-breaks,
    cut greedily so rows * max(longest source, longest target) <= batch_tokens, shuffle."""
    keys = rng.random(len(lengths))
    order = sorted(range(len(lengths)), key=lambda i: (max(lengths[i]), lengths[i], keys[i]))
    batches, current, longest = [], [], 0
    for i in order:
        width = max(longest, max(lengths[i]))
        if current and (len(current) + 1) * width > batch_tokens:
            batches.append(current)
            current, width = [], max(lengths[i])
        current.append(i)
        longest = width
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def build_model(torch, args, vocab):
    nn = torch.nn

    pre_norm = args.norm == "pre"
    # Pre-norm stacks end with a LayerNorm each (xf's encoder/decoder.final_norm); post-norm
    # stacks have none.
    eps = getattr(args, "layer_norm_eps", 1e-6)
    final_norm = lambda: nn.LayerNorm(args.d_model, eps=eps) if pre_norm else None

    class XfTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d_model
            self.embedding = nn.Embedding(vocab, d)
            nn.init.normal_(self.embedding.weight, 0.0, d ** -0.5)
            position = torch.arange(args.max_positions, dtype=torch.float64)[:, None]
            two_j = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
            angle = position / torch.pow(torch.tensor(10000.0, dtype=torch.float64), two_j / d)
            pe = torch.zeros(args.max_positions, d, dtype=torch.float64)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
            self.register_buffer("positions", pe.to(torch.get_default_dtype()))
            self.dropout = nn.Dropout(args.dropout)
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(d, args.heads, args.d_ff, args.dropout, "relu",
                                           batch_first=True, norm_first=pre_norm, layer_norm_eps=eps),
                args.layers, norm=final_norm(), enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoder(
                nn.TransformerDecoderLayer(d, args.heads, args.d_ff, args.dropout, "relu",
                                           batch_first=True, norm_first=pre_norm, layer_norm_eps=eps),
                args.layers, norm=final_norm())
            self.scale = math.sqrt(d)
            # torch.nn's layers also drop attention weights and the FFN's hidden activations;
            # xf-train (attention dropout 0 by default) does neither.
            for layer in list(self.encoder.layers) + list(self.decoder.layers):
                layer.dropout = nn.Identity()            # inside the FFN
                layer.self_attn.dropout = 0.0
                if hasattr(layer, "multihead_attn"):
                    layer.multihead_attn.dropout = 0.0

        def embed(self, ids):
            return self.dropout(self.embedding(ids) * self.scale + self.positions[:ids.shape[1]])

        def forward(self, source, target_in):
            source_pad = source == 0                                  # [B, S]
            target_pad = target_in == 0                               # [B, T]
            T = target_in.shape[1]
            causal = torch.ones(T, T, dtype=torch.bool, device=target_in.device).triu(1)  # True: masked
            memory = self.encoder(self.embed(source), src_key_padding_mask=source_pad)
            hidden = self.decoder(self.embed(target_in), memory, tgt_mask=causal,
                                  tgt_key_padding_mask=target_pad,
                                  memory_key_padding_mask=source_pad, **causal_hint)
            return hidden @ self.embedding.weight.T                   # [B, T, V] (tied)

    # PyTorch >= 2.0 can skip checking the mask when told it is causal; 1.13 (Debian 12) has no
    # such argument.
    import inspect
    causal_hint = ({"tgt_is_causal": True} if "tgt_is_causal" in
                   inspect.signature(torch.nn.TransformerDecoder.forward).parameters else {})
    return XfTransformer()


def check_against_golden(torch, case="post_shared"):
    """Loads a golden case's weights (tests/reference/golden/, independent float64 reference)
    into this script's model and compares the label-smoothed loss and the gradients with the
    reference's, so that the timed model is xf's model. Raises SystemExit on a mismatch."""
    import types
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from check_ct2_golden import GOLDEN_DIR, load_golden

    torch.set_default_dtype(torch.float64)  # the reference is float64; compare tightly
    g = load_golden(os.path.join(GOLDEN_DIR, case + ".txt"))
    c = {k[len("config."):]: v.item() for k, v in g.items() if k.startswith("config.")}
    if not (c["shared_embeddings"] and c["tied_output"] and not c["output_bias"]):
        raise SystemExit("golden case %s is not a shared/tied model" % case)
    args = types.SimpleNamespace(
        d_model=c["d_model"], heads=c["num_heads"], d_ff=c["d_ff"], layers=c["encoder_layers"],
        dropout=0.0, max_positions=c["max_positions"],
        norm="pre" if c["norm_position"] == 1 else "post", layer_norm_eps=c["layer_norm_epsilon"])
    model = build_model(torch, args, c["source_vocab_size"])
    # f32 values are written as the shortest decimal of the float32: round, then widen.
    P = {k[len("param."):]: torch.tensor(v.astype(np.float32).astype(np.float64))
         for k, v in g.items() if k.startswith("param.")}
    names = {}  # torch parameter -> xf parameter name

    def put(parameter, *xf_names):
        with torch.no_grad():
            parameter.copy_(torch.cat([P[n] for n in xf_names]))
        names[parameter] = xf_names

    put(model.embedding.weight, "embedding.shared")
    stacks = [("encoder", model.encoder.layers), ("decoder", model.decoder.layers)]
    for stack, layers in stacks:
        for i, layer in enumerate(layers):
            p = "%s.layers.%d." % (stack, i)
            put(layer.self_attn.in_proj_weight, p + "self_attention.qkv.weight")
            put(layer.self_attn.in_proj_bias, p + "self_attention.qkv.bias")
            put(layer.self_attn.out_proj.weight, p + "self_attention.output.weight")
            put(layer.self_attn.out_proj.bias, p + "self_attention.output.bias")
            put(layer.linear1.weight, p + "ffn.inner.weight")
            put(layer.linear1.bias, p + "ffn.inner.bias")
            put(layer.linear2.weight, p + "ffn.outer.weight")
            put(layer.linear2.bias, p + "ffn.outer.bias")
            put(layer.norm1.weight, p + "self_attention_norm.gamma")
            put(layer.norm1.bias, p + "self_attention_norm.beta")
            ffn_norm = layer.norm2 if stack == "encoder" else layer.norm3
            put(ffn_norm.weight, p + "ffn_norm.gamma")
            put(ffn_norm.bias, p + "ffn_norm.beta")
            if stack == "decoder":
                attn = layer.multihead_attn
                put(attn.in_proj_weight, p + "cross_attention.query.weight",
                    p + "cross_attention.key_value.weight")
                put(attn.in_proj_bias, p + "cross_attention.query.bias",
                    p + "cross_attention.key_value.bias")
                put(attn.out_proj.weight, p + "cross_attention.output.weight")
                put(attn.out_proj.bias, p + "cross_attention.output.bias")
                put(layer.norm2.weight, p + "cross_attention_norm.gamma")
                put(layer.norm2.bias, p + "cross_attention_norm.beta")
    for stack, module in (("encoder", model.encoder), ("decoder", model.decoder)):
        if module.norm is not None:
            put(module.norm.weight, stack + ".final_norm.gamma")
            put(module.norm.bias, stack + ".final_norm.beta")
    if len(names) != len(list(model.parameters())):
        raise SystemExit("golden check: %d of %d parameters loaded"
                         % (len(names), len(list(model.parameters()))))

    model.train()  # dropout is 0; train() keeps the same code path as the timed steps
    source = torch.tensor(g["source.ids"])
    target_in = torch.tensor(g["target_in.ids"])
    target_out = torch.tensor(g["target_out.ids"])
    logits = model(source, target_in)
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target_out.reshape(-1), ignore_index=c["pad_id"],
        label_smoothing=float(g["loss.label_smoothing"]), reduction="sum")
    loss.backward()
    valid = (target_in != c["pad_id"])[..., None]  # golden logits are zero at PAD rows
    logits_error = float(((logits.detach() - torch.tensor(g["decoder.logits"])) * valid).abs().max())
    expected = float(g["loss.sum"])
    worst = 0.0
    for parameter, xf_names in names.items():
        reference = torch.cat([torch.tensor(g["grad." + n]) for n in xf_names])
        scale = float(reference.abs().max()) or 1.0
        worst = max(worst, float((parameter.grad - reference).abs().max()) / scale)
    torch.set_default_dtype(torch.float32)
    print("golden %s: logits max |error| %.2e; loss %.12g, reference %.12g; worst gradient "
          "error %.2e of the tensor's max" % (case, logits_error, loss.item(), expected, worst),
          file=sys.stderr)
    if abs(loss.item() - expected) > 1e-9 * abs(expected) or worst > 1e-9:
        raise SystemExit("golden check failed: the PyTorch model is not xf's model")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    data = os.environ.get("XF_DATA") or os.path.join(repo, "data", "enfr")
    p.add_argument("--train", default=os.path.join(data, "train.tsv"),
                   help="TSV pairs (default: $XF_DATA/train.tsv, XF_DATA defaulting to data/enfr)")
    p.add_argument("--pairs", type=int, default=40000, help="pairs sampled from --train")
    p.add_argument("--spm", help="SentencePiece model (default: train one here)")
    p.add_argument("--spm-lines", type=int, default=40000)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--norm", choices=["post", "pre"], default="post")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--max-positions", type=int, default=256)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="bf16: forward and loss under torch.autocast('cpu', bfloat16) (matrix "
                        "products in bf16, f32 master weights), as a PyTorch user would try it")
    p.add_argument("--json", action="store_true")
    p.add_argument("--check-golden", action="store_true",
                   help="only check the model against tests/reference/golden (float64) and exit")
    args = p.parse_args()

    import torch
    if args.check_golden:
        for case in ("post_shared",):
            check_against_golden(torch, case)
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    pairs = load_pairs(args.train, args.pairs, rng)
    if args.spm:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=args.spm)
    else:
        sentences = [side for pair in pairs[:args.spm_lines] for side in pair]
        sp = train_sentencepiece(sentences, args.vocab)
    vocab = sp.get_piece_size()
    if (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) != (0, 1, 2, 3):
        raise SystemExit("the SentencePiece model must have pad 0, unk 1, bos 2, eos 3")
    limit = args.max_positions - 1
    tokenized = [(s, t) for s, t in ((sp.encode(a), sp.encode(b)) for a, b in pairs)
                 if 0 < len(s) <= limit and 0 < len(t) <= limit]
    lengths = [(len(s) + 1, len(t) + 1) for s, t in tokenized]
    batches = plan_batches(lengths, args.batch_tokens, rng)
    needed = args.warmup_steps + args.steps
    if len(batches) < needed:
        raise SystemExit("only %d batches; sample more --pairs" % len(batches))

    def make_batch(indices):
        B = len(indices)
        S = max(lengths[i][0] for i in indices)
        T = max(lengths[i][1] for i in indices)
        source = torch.zeros(B, S, dtype=torch.long)
        target_in = torch.zeros(B, T, dtype=torch.long)
        target_out = torch.zeros(B, T, dtype=torch.long)
        for row, i in enumerate(indices):
            s, t = tokenized[i]
            source[row, :len(s) + 1] = torch.tensor(s + [3])
            target_in[row, :len(t) + 1] = torch.tensor([2] + t)
            target_out[row, :len(t) + 1] = torch.tensor(t + [3])
        tokens = sum(lengths[i][0] + lengths[i][1] for i in indices)
        return source, target_in, target_out, tokens

    model = build_model(torch, args, vocab)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warmup = 4000
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: args.d_model ** -0.5 * min((step + 1) ** -0.5,
                                                           (step + 1) * warmup ** -1.5))
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=args.label_smoothing,
                                        reduction="sum")

    timed_tokens, timed_seconds, timed_cpu, step_seconds, losses = 0, 0.0, 0.0, [], []
    for step in range(needed):
        # Batch assembly is inside the timed step, as it is in xf-train's interval.
        t0, c0 = time.perf_counter(), time.process_time()
        source, target_in, target_out, tokens = make_batch(batches[step])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            logits = model(source, target_in)
            scored = int((target_out != 0).sum())
            loss = loss_fn(logits.reshape(-1, vocab).float(), target_out.reshape(-1)) / scored
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        seconds = time.perf_counter() - t0
        cpu_seconds = time.process_time() - c0
        losses.append(loss.item())
        if step >= args.warmup_steps:
            timed_tokens += tokens
            timed_seconds += seconds
            timed_cpu += cpu_seconds
            step_seconds.append(seconds)

    parameters = sum(p.numel() for p in model.parameters())
    figures = {
        "engine": "pytorch",
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "autocast": args.autocast,
        "parameters": parameters,
        "vocab": vocab,
        "d_model": args.d_model,
        "norm": args.norm,
        "layers": args.layers,
        "heads": args.heads,
        "d_ff": args.d_ff,
        "batch_tokens": args.batch_tokens,
        "timed_steps": args.steps,
        "timed_tokens": timed_tokens,
        "timed_seconds": timed_seconds,
        "tokens_per_s": timed_tokens / timed_seconds,
        # CPU seconds of all threads over wall seconds in the timed steps: near --threads when
        # the process had its cores to itself.
        "timed_cpu_share": timed_cpu / timed_seconds,
        "step_ms_median": 1000.0 * float(np.median(step_seconds)),
        "mean_rows_per_batch": float(np.mean([len(batches[s]) for s in range(needed)])),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    else:
        for key in sorted(figures):
            print("%-20s %s" % (key, figures[key]))


if __name__ == "__main__":
    main()
