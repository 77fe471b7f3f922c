#!/usr/bin/env python3
"""Check that what the docs name exists: code, files, links, nox sessions; and that run records
hold no code.

Run from anywhere (``python3 tools/check_docs.py``); exits 1 and lists each problem where one
is found. The ``lint`` nox session runs it (tags ``tests``, ``ci``, ``full``). Standard library
only: nothing is imported from the packages, so it needs no torch; Python modules are found
as files under ``packages/*/src`` and read with :mod:`ast`.

The docs checked (DOCS): the README, ``docs/*.md``, ``docs/perf/*.md``, the READMEs of the
packages, ``tools/`` and ``docs/perf/scripts/``. The run records (HISTORY: ``docs/perf/runs/``
and ``docs/accuracy-runs/``) name code as it was then: only their links are checked. The
CHANGELOGs are not checked.

What is checked, in inline code (```` `...` ````) outside fenced blocks:

- a dotted name under one of the packages (``tq_core.contract.check_attention_args``,
  ``tq_triton.attention.plan``): the module must exist as a file (or, for tq-sycl's compiled
  modules, as a CMake target), and each further name must be defined in it: at module level
  (def, class, assignment, import, ``__all__``) or, after a class, in the class body or as a
  ``self.`` attribute of its methods;
- ``X.y`` where ``X`` is the last part(s) of one of the packages' module names
  (``kernel_args.prepare``, ``attention.plan.plan_block_q``) or a class they define
  (``Preset.folds_norm``): ``y`` must be defined there. Other ``X`` (``torch.unique``,
  ``tl.dot``) are not ours and not checked;
- a file name (``tile.py``, ``packages/tq-core/src/tq_core/ops.py``, ``nvidia_h200.json``):
  a file at that path from the repository root or the doc's folder, or whose path ends
  with it, must exist (EXTERNAL_FILES lists the files of other projects the docs name);
- an identifier with an underscore or a capital inside (``check_attention_args``,
  ``PresetError``, ``TQ_KEY_LUT``): it must occur in the repository's code (EXTERNAL_NAMES
  lists the other projects' names the docs use);

and everywhere, fenced blocks included:

- repository paths (``packages/...``, ``docs/...``, ``tools/...``, ``nox_sessions/...``) must
  exist (a ``*`` matches as in a glob), but for ``COMMIT:PATH`` (``git show`` of an older tree);
- ``nox -s NAME`` / ``nox -t TAG``: the session or tag must be defined under nox_sessions/;
- ``tq COMMAND --option``: the option must occur in the packages' code;
- markdown links to local files must resolve, and ``#anchors`` must name a heading of the
  target (GitHub's anchor rules).

Finally no ``.py``, ``.sh``, ``.diff`` or ``.patch`` file may lie under ``docs/perf/runs/`` or
``docs/accuracy-runs/``: run records hold commands and data; code lives in a package or in
``docs/perf/scripts/``, where a nox session runs it.

Every run first checks the checker: a made-up doc naming things that do not exist must fail
each check, and a doc naming real things must pass (``--self-test`` runs only that).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import functools
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
TOP_MODULES = ("tq_core", "tq_triton", "tq_vllm", "tq_sycl")
DOCS = (
    "README.md",
    "docs/*.md",
    "docs/perf/*.md",
    "docs/perf/scripts/README.md",
    "docs/perf/runs/README.md",
    "packages/*/README.md",
    "tools/README.md",
)
# docs of history (the run records and their index): they name code as it was, so only their
# links are checked
HISTORY = ("docs/perf/runs/", "docs/accuracy-runs/")
RECORDS = ("docs/perf/runs", "docs/accuracy-runs")
CODE_IN_RECORDS = {".py", ".sh", ".diff", ".patch"}
SKIP_DIRS = {".git", ".nox", ".dev", "__pycache__", "build", "dist", "_skbuild", ".ruff_cache", ".pytest_cache"}
SKIP_DIRS |= {".hypothesis", ".venv", ".ab", ".whl", "out", "node_modules"}
# files whose words count as code, for the identifier check
CODE_SUFFIXES = {".py", ".pyi", ".cpp", ".hpp", ".h", ".toml", ".sh", ".cfg", ".json", ".cmake", ".yml", ".yaml"}
CODE_ROOTS = ("packages", "nox_sessions", "noxfile.py", "tools", "docs/perf/scripts", ".ci", "pyproject.toml")
FILE_SUFFIXES = ("py", "md", "json", "cpp", "hpp", "h", "toml", "sh", "txt", "cfg", "yml", "yaml", "png", "cmake")
FILE_RE = re.compile(rf"[\w./*-]*\.(?:{'|'.join(FILE_SUFFIXES)})")
REPO_PATH_RE = re.compile(r"(?<![\w/.-])(?:packages|docs|tools|nox_sessions)/[\w./*-]*[\w*/]")
# an identifier in a fenced block: not part of a dotted name, path or file name
FENCE_IDENT_RE = re.compile(r"(?<![\w./-])[A-Za-z_]\w*(?![\w./-])")
TOP_DOTTED_RE = re.compile(r"(?<![\w./-])(?:tq_core|tq_triton|tq_vllm|tq_sycl)(?:\.[A-Za-z_]\w*)+")
# a file named in brackets in a fenced diagram: [tq_vllm/backend.py] or [attention/plan.py, tuning.py]
BRACKET_FILES_RE = re.compile(r"\[([\w/., -]+\.(?:py|hpp|cpp))\]")
DOTTED_RE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
IDENT_RE = re.compile(r"_*[A-Za-z]\w*")
CALL_RE = re.compile(r"([A-Za-z_][\w.]*)\(.*\)")
DIR_RE = re.compile(r"[\w.-]+(?:/[\w.-]+)*/")
LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
NOX_RE = re.compile(r"\bnox\b[^\n`]*")
TQ_CMD_RE = re.compile(r"tq [a-z][\w-]*(?: [^\n`|#]*)?")

# other projects' files that the docs name
EXTERNAL_FILES = {
    "triton_turboquant_decode.py",  # vLLM's TurboQuant kernels
    "tqc_helpers.py",  # vLLM's TurboQuant config helpers
    "config.json",  # a Hugging Face model folder's
    "config.py",  # vLLM's turboquant/config.py
    "centroids.py",  # vLLM's turboquant/centroids.py
    "handler.hpp",  # the SYCL runtime's
}
# paths of other projects (vLLM's source tree, the SYCL headers)
EXTERNAL_PREFIXES = ("vllm/", "sycl/")
# other projects' identifiers that the docs name (vLLM, Level Zero, twine, wheel tags ...)
EXTERNAL_NAMES = {
    "AB_PRESETS",
    "AB_SHAPES",
    "TQ_PRESETS",
    "TWINE_PASSWORD",
    "_tq_decode_stage1",
    "_with_context",
    "manylinux_2_28",
    "manylinux_2_28_x86_64",
    "manylinux_2_34",
    "manylinux_2_34_x86_64",
    "o_bf16",
    "urEnqueueKernelLaunch",
    # Nsight Compute's section names
    "LaunchStats",
    "MemoryWorkloadAnalysis",
    "SchedulerStats",
    "SourceCounters",
    "SpeedOfLight",
    "WarpStateStats",
    "PIP_NO_INDEX",
    # placeholders in examples and pseudo-code
    "script_that_calls_attention_three_times",
    "block_start",
}
# fenced blocks whose identifiers are checked: diagrams, pseudo-code and Python (not shell
# sessions, logs or JSON, which hold other programs' names)
CHECKED_FENCES = {"", "text", "python", "py"}


@dataclass
class Module:
    """What one Python module defines, read with ast."""

    names: set[str] = field(default_factory=set)
    classes: dict[str, set[str]] = field(default_factory=dict)
    # name -> dotted module it was imported from (absolute), for following re-exports
    imports: dict[str, str] = field(default_factory=dict)


def _class_attrs(node: ast.ClassDef) -> set[str]:
    attrs: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            attrs.add(item.name)
            for sub in ast.walk(item):
                owner = sub.value if isinstance(sub, ast.Attribute) else None
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    attrs.add(sub.attr)
        elif isinstance(item, ast.Assign):
            attrs.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            attrs.add(item.target.id)
    return attrs


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


@functools.cache
def read_module(dotted: str) -> Module | None:
    path = module_files().get(dotted)
    if path is None or path.suffix != ".py":
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mod = Module()
    is_package = path.name == "__init__.py"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mod.names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            mod.names.add(node.name)
            mod.classes[node.name] = _class_attrs(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name):
                        mod.names.add(sub.id)
            names_all = any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
            if names_all and isinstance(node.value, ast.List | ast.Tuple):
                mod.names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
        elif isinstance(node, ast.Import):
            for a in node.names:
                mod.names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(dotted, is_package, node)
            for a in node.names:
                mod.names.add(a.asname or a.name)
                mod.imports[a.asname or a.name] = f"{source}.{a.name}"
        elif isinstance(node, ast.If | ast.Try):
            # names defined under `if TYPE_CHECKING:` / try-except imports: count them
            for sub in ast.walk(node):
                if isinstance(sub, ast.FunctionDef | ast.ClassDef):
                    mod.names.add(sub.name)
                elif isinstance(sub, ast.alias):
                    mod.names.add(sub.asname or sub.name.split(".")[0])
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    mod.names.add(sub.id)
    return mod


@functools.cache
def module_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the packages (``src`` layouts)."""
    found: dict[str, Path] = {}
    for src in sorted(PACKAGES.glob("*/src")):
        for path in sorted(src.rglob("*.py")):
            if SKIP_DIRS & set(path.relative_to(src).parts):
                continue
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts:
                found[".".join(parts)] = path
    # compiled modules (tq-sycl's): csrc/bindings/NAME_module.cpp builds PKG._NAME
    for binding in PACKAGES.glob("*/csrc/bindings/*_module.cpp"):
        src = binding.parents[2] / "src"
        for pkg in (p.name for p in src.iterdir() if (p / "__init__.py").exists()):
            found.setdefault(f"{pkg}._{binding.stem.removesuffix('_module')}", binding)
    return found


