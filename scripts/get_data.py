#!/usr/bin/env python3
"""English-French pairs for xf: fetch the Tatoeba/Anki export (or read a local export) and split it.

Run through scripts/get_data.sh, which documents the command line. Standard library only.

The split is the one the bundled model was trained with: by English sentence, bucket =
sha256(English side as UTF-8) read as a big-endian integer, mod 1000; buckets 0-11 go to dev,
12-23 to test, the rest to train. So no English sentence is in two splits, and the split of a row
depends on nothing but its English side. Rows keep their input order within each split.
"""

import argparse
import csv
import hashlib
import http.client
import io
import os
import sys
import tempfile
import urllib.request
import zipfile

ANKI_URL = "https://www.manythings.org/anki/fra-eng.zip"
CSV_COLUMNS = ("English words/sentences", "French words/sentences")
SPLITS = ("train", "dev", "test")
SHOWN_BAD_ROWS = 10


class InputError(Exception):
    """Bad input: reported in one line, exit status 1."""


def split_of(english: str) -> str:
    bucket = int(hashlib.sha256(english.encode("utf-8")).hexdigest(), 16) % 1000
    return "dev" if bucket < 12 else "test" if bucket < 24 else "train"


def problem_with(english: str, french: str):
    """Why a pair cannot go into a TSV line, or None."""
    for side, text in (("English", english), ("French", french)):
        if not text.strip():
            return f"empty {side} side"
        if any(0xD800 <= ord(c) <= 0xDFFF for c in text):  # undecodable bytes, surrogateescape'd
            return f"invalid UTF-8 in the {side} side"
        if "\t" in text or "\n" in text or "\r" in text:
            return f"tab or line break inside the {side} side"
    return None


def anki_rows(lines, name):
    """Tatoeba/Anki export: English<TAB>French[<TAB>attribution], one pair a line, no header."""
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip(b"\n").rstrip(b"\r")
        if not line:
            continue
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        fields = line.decode("utf-8", "surrogateescape").split("\t")
        if len(fields) == 1:
            yield name, number, None, None, "no tab"
        elif len(fields) > 3:
            yield name, number, None, None, f"{len(fields)} tab-separated fields (expected 2 or 3)"
        else:
            yield name, number, fields[0], fields[1], None


def csv_rows(text, name):
    """The Hugging Face CSV export: a header naming the two columns, RFC 4180 quoting."""
    reader = csv.reader(text, strict=True)
    header = next(reader, [])
    if header:
        header[0] = header[0].lstrip("\ufeff")
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{name}: the header has no column '{missing[0]}'")
    en, fr = (header.index(c) for c in CSV_COLUMNS)
    while True:
        line = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:  # the reader resumes at the next line
            yield name, line, None, None, f"bad CSV quoting ({error})"
            continue
        if not fields:
            continue
        if len(fields) != len(header):
            yield name, line, None, None, f"{len(fields)} fields (the header has {len(header)})"
        else:
            yield name, line, fields[en], fields[fr], None


def is_hf_csv(first_line: bytes) -> bool:
    return all(c.encode() in first_line for c in CSV_COLUMNS)


def read_export(path):
    """Every row of a local export: (file name, line, English, French, problem or None)."""
    name = os.path.basename(path)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.namelist()
                           if m.endswith(".txt") and not os.path.basename(m).startswith("_")]
                if len(members) != 1:
                    raise InputError(f"{name}: expected one export .txt in the archive, found "
                                     f"{len(members)}")
                with archive.open(members[0]) as member:
                    yield from anki_rows(member, f"{name}:{members[0]}")
            return
        with open(path, "rb") as f:
            first = f.readline()
            f.seek(0)
            if is_hf_csv(first):
                text = io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape", newline="")
                yield from csv_rows(text, name)
            else:
                yield from anki_rows(f, name)
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    except zipfile.BadZipFile as error:
        raise InputError(f"{name}: {error}") from None


