"""Generate ferry/base/_layouts.py from the shim's C headers.

The formats the shim shares with Python (process file, aggregation and
catch-all areas, control block, patch plans) are defined once, in C.  This
tool reads the names of every struct member, enum constant and `FERRY_*`
object-like macro of the headers below, compiles a small C program that
includes them with the host compiler, and writes what the compiler says:
offset, size, element count and kind of every member, and the value of every
constant.  Nothing about a layout is copied by hand, so a header change
reaches Python at the next build (`make shim`, or the wheel's build step).

    python3 tools/gen_layouts.py OUT [--src SHIM_DIR] [--cc CC]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (header, whether its structs are exported): the public API contributes only
# its constants (FERRY_MAX_POOLS, enum ferry_wait, ...)
HEADERS = (("src/layout.h", True), ("src/procfile.h", True), ("src/aggarea.h", True),
           ("src/ctl.h", True), ("src/plan.h", True), ("include/ferry.h", False))

# struct.Struct codes of the scalar types a shared layout may use; anything
# else (a nested struct, a pointer) is an opaque run of bytes
_KINDS = ("char: \"s\", signed char: \"b\", unsigned char: \"B\", short: \"h\", "
          "unsigned short: \"H\", int: \"i\", unsigned int: \"I\", long: \"q\", unsigned long: \"Q\", "
          "long long: \"q\", unsigned long long: \"Q\", default: \"\"")


class HeaderError(Exception):
    pass


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _members(struct, body):
    """[(name, array)] of one struct body: array is None (scalar), "" (flexible) or the bound."""
    if "{" in body:
        raise HeaderError(f"struct {struct}: a nested struct or union is not supported; give it a name")
    out = []
    for decl in (d.strip() for d in body.split(";")):
        if not decl or decl.startswith("_Static_assert"):
            continue
        if "(" in decl or ":" in decl:
            raise HeaderError(f"struct {struct}: member '{decl}' is not a plain field")
        for part in decl.split(","):
            m = re.search(r"(\w+)\s*(?:\[([^\]]*)\])?\s*$", part)
            if not m:
                raise HeaderError(f"struct {struct}: cannot read member '{part.strip()}'")
            out.append((m.group(1), m.group(2)))
    return out


def parse(text, with_structs):
    """(structs {name: members}, enum constants, macros) named in one header."""
    text = _strip_comments(text)
    structs = {}
    if with_structs:
        for name, body in re.findall(r"\bstruct\s+(\w+)\s*\{(.*?)\}\s*;", text, re.S):
            structs[name] = _members(name, body)
    enums = []
    for body in re.findall(r"\benum\s*\w*\s*\{(.*?)\}", text, re.S):
        enums += [m.group(1) for m in re.finditer(r"(\w+)\s*(?:=[^,]*)?(?:,|$)", body.strip())]
    macros = re.findall(r"^\s*#\s*define\s+(FERRY_\w+)[ \t]+(\S[^\n]*)$", text, re.M)
    macros = [(name, value.strip()) for name, value in macros]
    return structs, enums, macros


def c_program(headers):
    """The C source that prints every layout and constant of `headers`
    [(path, exported)], one record a line."""
    structs, enums, macros = {}, [], []
    for path, exported in headers:
        s, e, m = parse(path.read_text(), exported)
        structs.update(s)
        enums += e
        macros += m
    lines = ["#include <stddef.h>", "#include <stdint.h>", "#include <stdio.h>"]
    lines += [f'#include "{path.name}"' for path, _ in headers]
    lines += [f"#define KIND(x) _Generic((x), {_KINDS})", "int main(void)", "{"]
    for name, members in structs.items():
        t = f"struct {name}"
        lines.append(f'    printf("S {name} %zu\\n", sizeof({t}));')
        for field, bound in members:
            m = f"((({t} *)0)->{field})"
            elem = m if bound is None else f"{m}[0]"
            size = "0" if bound == "" else f"sizeof{m}"
            lines.append(f'    printf("F {name} {field} %zu %zu %zu %s\\n", offsetof({t}, {field}), '
                         f'(size_t){size}, sizeof{elem}, KIND({elem}));')
    for name in enums:
        lines.append(f'    printf("C {name} %lld\\n", (long long)({name}));')
    for name, value in macros:
        if value.startswith('"'):
            lines.append(f'    printf("B {name}");')
            lines.append(f"    for (size_t i = 0; i + 1 < sizeof({name}); i++)")
            lines.append(f'        printf(" %d", (unsigned char){name}[i]);')
            lines.append('    printf("\\n");')
        elif re.fullmatch(r"[\w()+\-*/<>| ~]+", value) and re.search(r"\d", value):
            lines.append(f'    printf("C {name} %lld\\n", (long long)({name}));')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def measure(shim_dir, cc):
    """{"structs": {name: (size, {field: (offset, size, count, kind)})}, "constants": {...}}
    as the compiler lays the headers of `shim_dir` out."""
    shim_dir = Path(shim_dir)
    headers = [(shim_dir / h, exported) for h, exported in HEADERS]
    with tempfile.TemporaryDirectory(prefix="ferry-layouts-") as tmp:
        source, program = Path(tmp) / "layouts.c", Path(tmp) / "layouts"
        source.write_text(c_program(headers))
        build = subprocess.run([cc, "-std=gnu11", "-Wall", "-Werror", f"-I{shim_dir / 'src'}",
                                f"-I{shim_dir / 'include'}", "-o", str(program), str(source)],
                               capture_output=True, text=True)
        if build.returncode:
            raise HeaderError(f"{cc} could not compile the layout program:\n{build.stderr}")
        out = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout
    structs, constants = {}, {}
    for line in out.splitlines():
        tag, name, *rest = line.split(" ")
        if tag == "S":
            structs[name] = (int(rest[0]), {})
        elif tag == "F":
            field, offset, size, elem, kind = rest[0], int(rest[1]), int(rest[2]), int(rest[3]), \
                rest[4] if len(rest) > 4 else ""
            structs[name][1][field] = (offset, size, size // elem if elem else 0, elem, kind)
        elif tag == "C":
            constants[name] = int(rest[0])
        elif tag == "B":
            constants[name] = bytes(int(b) for b in rest)
    return {"structs": structs, "constants": constants}


def render(layouts):
    """The text of the generated module."""
    lines = ['"""Generated by tools/gen_layouts.py from the shim\'s C headers; do not edit.',
             "",
             "STRUCTS: {struct: (size, {member: (offset, size, count, element size, kind)})},",
             "count 0 for a flexible array member, kind a struct code ('' for a nested",
             "struct or a pointer).  CONSTANTS: enum constants and FERRY_* macros.",
             '"""', "", "STRUCTS = {"]
    for name, (size, fields) in layouts["structs"].items():
        lines.append(f"    {name!r}: ({size}, {{")
        lines += [f"        {field!r}: {value!r}," for field, value in fields.items()]
        lines.append("    }),")
    lines += ["}", "", "CONSTANTS = {"]
    lines += [f"    {name!r}: {value!r}," for name, value in layouts["constants"].items()]
    lines += ["}", ""]
    return "\n".join(lines)


def generate(out, shim_dir=ROOT / "shim", cc=None):
    """Write the module to `out` unless it already says the same; True if written."""
    text = render(measure(shim_dir, cc or os.environ.get("CC") or "cc"))
    out = Path(out)
    if out.exists() and out.read_text() == text:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--src", default=str(ROOT / "shim"), help="the shim's folder (src/, include/)")
    ap.add_argument("--cc", default=None, help="the C compiler (default: $CC, else cc)")
    args = ap.parse_args(argv)
    try:
        generate(args.out, args.src, args.cc)
    except HeaderError as e:
        sys.exit(f"gen_layouts: {e}")


if __name__ == "__main__":
    main()
