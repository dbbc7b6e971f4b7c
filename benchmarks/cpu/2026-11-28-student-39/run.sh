#!/usr/bin/env bash
# Issue 39's bundled student, run by train_student.sh. Training: MINUTES=75, then MINUTES=60 (resumed),
# with the binaries of commit fe97361 copied to RUN/bin; the card again: MINUTES=0 BIN=RUN/bin2
# (d23835c) and MINUTES=0 BIN=RUN/bin3 (a82b82c, the final card).
cd REPO
exec nice -n 19 scripts/train_student.sh --teacher models/enfr.xfm --train DATA/train.tsv \
  --dev DATA/dev.tsv --test DATA/test.tsv --out RUN \
  --bin ${BIN:-RUN/bin} --n-best 4 --threads 2 --minutes ${MINUTES:-75} --init-layers 0,2,4/1 \
  --target-vocabulary-from DATA/train.tsv --average 4 --top-k 50 --frequent 50 --isa AVX2 \
  -- --encoder-layers 3 --decoder-layers 1 --decoder-cell ssru --d-model 256 --heads 4 --d-ff 1024 --norm pre \
  --max-positions 256 --dropout 0.1 --label-smoothing 0.1 --warmup 500 --lr-scale 0.18 --clip-norm 1 \
  --batch-tokens 4000 --max-length 96 --join-probability 0.3 --join-max-pairs 4 --modify-lowercase 0.25 \
  --modify-uppercase 0.05 --modify-titlecase 0.05 --modify-no-final-punctuation 0.25 --modify-typo 0.1 \
  --valid-every 500 --valid-bleu-sentences 0 --save-every 200 --seed 11 --bf16
