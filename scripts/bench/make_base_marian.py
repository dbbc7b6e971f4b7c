#!/usr/bin/env python3
"""Makes a base-size Marian transformer with random weights, for compare_marian.sh.

    make_base_marian.py --data DIR --out DIR [--vocab 32000] [--lines 300000]

DIR/train.tsv (English TAB French) teaches one joint SentencePiece model of --vocab pieces
(BPE: the data is too small for a unigram model of 32k pieces)
(OPUS-MT's layout: </s> 0, <unk> 1, no <s>/<pad>), saved as source.spm and target.spm; vocab.yml
lists its pieces with their SentencePiece ids, so the model's ids are the tokenizer's. Marian
itself (pymarian.Trainer) then builds the model: 6 encoder and 6 decoder layers, d_model 512,
8 heads, FFN 2048, swish (Marian's default), post-norm, all embeddings tied, as the OPUS-MT
base models are; one update at learning rate 0 writes its initial (random) weights. The output
folder holds what OPUS-MT publishes: model.npz, vocab.yml, source.spm, target.spm, decoder.yml.
An existing complete folder is kept (the SentencePiece training takes minutes).

Needs pymarian, sentencepiece (a virtual environment outside the repository; see
compare_marian.sh). Nothing of it is committed: the model is made on demand.
"""
import argparse
import json
import os
import random
import shutil

FILES = ("model.npz", "vocab.yml", "source.spm", "target.spm", "decoder.yml")


def read_pairs(path, count):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[0] and parts[1]:
                pairs.append((parts[0], parts[1]))
    random.Random(26).shuffle(pairs)
    return pairs[:count]


def train_joint_vocabulary(pairs, prefix, size, sample):
    """One SentencePiece BPE model of both sides of PAIRS at PREFIX.model, learnt from SAMPLE of
    their lines, with Marian's ids (</s> 0, <unk> 1, no <pad> or <s>)."""
    import sentencepiece as spm

    text = prefix + ".spm_train.txt"
    with open(text, "w", encoding="utf-8") as f:
        for source, target in pairs:
            f.write(source + "\n" + target + "\n")
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=prefix, vocab_size=size,
        model_type="bpe", character_coverage=1.0, input_sentence_size=sample,
        shuffle_input_sentence=True, pad_id=-1, bos_id=-1, eos_id=0, unk_id=1,
        eos_piece="</s>", unk_piece="<unk>", num_threads=2, minloglevel=2)
    os.remove(text)


def arguments(description):
    """The options of the model makers (this one and make_student_marian.py)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", required=True, help="folder with train.tsv")
    p.add_argument("--out", required=True, help="output folder (outside the repository)")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--lines", type=int, default=300000, help="sentences the SentencePiece model learns from")
    return p


def kept(out, files, maker):
    """Whether `out` already holds every file (then it is kept: SentencePiece takes minutes)."""
    if all(os.path.exists(os.path.join(out, f)) for f in files):
        print("%s: %s exists, kept" % (maker, out))
        return True
    return False


def main():
    a = arguments(__doc__.split("\n")[0]).parse_args()
    if kept(a.out, FILES, "make_base_marian"):
        return
    import pymarian
    import sentencepiece as spm

    os.makedirs(a.out, exist_ok=True)
    pairs = read_pairs(os.path.join(a.data, "train.tsv"), a.lines)
    train_joint_vocabulary(pairs, os.path.join(a.out, "joint"), a.vocab, a.lines)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.out, "joint.model"))
    # Double-quoted YAML keys are JSON strings: every piece is written the same way.
    with open(os.path.join(a.out, "vocab.yml"), "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write("%s: %d\n" % (json.dumps(sp.id_to_piece(i), ensure_ascii=False), i))
    for side in ("source", "target"):
        shutil.copy(os.path.join(a.out, "joint.model"), os.path.join(a.out, side + ".spm"))

    # Marian trains on pieces separated by spaces (OPUS-MT runs spm_encode before it).
    train = {"source": os.path.join(a.out, "train.src"), "target": os.path.join(a.out, "train.trg")}
    for side, column in (("source", 0), ("target", 1)):
        with open(train[side], "w", encoding="utf-8") as f:
            for pair in pairs[:256]:
                f.write(" ".join(sp.encode(pair[column], out_type=str)) + "\n")
    vocab = os.path.join(a.out, "vocab.yml")
    pymarian.Trainer(
        type="transformer", model=os.path.join(a.out, "model.npz"),
        train_sets=[train["source"], train["target"]], vocabs=[vocab, vocab],
        dim_emb=512, transformer_dim_ffn=2048, enc_depth=6, dec_depth=6, transformer_heads=8,
        tied_embeddings_all=True, after_batches=1, mini_batch=8, learn_rate=0.0, cpu_threads=2,
        save_freq=1, seed=26, no_shuffle=True, quiet=True).train()
    for side in train.values():
        os.remove(side)
    for name in os.listdir(a.out):  # the trainer's optimizer state and progress files
        if name.startswith(("model.npz.", "model.iter")) or name in ("joint.vocab", "joint.model"):
            os.remove(os.path.join(a.out, name))
    with open(os.path.join(a.out, "decoder.yml"), "w", encoding="utf-8") as f:
        f.write("relative-paths: true\nmodels:\n  - model.npz\nvocabs:\n  - vocab.yml\n  - vocab.yml\n")
    print("make_base_marian: wrote %s" % a.out)


if __name__ == "__main__":
    main()
