# Sourced by the training benchmarks (compare_train_speed.sh, train_ranks_speed.sh): their one
# argument, the training file (default $XF_DATA/train.tsv), checked, and the programs' folder.
# Sets: here (scripts/bench), repo, train, xf_bin.
[[ $# -le 1 ]] || { echo "usage: $0 [TRAIN.tsv]" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
train=${1:-${XF_DATA:-$repo/data/enfr}/train.tsv}
[[ -s $train ]] || { echo "$0: $train: no such training file, or empty (scripts/get_data.sh)" >&2; exit 1; }
xf_bin=${XF_BIN:-$repo/build/bin}
