#!/usr/bin/env python3
"""Makes a Marian student of Firefox Translations' (Bergamot's) tiny11 shape, for
compare_marian_student.sh.

    make_student_marian.py --data DIR --out DIR [--vocab 32000] [--lines 300000] [--updates 1]

DIR/train.tsv (English TAB French) teaches one joint SentencePiece model of --vocab pieces (BPE;
Marian's ids: </s> 0, <unk> 1, no <s>/<pad>), vocab.enfr.spm, as Bergamot's vocab.enfr.spm. Marian
itself (pymarian.Trainer) then builds the student: a 6-layer encoder (d_model 256, 8 heads, FFN
1536, relu, post-norm), a 2-layer SSRU decoder (--transformer-decoder-autoreg rnn --dec-cell ssru),
all embeddings tied: Bergamot's tiny11. --updates 1 at learning rate 0 writes its initial (random)
weights; more updates train it (learning rate 3e-4) on the raw sentences. Marian's converter
(`python -m pymarian convert`, i.e. marian-conv) then writes what Bergamot ships: the intgemm8
model (model.intgemm8.bin) and the binary shortlist (lex.50.50.s2t.bin) from a text one (lex.s2t:
IBM model 1 over 20,000 training pairs' pieces, the 50 most probable targets of each source
piece; Bergamot's come from fast_align, not on PyPI). An existing complete folder is kept.

Needs pymarian, sentencepiece (a virtual environment outside the repository). Nothing of it is
committed: the model is made on demand.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from make_base_marian import arguments, kept, read_pairs, train_joint_vocabulary  # noqa: E402
from make_marian_fixtures import ibm1_lexicon  # noqa: E402 (one IBM model 1 for fixtures and benchmarks)

FILES = ("model.npz", "model.intgemm8.bin", "vocab.enfr.spm", "lex.s2t", "lex.50.50.s2t.bin", "decoder.yml")


def main():
    p = arguments(__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=1, help="1: random weights (learning rate 0)")
    a = p.parse_args()
    if kept(a.out, FILES, "make_student_marian"):
        return
    import pymarian
    import sentencepiece as spm

    os.makedirs(a.out, exist_ok=True)
    pairs = read_pairs(os.path.join(a.data, "train.tsv"), len(open(os.path.join(a.data, "train.tsv")).readlines()))
    train_joint_vocabulary(pairs[: a.lines], os.path.join(a.out, "vocab.enfr"), a.vocab, a.lines)
    vocab = os.path.join(a.out, "vocab.enfr.spm")
    os.replace(os.path.join(a.out, "vocab.enfr.model"), vocab)
    os.remove(os.path.join(a.out, "vocab.enfr.vocab"))

    train = {"en": os.path.join(a.out, "train.en"), "fr": os.path.join(a.out, "train.fr")}
    for side, column in (("en", 0), ("fr", 1)):
        with open(train[side], "w", encoding="utf-8") as f:
            f.writelines(pair[column] + "\n" for pair in pairs[: max(256, 64 * a.updates)])
    pymarian.Trainer(
        type="transformer", model=os.path.join(a.out, "model.npz"),
        train_sets=[train["en"], train["fr"]], vocabs=[vocab, vocab],
        dim_emb=256, transformer_dim_ffn=1536, enc_depth=6, dec_depth=2, transformer_heads=8,
        transformer_decoder_autoreg="rnn", dec_cell="ssru", transformer_ffn_activation="relu",
        transformer_postprocess="dan", tied_embeddings_all=True, after_batches=a.updates,
        mini_batch=64, learn_rate=0.0 if a.updates == 1 else 3e-4, cpu_threads=2,
        save_freq=a.updates, seed=38, quiet=True).train()
    for path in train.values():
        os.remove(path)
    for name in os.listdir(a.out):  # the trainer's optimizer state and progress files
        if name.startswith(("model.npz.", "model.iter")):
            os.remove(os.path.join(a.out, name))

    sp = spm.SentencePieceProcessor(model_file=vocab)
    lexicon = ibm1_lexicon([" ".join(sp.encode(s, out_type=str)) for s, _ in pairs[:20000]],
                           [" ".join(sp.encode(t, out_type=str)) for _, t in pairs[:20000]])
    lex = os.path.join(a.out, "lex.s2t")
    with open(lex, "w", encoding="utf-8") as f:
        for source_piece in sorted(lexicon):
            best = sorted(lexicon[source_piece].items(), key=lambda kv: (-kv[1], kv[0]))[:50]
            f.writelines("%s %s %.6f\n" % (t, source_piece, prob) for t, prob in best)
    convert = [sys.executable, "-m", "pymarian", "convert"]
    subprocess.run(convert + ["--shortlist", lex, "50", "50", "0", "--dump-shortlist",
                              os.path.join(a.out, "lex.50.50.s2t.bin"), "--vocabs", vocab, vocab],
                   check=True, capture_output=True)
    subprocess.run(convert + ["-f", os.path.join(a.out, "model.npz"), "-t",
                              os.path.join(a.out, "model.intgemm8.bin"), "--gemm-type", "intgemm8"],
                   check=True, capture_output=True)
    with open(os.path.join(a.out, "decoder.yml"), "w", encoding="utf-8") as f:
        f.write("relative-paths: true\nmodels:\n  - model.npz\nvocabs:\n  - vocab.enfr.spm\n  - vocab.enfr.spm\n"
                "shortlist:\n  - lex.50.50.s2t.bin\n  - false\n")
    print("make_student_marian: wrote %s" % a.out)


if __name__ == "__main__":
    main()