@functools.cache
def classes_by_name() -> dict[str, list[set[str]]]:
    out: dict[str, list[set[str]]] = {}
    for dotted in module_files():
        mod = read_module(dotted)
        for name, attrs in (mod.classes if mod else {}).items():
            out.setdefault(name, []).append(attrs)
    return out


def walk_files(*roots: str) -> Iterator[Path]:
    for root in roots:
        base = ROOT / root
        if base.is_file():
            yield base
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            for name in filenames:
                yield Path(dirpath, name)


@functools.cache
def repo_files() -> tuple[str, ...]:
    """Every file of the repository (posix paths from the root), build outputs left out."""
    return tuple(sorted(p.relative_to(ROOT).as_posix() for p in walk_files(".")))


@functools.cache
def code_text() -> str:
    parts = []
    for path in walk_files(*CODE_ROOTS):
        if path == Path(__file__).resolve():
            continue  # its self-test names what does not exist
        if path.suffix in CODE_SUFFIXES or path.name == "CMakeLists.txt":
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


@functools.cache
def code_words() -> frozenset[str]:
    return frozenset(re.findall(r"\w+", code_text()))


@functools.cache
def nox_names() -> tuple[frozenset[str], frozenset[str]]:
    """(session names, tags) defined under nox_sessions/."""
    sessions: set[str] = set()
    tags: set[str] = set()
    for path in (ROOT / "nox_sessions").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                call = deco if isinstance(deco, ast.Call) else None
                func = call.func if call else deco
                if not (isinstance(func, ast.Attribute) and func.attr == "session"):
                    continue
                name = node.name
                for kw in call.keywords if call else []:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                        name = kw.value.value
                    elif kw.arg == "tags" and isinstance(kw.value, ast.List):
                        tags.update(e.value for e in kw.value.elts if isinstance(e, ast.Constant))
                sessions.add(name)
    return frozenset(sessions), frozenset(tags)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        m = None if in_fence else re.match(r"#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


# ----------------------------------------------------------------------------- the checks


def check_dotted(name: str) -> str | None:
    """Why ``name`` does not resolve, or None (also None where it is not ours to check)."""
    parts = name.split(".")
    files = module_files()
    if parts[0] in TOP_MODULES:
        for cut in range(len(parts), 0, -1):
            if ".".join(parts[:cut]) in files:
                return _check_attrs([".".join(parts[:cut])], parts[cut:], name)
        return f"no module {parts[0]} in packages/*/src"
    # X.y: X the tail of a module name, or a class of ours
    for cut in range(len(parts) - 1, 0, -1):
        tail = "." + ".".join(parts[:cut])
        mods = [m for m in files if ("." + m).endswith(tail)]
        if mods:
            return _check_attrs(mods, parts[cut:], name)
    if parts[0] in classes_by_name():
        attrs = set().union(*classes_by_name()[parts[0]])
        if parts[1] not in attrs:
            return f"class {parts[0]} defines no {parts[1]}"
    return None


def _check_attrs(mods: list[str], rest: list[str], name: str) -> str | None:
    if not rest:
        return None
    first = rest[0]
    # a submodule
    if any(f"{m}.{first}" in module_files() for m in mods):
        return _check_attrs([f"{m}.{first}" for m in mods if f"{m}.{first}" in module_files()], rest[1:], name)
    defined = [(m, read_module(m)) for m in mods]
    holders = [(m, mod) for m, mod in defined if mod is None or first in mod.names]
    if not holders:
        return f"{' / '.join(mods)} defines no {first}"
    if len(rest) == 1:
        return None
    for _m, mod in holders:
        if mod is None:
            return None  # a compiled module: its attributes are not read
        if first in mod.classes:
            if rest[1] in mod.classes[first]:
                return None
            continue
        target = mod.imports.get(first)
        if target and target.split(".")[0] in TOP_MODULES:
            return check_dotted(".".join([target, *rest[1:]]))
        return None  # an instance or value: its attributes are not read
    return f"{first} defines no {rest[1]}"


def check_file(token: str, doc: Path) -> str | None:
    token = token.removeprefix("./")
    if Path(token).name in EXTERNAL_FILES or token.startswith(EXTERNAL_PREFIXES):
        return None
    files = repo_files()
    if "*" in token:
        if any(fnmatch.fnmatch(f, token) or fnmatch.fnmatch(f, f"*/{token}") for f in files):
            return None
        return "no file matches"
    if (ROOT / token).exists() or (doc.parent / token).exists():
        return None
    if any(f.endswith("/" + token) for f in files):
        return None
    return "no such file in the repository"


def looks_like_code(word: str) -> bool:
    """An identifier, not an English word: an underscore or a capital inside."""
    return "_" in word.strip("_") or re.search(r"[a-z][A-Z]", word) is not None


def check_identifier(token: str) -> str | None:
    if token in EXTERNAL_NAMES or token in code_words():
        return None
    return "named nowhere in the code"


def check_link(target: str, doc: Path) -> str | None:
    if re.match(r"[a-z]+:", target):
        return None
    path_part, _, anchor = target.partition("#")
    path = (doc.parent / path_part).resolve() if path_part else doc
    if not path.exists():
        return "no such file"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} has no heading #{anchor}"
    return None


