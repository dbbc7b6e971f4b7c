#!/bin/bash
# Issue 39: a student of the interpolated teacher (sha256 9dc5051c...), the bundled student's
# recipe (models/README.md) with --minutes 118; started 2026-11-29 at the end of session 11 so
# that a later session resumes it (run the same command again).
cd RUN
exec nice -n 19 REPO/scripts/train_student.sh --teacher teacher.xfm --train DATA/train.tsv --dev DATA/dev.tsv \
    --test DATA/test.tsv --out run --n-best 4 --threads 2 --minutes 118 --init-layers 0,2,4/1 \
    --target-vocabulary-from DATA/train.tsv --average 4 --top-k 50 --frequent 50 --isa AVX2 \
    --bin REPO/build/bin \
    -- --encoder-layers 3 --decoder-layers 1 --decoder-cell ssru --d-model 256 --heads 4 --d-ff 1024 \
    --norm pre --max-positions 256 --dropout 0.1 --label-smoothing 0.1 --warmup 500 --lr-scale 0.18 \
    --clip-norm 1 --batch-tokens 4000 --max-length 96 --join-probability 0.3 --join-max-pairs 4 \
    --modify-lowercase 0.25 --modify-uppercase 0.05 --modify-titlecase 0.05 \
    --modify-no-final-punctuation 0.25 --modify-typo 0.1 --valid-every 500 --valid-bleu-sentences 0 \
    --save-every 200 --seed 11 --bf16
