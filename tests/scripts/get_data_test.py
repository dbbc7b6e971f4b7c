#!/usr/bin/env python3
"""scripts/get_data.sh --from: both export formats, the split rule, bad rows, atomic output.

Usage: get_data_test.py PATH/TO/get_data.sh   (ctest passes it; no network is used)
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

GET_DATA = None  # set from argv

# The bundled model's data put these in dev, test and train (sha256 of the English side mod 1000).
KNOWN_SPLITS = {"Cheers!": "dev", "Stop!": "test", "Go.": "train"}


def synthetic_pairs():
    """English-French pairs, several French sides for some English ones, commas and quotes."""
    pairs = [("Cheers!", "Santé !"), ("Cheers!", "À votre santé !"), ("Stop!", "Arrête !"),
             ("Go.", "Va !")]
    for i in range(400):
        english = f"Sentence {i}, with a comma." if i % 7 == 0 else f"Sentence {i}."
        if i % 11 == 0:
            english = f'He said "{i}".'
        pairs.append((english, f"Phrase {i}."))
        if i % 3 == 0:
            pairs.append((english, f"Une autre phrase, « {i} »."))
    return pairs


def rule(english):
    bucket = int(hashlib.sha256(english.encode()).hexdigest(), 16) % 1000
    return "dev" if bucket < 12 else "test" if bucket < 24 else "train"


def csv_field(text):
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def write_anki(path, pairs, extra_lines=()):
    with open(path, "wb") as f:
        for n, (en, fr) in enumerate(pairs):
            f.write(f"{en}\t{fr}\tCC-BY 2.0 (France) Attribution: tatoeba.org #{n}\n".encode())
        for line in extra_lines:
            f.write(line)


def write_hf_csv(path, pairs, extra_lines=()):
    with open(path, "wb") as f:
        f.write(b"English words/sentences,French words/sentences\r\n")
        for en, fr in pairs:
            f.write(f"{csv_field(en)},{csv_field(fr)}\r\n".encode())
        for line in extra_lines:
            f.write(line)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


class GetDataTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="xf-get-data-")
        self.dir = self.tmp.name
        self.pairs = synthetic_pairs()

    def tearDown(self):
        self.tmp.cleanup()

    def run_get_data(self, *args, expect=0):
        result = subprocess.run([GET_DATA, *args], capture_output=True, text=True, timeout=180)
        self.assertEqual(result.returncode, expect, result.stderr)
        return result

    def split(self, source, name):
        out = os.path.join(self.dir, name)
        result = self.run_get_data("--from", source, out)
        return out, result, {s: read_lines(os.path.join(out, f"{s}.tsv"))
                             for s in ("train", "dev", "test")}

    def check_split(self, splits, stdout):
        written = [line for s in splits for line in splits[s]]
        self.assertEqual(sorted(written), sorted(f"{en}\t{fr}" for en, fr in self.pairs))
        seen = {}
        for s, lines in splits.items():
            for line in lines:
                english = line.split("\t")[0]
                self.assertEqual(rule(english), s, line)
                self.assertEqual(seen.setdefault(english, s), s, f"{english!r} in two splits")
            # Input order is kept within a split.
            self.assertEqual(lines, [f"{en}\t{fr}" for en, fr in self.pairs if rule(en) == s])
            distinct = len({line.split("\t")[0] for line in lines})
            self.assertIn(f"{s}.tsv: {len(lines)} pairs, {distinct} distinct English", stdout)
        for english, s in KNOWN_SPLITS.items():
            self.assertEqual(seen[english], s, english)
        for s in splits:
            self.assertTrue(splits[s], f"the synthetic file should fill {s}")

    def test_anki_and_hf_csv_give_the_same_split(self):
        anki = os.path.join(self.dir, "fra.txt")
        hf = os.path.join(self.dir, "hf.csv")
        write_anki(anki, self.pairs)
        write_hf_csv(hf, self.pairs)
        _, anki_result, anki_splits = self.split(anki, "out-anki")
        _, hf_result, hf_splits = self.split(hf, "out-hf")
        self.check_split(anki_splits, anki_result.stdout)
        self.assertEqual(anki_splits, hf_splits)
        self.assertIn(f"{len(self.pairs)} rows, {len(self.pairs)} pairs kept, 0 bad rows",
                      hf_result.stdout)

    def test_deterministic_and_atomic(self):
        anki = os.path.join(self.dir, "fra.txt")
        write_anki(anki, self.pairs)
        out, _, first = self.split(anki, "out")
        _, _, second = self.split(anki, "out")
        self.assertEqual(first, second)
        self.assertEqual(sorted(os.listdir(out)), ["dev.tsv", "test.tsv", "train.tsv"])
        umask = os.umask(0)
        os.umask(umask)
        for name in os.listdir(out):  # ordinary files, not mkstemp's private 0600
            self.assertEqual(os.stat(os.path.join(out, name)).st_mode & 0o777, 0o666 & ~umask)

    def test_anki_zip(self):
        archive = os.path.join(self.dir, "fra-eng.zip")
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr("_about.txt", "About this file\tnot data\n")
            z.writestr("fra.txt", "".join(f"{en}\t{fr}\tattribution\n" for en, fr in self.pairs))
        _, result, splits = self.split(archive, "out")
        self.check_split(splits, result.stdout)

    def test_bad_rows_are_counted_and_skipped(self):
        anki = os.path.join(self.dir, "fra.txt")
        hf = os.path.join(self.dir, "hf.csv")
        write_anki(anki, self.pairs, [b"no tab here\n", b"Empty French.\t\tattribution\n",
                                      b"Bad \xff bytes.\tMauvais.\tattribution\n",
                                      b"a\tb\tc\td\n"])
        write_hf_csv(hf, self.pairs, [b",Vide.\r\n", b"Bad \xc3 bytes.,Mauvais.\r\n",
                                      b"one field only\r\n"])
        n = len(self.pairs)
        for source, bad, first_bad_line in ((anki, 4, n + 1), (hf, 3, n + 2)):
            with self.subTest(source=os.path.basename(source)):
                _, result, splits = self.split(source, "out-" + os.path.basename(source))
                self.check_split(splits, result.stdout)
                self.assertIn(f"{n + bad} rows, {n} pairs kept, {bad} bad rows skipped",
                              result.stdout)
                self.assertEqual(result.stderr.count("(skipped)"), bad, result.stderr)
                self.assertIn(f"{os.path.basename(source)}:{first_bad_line}:", result.stderr)
        for text in ("no tab", "empty French side", "invalid UTF-8", "4 tab-separated fields"):
            self.assertIn(text, self.run_get_data("--from", anki, self.dir + "/x").stderr)

    def test_strict_stops_at_the_first_bad_row_and_keeps_the_old_files(self):
        anki = os.path.join(self.dir, "fra.txt")
        write_anki(anki, self.pairs)
        out, _, before = self.split(anki, "out")
        write_anki(anki, self.pairs[:5], [b"no tab here\n"] + [b"Go.\tVa !\n"])
        result = self.run_get_data("--strict", "--from", anki, out, expect=1)
        self.assertEqual(result.stderr.strip(), "get_data: fra.txt:6: no tab")
        self.assertEqual(sorted(os.listdir(out)), ["dev.tsv", "test.tsv", "train.tsv"])
        self.assertEqual(read_lines(os.path.join(out, "train.tsv")), before["train"])

    def test_unusable_input_is_one_line_and_status_1(self):
        missing = os.path.join(self.dir, "missing.tsv")
        result = self.run_get_data("--from", missing, self.dir + "/out", expect=1)
        self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
        self.assertIn("missing.tsv", result.stderr)
        no_pairs = os.path.join(self.dir, "words.txt")
        with open(no_pairs, "w") as f:
            f.write("just\nwords\n")
        result = self.run_get_data("--from", no_pairs, self.dir + "/out", expect=1)
        self.assertIn("no usable pairs (2 rows read, 2 bad)", result.stderr)
        self.assertFalse(os.path.exists(self.dir + "/out"))


if __name__ == "__main__":
    GET_DATA = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