def check_nox(command: str) -> list[str]:
    sessions, tags = nox_names()
    problems = []
    for flag, value in re.findall(r"(?:^|\s)(-s|--session|-t|--tags)\s+([\w-]+(?:,[\w-]+)*)", command):
        known = sessions if flag in ("-s", "--session") else tags
        for v in value.split(","):
            if v not in known:
                problems.append(f"`nox {flag} {v}`: no such nox {'session' if known is sessions else 'tag'}")
    return problems


def check_tq_options(command: str) -> list[str]:
    text = code_text()
    sub = command.split()[1]
    if f'"{sub}"' not in text:
        return [f"`tq {sub}`: no such tq command in the packages' code"]
    return [
        f"`{opt}` (in `{command.strip()}`): no such option in the packages' code"
        for opt in re.findall(r"(?<![\w-])--[a-z][\w-]*", command)
        if f'"{opt}"' not in text and f"'{opt}'" not in text
    ]


def inline_tokens(text: str) -> Iterator[tuple[int, str]]:
    """(line number, inline code) outside fenced blocks."""
    in_fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            for m in re.finditer(r"`([^`\n]+)`", line):
                yield n, m.group(1)


def check_text(text: str, doc: Path) -> list[str]:
    """Every problem of one doc, as 'path:line: message'. In a record of history
    (HISTORY_DOCS), which names code as it was, only links and repository paths."""
    rel = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc
    problems: list[str] = []
    history = rel.as_posix().startswith(HISTORY)

    def report(n: int, msg: str) -> None:
        if history and not msg.startswith("link ("):
            return
        problems.append(f"{rel}:{n}: {msg}")

    for n, token in inline_tokens(text):
        t = token.strip()
        bare = t.removesuffix("()")
        if call := CALL_RE.fullmatch(t):
            # a call with arguments: check the callee
            bare = call.group(1)
        if FILE_RE.fullmatch(t):
            if why := check_file(t, doc):
                report(n, f"`{t}`: {why}")
        elif DIR_RE.fullmatch(t) and not t.startswith(".") and t.rstrip("/") not in SKIP_DIRS:
            if not any(f.startswith(t) or f"/{t}" in f for f in repo_files()):
                report(n, f"`{t}`: no such folder in the repository")
        elif DOTTED_RE.fullmatch(bare):
            if why := check_dotted(bare):
                report(n, f"`{t}`: {why}")
        elif IDENT_RE.fullmatch(bare) and looks_like_code(bare) and (why := check_identifier(bare)):
            report(n, f"`{t}`: {why}")
        if m := TQ_CMD_RE.match(t):
            for why in check_tq_options(m.group(0)):
                report(n, why)
    in_fence = False
    lang = ""
    assigned: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            lang = line.strip()[3:].strip().lower() if in_fence else ""
            assigned = set()
        elif in_fence and lang in CHECKED_FENCES:
            # a Python block's own variables are defined by it
            if m := re.match(r"\s*([\w, ]+?)\s*=[^=]", line):
                assigned.update(w.strip() for w in m.group(1).split(","))
            for m in FENCE_IDENT_RE.finditer(line):
                w = m.group(0)
                # in Python only what is called: a block's inputs are its own placeholders
                if lang.startswith("py") and not line[m.end() :].startswith("("):
                    continue
                if looks_like_code(w) and w not in assigned and (why := check_identifier(w)):
                    report(n, f"{w}: {why}")
        if in_fence and (m := TQ_CMD_RE.match(line.strip())):
            for why in check_tq_options(m.group(0)):
                report(n, why)
        if in_fence:
            for m in BRACKET_FILES_RE.finditer(line):
                for name in m.group(1).split(","):
                    if why := check_file(name.strip(), doc):
                        report(n, f"[{name.strip()}]: {why}")
        # the packages' dotted names anywhere: prose, inline code and fenced blocks
        for m in TOP_DOTTED_RE.finditer(line):
            if m.start() and line[m.start() - 1] == "`":
                continue  # inline code: checked above
            if why := check_dotted(m.group(0).rstrip(".")):
                report(n, f"{m.group(0)}: {why}")
        for m in REPO_PATH_RE.finditer(line):
            path = m.group(0).rstrip(".")
            if re.search(r"\b[0-9a-f]{7,40}:$", line[: m.start()]):
                continue  # COMMIT:PATH, a file in an older tree
            if "*" in path:
                pattern = path.rstrip("/") + ("*" if path.endswith("/") else "")
                ok = any(fnmatch.fnmatch(f, pattern) for f in repo_files())
            else:
                ok = (ROOT / path).exists()
            if not ok:
                report(n, f"{path}: no such path in the repository")
        for m in LINK_RE.finditer(line):
            target = m.group(1) or m.group(2)
            if why := check_link(target, doc):
                report(n, f"link ({target}): {why}")
        for m in NOX_RE.finditer(line):
            for why in check_nox(m.group(0)):
                report(n, why)
    return list(dict.fromkeys(problems))


