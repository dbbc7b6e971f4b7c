#!/usr/bin/env python3
"""The trainer's includes go downwards only: no include from a lower part of xf_trainer back up to
a higher one. A part is a header of trainer/include/xf/trainer with the sources of the same name
in trainer/src (train_setup.h and train_setup.cc are one part). The test fails when two parts
include each other, directly or through others (a cycle), or when a part other than the loop
(train_loop) includes the setup (train_setup.h), whose TrainingRun the loop alone hands out
field by field; nothing in the trainer includes the loop. On success it prints the parts by
layer, the highest first, each with the parts it includes.

Usage: include_layers_test.py SOURCE_DIR
"""
import os
import re
import sys

source = sys.argv[1]
include_dir = os.path.join(source, "trainer/include/xf/trainer")
source_dir = os.path.join(source, "trainer/src")
files = [os.path.join(include_dir, f) for f in os.listdir(include_dir) if f.endswith(".h")]
for root, _, names in os.walk(source_dir):
    files += [os.path.join(root, f) for f in names if f.endswith((".cc", ".h"))]

includes = {}  # part -> the parts it includes
for path in files:
    part = os.path.splitext(os.path.basename(path))[0]
    includes.setdefault(part, set())
    with open(path, encoding="utf-8") as f:
        for m in re.finditer(r'^#include "xf/trainer/(\w+)\.h"', f.read(), re.M):
            if m.group(1) != part:
                includes[part].add(m.group(1))
                includes.setdefault(m.group(1), set())

# Strongly connected components (Tarjan, iterative): each holds parts that include each other.
index, low, on_stack, stack, components = {}, {}, set(), [], []
for start in sorted(includes):
    if start in index:
        continue
    work = [(start, iter(sorted(includes[start])))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
        part, children = work[-1]
        child = next(children, None)
        if child is not None:
            if child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(includes[child]))))
            elif child in on_stack:
                low[part] = min(low[part], index[child])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[part])
        if low[part] == index[part]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == part:
                    break
            components.append(sorted(component))

failures = []
for component in components:
    if len(component) > 1:
        edges = [f"{a} -> {b}" for a in component for b in sorted(includes[a]) if b in component]
        failures.append("parts that include each other: " + ", ".join(edges))
for part in sorted(includes):
    if "train_setup" in includes[part] and part != "train_loop":
        failures.append(f"{part} includes train_setup.h (only the loop may: it hands each part "
                        "the fields of TrainingRun that it reads)")
    if "train_loop" in includes[part]:
        failures.append(f"{part} includes train_loop.h (the top of the trainer)")
if failures:
    print("\n".join(failures))
    sys.exit(1)

height = {}
def layer(part):  # the longest include chain below the part
    if part not in height:
        height[part] = 1 + max((layer(p) for p in includes[part]), default=-1)
    return height[part]
for h in sorted({layer(p) for p in includes}, reverse=True):
    row = [p + (" -> " + ", ".join(sorted(includes[p])) if includes[p] else "")
           for p in sorted(includes) if height[p] == h]
    print(f"layer {h}: " + "; ".join(row))
