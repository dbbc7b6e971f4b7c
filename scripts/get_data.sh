#!/usr/bin/env bash
# Writes the English-French pairs xf trains on: OUT_DIR/{train,dev,test}.tsv, English<TAB>French.
#
#   scripts/get_data.sh [OUT_DIR]                 # download the Tatoeba/Anki fra-eng export, split it
#                                                 # (kept as OUT_DIR/fra-eng.zip for --from)
#   scripts/get_data.sh --from FILE [OUT_DIR]     # split a local copy instead (no network)
#   scripts/get_data.sh --strict ...              # stop at the first bad row
#
# OUT_DIR defaults to $XF_DATA, else data/enfr in the repository (git-ignored). FILE is the
# manythings.org fra-eng.zip or its fra.txt (English<TAB>French[<TAB>attribution]), or the Hugging
# Face data set PaulineSanchez/Translation_words_and_sentences_english_french exported as CSV
# (header "English words/sentences,French words/sentences"). The split: sha256 of the English side
# mod 1000, 0-11 dev, 12-23 test, the rest train, so no English sentence is in two splits. Bad rows
# (no tab, an empty side, invalid UTF-8) are reported, counted and skipped. Counts go to stdout.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/get_data.py" "$@"