def code_in_records() -> list[str]:
    return [
        f"{f}: code in a run record (move it to a package or docs/perf/scripts/ and run it in a nox session,"
        " or delete it and name it in the record's README with the commit that holds it)"
        for f in repo_files()
        if f.startswith(tuple(r + "/" for r in RECORDS)) and Path(f).suffix in CODE_IN_RECORDS
    ]


def docs() -> list[Path]:
    return sorted({p for pattern in (*DOCS, *(f"{h}**/*.md" for h in HISTORY)) for p in ROOT.glob(pattern)})


# ----------------------------------------------------------------------------- self-test

GOOD = """\
`tq_core.contract.check_attention_args`, `tq_core.attention`, `tq_triton.attention.plan`,
`tq_core.Calibration`, `Preset.folds_norm`, `tq_triton/attention/plan.py`, `check_attention_args`,
packages/tq-core/src/tq_core/contract.py, `nox -s lint`, `nox -t tests`, `tq eval --quick`,
`select_backend(device, name="auto")`, `tq_triton/attention/`,
[the overview](overview.md#packages), `torch.unique`
"""
# each line must fail on its own
BAD = (
    "`tq_triton.attention.no_such_function`",
    "`tq_core.no_such_module`",
    "`Preset.no_such_field`",
    "`plan.no_such_helper`",
    "`packages/tq-core/src/tq_core/no_such.py`",
    "`no_such_helper_fn()`",
    "see packages/tq-core/src/tq_core/no_such_file.py",
    "[a link](no-such-page.md)",
    "[an anchor](overview.md#no-such-heading)",
    "`python3 -m nox -s no-such-session`",
    "`tq eval --no-such-option`",
    "`tq no-such-command`",
    "`no_such_backend(device, name)`",
    "`tq_core/no_such_folder/`",
    "```\n  tq_vllm.plan.no_such_planner -> x      [tq_vllm/no_such_file.py]\n```",
    "```\n |-- plan_no_such_tile: the tile rows\n```",
    "```python\nout = no_such_op(query)\n```",
)


