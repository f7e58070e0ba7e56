#!/usr/bin/env python3
"""The size limits of the library's code: no file of the workspace over 600 lines, no function
outside tests over 60 lines; and, for the record, the library's code lines (src/, not its tests
or the simulation; blank and comment lines not counted).

    python3 .ci/size.py           # checks the limits; exits 1 naming what is over
    python3 .ci/size.py --report  # also prints the numbers, longest functions first
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILE_LIMIT = 600
FN_LIMIT = 60
# A function's head: at the start of a line or after a `{` on it (`impl X { fn f() {`), after
# any attributes (`#[inline] fn`), with any visibility (`pub(in crate::a)`) and qualifiers.
FN = re.compile(r"(?:^|\{)\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?"
                r"(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def code(line):
    """The line without its string literals and `//` comment (roughly, for brace counting)."""
    line = re.sub(r'b?"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//", 1)[0]


def functions(path):
    """(name, first line, length) of each function outside `#[cfg(test)]` modules."""
    lines = path.read_text().splitlines()
    out, i, skip_depth, depth = [], 0, None, 0
    pending_test = False
    raw = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if 'r#"' in line or 'r"' in line and not raw:
            pass
        c = code(line)
        if stripped.startswith("#[cfg(test)]") or stripped.startswith("#[cfg(all(test"):
            pending_test = True
        elif pending_test and re.match(r"(pub(\(crate\))?\s+)?mod\s+\w+\s*\{", stripped):
            skip_depth = depth
            pending_test = False
        elif pending_test and not stripped.startswith("#"):
            pending_test = False
        m = FN.search(c)
        if m and skip_depth is None and not c.rstrip().endswith(";"):
            # The function runs to the line where the braces opened on its first `{` close
            # (counted from its head: an `impl X {` before it on the line is not its own).
            d, j, opened = 0, i, False
            while j < len(lines):
                cj = code(lines[j])[m.end():] if j == i else code(lines[j])
                d += cj.count("{") - cj.count("}")
                opened = opened or "{" in cj
                if opened and d <= 0:
                    break
                if not opened and cj.rstrip().endswith(";"):
                    break
                j += 1
            if opened:
                out.append((m.group(1), i + 1, j - i + 1))
        depth += c.count("{") - c.count("}")
        if skip_depth is not None and depth <= skip_depth:
            skip_depth = None
        i += 1
    return out


def library_lines(path):
    n, skip_depth, depth, pending_test, in_block = 0, None, 0, False, False
    for line in path.read_text().splitlines():
        s = line.strip()
        c = code(line)
        if s.startswith("#[cfg(test)]") or s.startswith("#[cfg(all(test"):
            pending_test = True
        elif pending_test and re.match(r"(pub(\(crate\))?\s+)?mod\s+\w+\s*\{", s):
            skip_depth, pending_test = depth, False
        elif pending_test and not s.startswith("#"):
            pending_test = False
        depth += c.count("{") - c.count("}")
        if skip_depth is not None:
            if depth <= skip_depth:
                skip_depth = None
            continue
        if s and not s.startswith("//"):
            n += 1
    return n


def main():
    report = "--report" in sys.argv
    rust = sorted(p for d in ("src", "cli/src", "tests", "cli/tests", "benches", "examples", "fuzz/fuzz_targets")
                  for p in (ROOT / d).rglob("*.rs"))
    over = []
    for p in rust:
        n = len(p.read_text().splitlines())
        if n > FILE_LIMIT:
            over.append(f"{p.relative_to(ROOT)}: {n} lines (limit {FILE_LIMIT})")
    fns = []
    for p in rust:
        rel = p.relative_to(ROOT)
        if rel.parts[0] in ("tests", "benches", "fuzz") or rel.parts[:2] == ("cli", "tests") \
                or rel.parts[:2] == ("src", "sim") or p.name == "tests.rs":
            continue
        for name, line, length in functions(p):
            fns.append((length, f"{rel}:{line} {name}"))
            if length > FN_LIMIT:
                over.append(f"{rel}:{line}: fn {name} is {length} lines (limit {FN_LIMIT})")
    lib = sum(library_lines(p) for p in (ROOT / "src").rglob("*.rs")
              if "sim" not in p.relative_to(ROOT).parts and p.name != "tests.rs")
    if report:
        print(f"library code lines (src/ without tests and the simulation): {lib}")
        print(f"files over {FILE_LIMIT} lines: {sum(1 for o in over if ': fn ' not in o)}")
        for length, where in sorted(fns, reverse=True)[:8]:
            print(f"  {length:4} {where}")
    for o in over:
        print(o)
    sys.exit(1 if over else 0)


main()
