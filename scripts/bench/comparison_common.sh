# Sourced by the engine comparisons (compare_marian.sh, compare_marian_student.sh), after they
# set `here` (their folder).
#
# comparison_setup PREFIX "MODULE..." ARGS...: their common start: repo; work, the run folder
# (ARGS' one argument, else a new /tmp/PREFIX-XXXXXX; never inside the repository), made and
# absolute; python, xf_bin and data from PYTHON, XF_BIN and XF_DATA; and checks that xf-run and
# xf-convert are in xf_bin and that python imports each MODULE.
comparison_setup() {
  local prefix=$1 modules=$2
  shift 2
  repo=$(cd "$here/../.." && pwd)
  [[ $# -le 1 ]] || { echo "usage: $0 [RUN_DIR]   (see the comments at the top)" >&2; exit 2; }
  work=${1:-$(mktemp -d "/tmp/$prefix-XXXXXX")}
  python=${PYTHON:-python3}
  xf_bin=${XF_BIN:-$repo/build/bin}
  data=${XF_DATA:?set XF_DATA to the folder with train.tsv and test.tsv}
  case $work in "$repo"/*) echo "$0: RUN_DIR must be outside the repository" >&2; exit 2 ;; esac
  [[ -x $xf_bin/xf-run && -x $xf_bin/xf-convert ]] || { echo "$0: xf-run/xf-convert not in $xf_bin (set XF_BIN)" >&2; exit 1; }
  "$python" -c "import ${modules// /, }" 2>/dev/null ||
    { echo "$0: $python lacks one of: $modules (set PYTHON)" >&2; exit 1; }
  mkdir -p "$work"
  work=$(cd "$work" && pwd)
}
#
# timed_run WORK OUT FIELD... -- COMMAND...: runs COMMAND once under /usr/bin/time, its stdout to
# OUT, its stderr appended to WORK/stderr.log, and appends to WORK/results.tsv one line: the
# FIELDs, the 1-minute load average just before the run, wall s, cpu s (user + sys), peak RSS MB
# and OUT. A failed command stops the script with the end of its stderr.
timed_run() {
  local work=$1 out=$2 fields=() load wall user sys rss_kb
  shift 2
  while [[ $1 != -- ]]; do fields+=("$1"); shift; done
  shift
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "== ${fields[*]}: $*" >> "$work/stderr.log"
  /usr/bin/time -f '%e %U %S %M' -o "$work/time.txt" "$@" > "$out" 2>> "$work/stderr.log" ||
    { tail -5 "$work/stderr.log" >&2; exit 1; }
  read -r wall user sys rss_kb < "$work/time.txt"
  printf '%s\t' "${fields[@]}" >> "$work/results.tsv"
  printf '%s\t%s\t%s\t%s\t%s\n' "$load" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')" \
    "$(awk -v k="$rss_kb" 'BEGIN { printf "%.0f", k / 1024 }')" "$out" >> "$work/results.tsv"
}
#
# marian_len_b FACTOR PIECES: the xf-run --max-len-b that, with --max-len-a FACTOR, gives sources of
# PIECES pieces Marian's --max-length-factor FACTOR limit (Marian counts the source's EOS):
# floor(FACTOR x (PIECES + 1)) - floor(FACTOR x PIECES).
marian_len_b() {
  awk -v f="$1" -v p="$2" 'BEGIN { print int(f * (p + 1)) - int(f * p) }'
}
