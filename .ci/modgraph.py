#!/usr/bin/env python3
"""The crate's module graph from its `use crate::`/`super::` paths (comments and test modules
left out); exits 1 if two modules depend on each other through any cycle. Submodules of `sys`
and `sim` share their parent's helpers and count as their parent."""
import glob, os, re, sys

root = os.path.join(os.path.dirname(__file__), "..", "src")
mods = {}
for p in glob.glob(root + "/**/*.rs", recursive=True):
    parts = os.path.relpath(p, root)[:-3].split("/")
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts[0] in ("sys", "sim"):
        parts = parts[:1]
    mods.setdefault("::".join(parts), []).append(p)
graph = {}
for m, paths in mods.items():
    deps = set()
    for p in paths:
        s = open(p).read()
        s = "\n".join(l for l in s.split("\n") if not l.lstrip().startswith("//"))
        s = s.split("#[cfg(test)]\nmod tests", 1)[0]
        for ref in re.findall(r"crate::([a-z_]+(?:::[a-z_]+)?)", s):
            whole, first = ref, ref.split("::")[0]
            dep = whole if whole in mods else first
            if dep in mods and dep != m and dep != "lib":
                deps.add(dep)
    graph[m] = deps

def reach(a):
    seen, todo = set(), [a]
    while todo:
        for d in graph.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen

cycles = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in reach(b)})
for m in sorted(graph):
    if m != "lib":
        print(f"{m:18} <- {', '.join(sorted(graph[m]))}")
if cycles:
    print("cycles:", ", ".join(f"{a} <-> {b}" for a, b in cycles))
    sys.exit(1)
print("no cycles")
