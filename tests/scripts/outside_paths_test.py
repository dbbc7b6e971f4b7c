#!/usr/bin/env python3
"""The repository stands alone: no tracked file outside .ci/ (the bundled model's metadata and
the logs under benchmarks/ included) names the team's folder beside the checkout or a folder of
the team's machines. Data come from $XF_DATA; the scripts that write committed logs name the
checkout's files relative to it and their work folders by a placeholder (WORK_DIR, OUT).

Usage: outside_paths_test.py SOURCE_DIR   (exit 77, skipped, when SOURCE_DIR is not a git checkout)
"""
import subprocess
import sys

source = sys.argv[1]
try:
    checkout = subprocess.run(["git", "-C", source, "rev-parse"], capture_output=True).returncode == 0
except FileNotFoundError:
    checkout = False
if not checkout:
    print("git, or a git checkout, is missing: skipped")
    sys.exit(77)
# Spelled in parts, so that this file does not match itself.
pattern = r"\.\./" + "shared" + "|/" + "work/"
found = subprocess.run(
    ["git", "-C", source, "grep", "-n", "-E", pattern, "--", ".", ":!.ci"],
    capture_output=True, text=True)
if found.returncode == 0:
    print("paths outside the repository (use $XF_DATA or a path given on the command line):")
    print(found.stdout, end="")
    sys.exit(1)
if found.returncode != 1:
    print(found.stderr, end="")
    sys.exit(2)
print("no path outside the repository in tracked files")
