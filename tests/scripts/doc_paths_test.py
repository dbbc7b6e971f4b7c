#!/usr/bin/env python3
"""Every file and function a doc names exists: in each tracked Markdown file, the targets of its
relative links, the functions it writes in backticks (`writer_of_parameters()`, `Ops::top_k()`:
the name must be an identifier of the checkout's code) and the repository paths it writes in
backticks (`kernels_cpu/src/matmul_cpu.cc`, `xf/translator.h`,
`train_log.h`) must be files or folders of the checkout. A path is looked up from the repository's
root, from the doc's folder, under every include/ folder (headers by their include path) and, for a
bare file name, anywhere in the checkout. Paths with wildcards or placeholders (`step-*/`,
`src/<family>_cpu.cc`), build outputs (`build/...`) and absolute paths are not checked.

Usage: doc_paths_test.py SOURCE_DIR   (exit 77, skipped, when SOURCE_DIR is not a git checkout)
"""
import os
import re
import subprocess
import sys

source = sys.argv[1]
listed = subprocess.run(["git", "-C", source, "ls-files"], capture_output=True, text=True)
if listed.returncode != 0:
    print("git, or a git checkout, is missing: skipped")
    sys.exit(77)
files = [f for f in listed.stdout.splitlines() if os.path.exists(os.path.join(source, f))]
existing = set(files)
for f in files:  # every folder of a tracked file
    parts = f.split("/")
    for i in range(1, len(parts)):
        existing.add("/".join(parts[:i]))
basenames = {os.path.basename(f) for f in files}
include_roots = sorted({f[: f.index("/include/") + len("/include/")] for f in files if "/include/" in f})

CODE_EXTENSIONS = r"(cc|h|cu|cuh|py|sh|md|fbs|toml|cmake|proto|in)"
path_in_backticks = re.compile(r"`([A-Za-z0-9_.\-/]+)`")
link = re.compile(r"\]\(([^)\s]+)\)")
looks_like_path = re.compile(r"^[A-Za-z0-9_.\-/]+\.(%s)$|^[A-Za-z0-9_\-]+(/[A-Za-z0-9_.\-]+)+/?$" % CODE_EXTENSIONS)
top_folders = {f.split("/")[0] for f in files if "/" in f}
function_in_backticks = re.compile(r"`(?:[A-Za-z_][A-Za-z0-9_]*::)*([A-Za-z_][A-Za-z0-9_]*)\(\)`")
identifiers = set()
for f in files:
    if f.endswith((".cc", ".h", ".cu", ".cuh", ".py", ".sh", ".fbs", ".txt", ".cmake", ".toml")):
        with open(os.path.join(source, f), encoding="utf-8", errors="replace") as handle:
            identifiers.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", handle.read()))
# Headers of other software that the docs name by their include name.
OTHER_SOFTWARE = {"nccl.h", "cuda_fp16.h", "cuda_runtime.h", "cublas_v2.h", "dnnl.hpp", "mpi.h"}


def found(name, doc_dir):
    name = name.rstrip("/")
    candidates = [name, os.path.normpath(os.path.join(doc_dir, name))]
    candidates += [root + name for root in include_roots]
    if any(c in existing for c in candidates):
        return True
    return "/" not in name and name in basenames


missing = []
for doc in (f for f in files if f.endswith(".md")):
    doc_dir = os.path.dirname(doc)
    with open(os.path.join(source, doc), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            for target in link.findall(line):
                if re.match(r"^[a-z]+:|^#|^/", target):
                    continue
                path = target.split("#")[0]
                if path and os.path.normpath(os.path.join(doc_dir, path)) not in existing:
                    missing.append(f"{doc}:{number}: link to {target}")
            for name in function_in_backticks.findall(line):
                if name not in identifiers:
                    missing.append(f"{doc}:{number}: `{name}()`")
            for name in path_in_backticks.findall(line):
                if (not looks_like_path.match(name) or name.startswith(("build", "/", ".."))
                        or name in OTHER_SOFTWARE):
                    continue
                # A slashed name must start at a folder of the checkout, a header's include path
                # (xf/...) or the doc's own folder; others (a URL's path, a Python module) are not
                # the checkout's.
                first = name.split("/")[0]
                if "/" in name and first not in top_folders and first != "xf" and not os.path.exists(
                        os.path.join(source, doc_dir, first)):
                    continue
                if not found(name, doc_dir):
                    missing.append(f"{doc}:{number}: `{name}`")
if missing:
    print("docs name files or functions that do not exist:")
    print("\n".join(missing))
    sys.exit(1)
print("every file and function the docs name exists")