def self_test() -> list[str]:
    doc = ROOT / "docs" / "self-test.md"
    failures = [f"self-test: a good doc fails: {p}" for p in check_text(GOOD, doc)]
    failures += [f"self-test: not caught: {bad}" for bad in BAD if not check_text(bad, doc)]
    return failures


def run_python(files: list[Path]) -> int:
    """Run each ```python block of ``files`` as a script; 1 where one fails."""
    failed = 0
    for path in files:
        blocks = re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)
        for i, code in enumerate(blocks, 1):
            proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
            print(f"{path.name}: python block {i}: {status}\n{proc.stdout}{proc.stderr if proc.returncode else ''}")
            failed += proc.returncode != 0
        if not blocks:
            print(f"{path.name}: no python block")
            failed += 1
    return 1 if failed else 0


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--self-test", action="store_true", help="only check the checker")
    p.add_argument(
        "--run-python",
        action="store_true",
        help="instead: run each ```python block of the files given in a fresh interpreter",
    )
    p.add_argument("files", nargs="*", type=Path, help="docs to check (default: DOCS)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.run_python:
        return run_python(args.files)
    problems = self_test()
    if not args.self_test:
        paths = [f.resolve() for f in args.files] or docs()
        for path in paths:
            problems += check_text(path.read_text(encoding="utf-8"), path)
        if not args.files:
            problems += code_in_records()
    for line in problems:
        print(line)
    checked = "the checker" if args.self_test else f"{len(args.files) or len(docs())} docs"
    print(f"check_docs: {len(problems)} problem(s) in {checked}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