def download(url, path):
    print(f"get_data: downloading {url}", file=sys.stderr)
    # manythings.org refuses clients that do not name themselves like a browser.
    request = urllib.request.Request(url, headers={"User-Agent": "Mozilla/5.0 (xf get_data.sh)"})
    partial = path + ".part"
    try:
        with urllib.request.urlopen(request, timeout=60) as response, open(partial, "wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
        os.replace(partial, path)
    except (OSError, http.client.HTTPException) as error:
        if os.path.exists(partial):
            os.remove(partial)
        raise InputError(f"{url}: download failed ({error})") from None


def split_export(path, out_dir, strict):
    rows = {s: [] for s in SPLITS}
    english = {s: set() for s in SPLITS}
    bad = 0
    read = 0
    for name, line, en, fr, problem in read_export(path):
        read += 1
        problem = problem or problem_with(en, fr)
        if problem:
            if strict:
                raise InputError(f"{name}:{line}: {problem}")
            bad += 1
            if bad <= SHOWN_BAD_ROWS:
                print(f"get_data: {name}:{line}: {problem} (skipped)", file=sys.stderr)
            continue
        s = split_of(en)
        rows[s].append(f"{en}\t{fr}\n")
        english[s].add(en)
    if bad > SHOWN_BAD_ROWS:
        print(f"get_data: ... and {bad - SHOWN_BAD_ROWS} more bad rows (skipped)", file=sys.stderr)
    if not any(rows.values()):
        raise InputError(f"{path}: no usable pairs ({read} rows read, {bad} bad)")

    # Write all three next to their final names, then rename: a failed run leaves old files whole.
    os.makedirs(out_dir, exist_ok=True)
    umask = os.umask(0)
    os.umask(umask)
    written = []
    try:
        for s in SPLITS:
            fd, tmp = tempfile.mkstemp(prefix=f".{s}.", suffix=".tmp", dir=out_dir)
            written.append(tmp)
            os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; data files are ordinary files
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.writelines(rows[s])
        for s, tmp in zip(SPLITS, written):
            os.replace(tmp, os.path.join(out_dir, f"{s}.tsv"))
    finally:
        for tmp in written:
            if os.path.exists(tmp):
                os.remove(tmp)

    print(f"{os.path.basename(path)}: {read} rows, {read - bad} pairs kept, {bad} bad rows skipped")
    for s in SPLITS:
        print(f"{os.path.join(out_dir, s + '.tsv')}: {len(rows[s])} pairs, "
              f"{len(english[s])} distinct English sentences")


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    default_out = os.environ.get("XF_DATA") or os.path.join(repo, "data", "enfr")
    parser = argparse.ArgumentParser(
        prog="get_data.sh",
        description="Writes train.tsv, dev.tsv and test.tsv (English<TAB>French) of the "
                    "Tatoeba/Anki English-French pairs into OUT_DIR, split by English sentence.")
    parser.add_argument("out_dir", nargs="?", default=default_out, metavar="OUT_DIR",
                        help="where the three files go (default: $XF_DATA, else data/enfr in "
                             "the repository)")
    parser.add_argument("--from", dest="source", metavar="FILE",
                        help="split this local export instead of downloading: the Anki/Tatoeba "
                             "fra-eng.zip or its fra.txt (English<TAB>French[<TAB>attribution]), "
                             "or the Hugging Face data set as CSV (header 'English "
                             "words/sentences,French words/sentences')")
    parser.add_argument("--strict", action="store_true",
                        help="stop at the first bad row instead of counting and skipping it")
    args = parser.parse_args()
    try:
        source = args.source
        if source is None:
            source = os.path.join(args.out_dir, "fra-eng.zip")
            os.makedirs(args.out_dir, exist_ok=True)
            download(ANKI_URL, source)
        split_export(source, args.out_dir, args.strict)
    except InputError as error:
        print(f"get_data: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"get_data: {error.filename or args.out_dir}: {error.strerror or error}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
