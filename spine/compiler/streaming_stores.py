"""Streaming (non-temporal) stores for launches that write more than the caches keep.

A store to a line that is not in the cache first reads that line from memory (a read for ownership), then
writes it back when it is evicted: a kernel streaming N bytes out moves 2N. x86's non-temporal stores
write whole lines around the cache and skip the read: at the memory roof a row softmax moves a third less,
a vector add a quarter less. They pay off only when nobody reads the output soon, which is when the launch writes
more than a cache keeps, and that is known only at launch time. So:

- the conversion records a lower bound on the bytes each program stores (to_linalg/store.py);
- the entry point compares the launch's program count with the count that writes SPINE_STREAMING_STORES_MB
  (16 MiB: more than a core's share of the last-level cache on the machines Spine targets, and than all of
  it on most client parts, so the output is gone from the caches before a consumer runs), and keeps the
  answer in the kernel's flag (ir_names.streaming_flag_symbol; written only when it changes: the grid's
  threads share it);
- after LLVM's O3 pipeline, each whole-vector store whose address derives from an argument the kernel
  writes becomes: if the flag is set and the address is aligned to the vector (or to half of it), a
  non-temporal store of the vector (or of its halves); otherwise the store as it was. Stores into the
  kernel's own buffers are never touched: they are read again at once.

Why after O3, on the IR text: LLVM's loop vectoriser gives up on a loop with a non-temporal store it cannot
prove aligned to the vector width, and nothing in a kernel is. MLIR and llvmlite have no API to edit LLVM
instructions; the text is regular enough at this point (one instruction per line, SSA names) for the few
shapes matched here, and anything not matched is left as it is.

Non-temporal stores are weakly ordered. The grid runtime fences them once per thread and launch, before the
thread reports its share done (cpp/grid.c); a program's own later loads see its stores without a fence.
Within a launch, a program may publish its stores to another only through an atomic: an sfence goes before
each atomic write and each fence, since x86's locked instructions are not documented to order non-temporal
stores on every vendor's cores."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..ir_names import ENTRY_SYMBOL
MIN_VECTOR_BYTES = 16    # the narrowest non-temporal vector store (movntps xmm)

_NAME = r"%[-\w.$]+"
_DEFINE = re.compile(r"^define [^@]*@([-\w.$]+)\((.*)\)[^{]*\{$")
_ASSIGN = re.compile(rf"^\s+({_NAME}) = (.*)$")
_CALL = re.compile(r"call [^@]*@([-\w.$]+)\((.*)\)")
_STORE = re.compile(rf"^(\s+)store (<(\d+) x (\w+)>) (.+), ptr ({_NAME}), align (\d+)$")
# Instructions through which a program may publish its earlier stores to other programs of the launch.
_PUBLISHES = re.compile(r"^\s+(?:%[-\w.$]+ = )?(?:atomicrmw|cmpxchg|fence|store atomic)\b")
_ELEMENT_BYTES = {"i8": 1, "i16": 2, "half": 2, "bfloat": 2, "i32": 4, "float": 4, "i64": 8, "double": 8}


def streaming_programs(bytes_per_program: int, streaming_bytes: int) -> int:
    """The program count from which a launch streams its stores; 0: never (streaming is off, or nothing
    stored is known)."""
    if bytes_per_program <= 0 or streaming_bytes <= 0:
        return 0
    return -(-streaming_bytes // bytes_per_program)


@dataclass
class _Function:
    name: str
    params: list        # parameter names, in order
    lines: list         # body lines, from the one after `define` to the closing `}`
    defs: dict          # SSA name -> the instruction text after `=`
    start: int = 0      # line numbers of `define` and of the closing `}` in the module
    end: int = 0


def with_streaming_stores(llvm_ir: str, written_args: tuple, flag: str) -> str:
    """The O3-optimised module `llvm_ir` with its whole-vector stores through written arguments made
    streaming where the flag (the global named `flag`) and the address allow. Returns the text unchanged when
    there are none."""
    lines = llvm_ir.split("\n")
    functions = _functions(lines)
    if ENTRY_SYMBOL not in functions:
        return llvm_ir
    roots = _Roots(functions, frozenset(written_args))
    helpers, rewritten = {}, False
    for function in functions.values():
        changed = [i for i, line in enumerate(function.lines) if _streams(function, line, roots)]
        for i in changed:
            function.lines[i] = _call_helper(function.lines[i], helpers)
        if changed:
            top = _first_instruction(function.lines)
            function.lines[top:top] = [f'  %spine.flag = load i8, ptr @"{flag}", align 1',
                                       "  %spine.streams = icmp ne i8 %spine.flag, 0"]
            rewritten = True
    if not rewritten:
        return llvm_ir
    for function in functions.values():
        function.lines = [f"  call void @llvm.x86.sse.sfence()\n{line}" if _PUBLISHES.match(line) else line
                          for line in function.lines]
    return _reassemble(lines, functions) + "\n" + _declarations(helpers, _next_metadata_id(llvm_ir))


def _functions(lines: list) -> dict:
    functions, current = {}, None
    for index, line in enumerate(lines):
        match = _DEFINE.match(line)
        if match:
            params = [p.split()[-1] for p in _top_level_split(match.group(2)) if p.strip()]
            current = _Function(match.group(1), params, [], {}, start=index)
            continue
        if current is None:
            continue
        if line == "}":
            current.end = index
            functions[current.name] = current
            current = None
            continue
        current.lines.append(line)
        assign = _ASSIGN.match(line)
        if assign:
            current.defs[assign.group(1)] = assign.group(2)
    return functions


def _top_level_split(text: str) -> list:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{<"
        depth -= ch in ")]}>"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


class _Roots:
    """Where a pointer comes from: the set of written-argument indexes it may derive from, or None when any
    of its origins is something else (a buffer of the kernel's own, an argument not written, unknown)."""

    def __init__(self, functions: dict, written: frozenset):
        self.functions, self.written = functions, written
        self.memo = {}      # (function, value) -> its origins, for the values stores go through
        self.calls = None   # callee name -> [(caller, argument list)], found on the first parameter met

    def of(self, function: _Function, value: str):
        key = (function.name, value)
        if key not in self.memo:
            self.memo[key] = self._walk(function, value, set())
        return self.memo[key]

    def _walk(self, function: _Function, value: str, visiting: set):
        key = (function.name, value)
        if key in visiting:
            return frozenset()          # a cycle through phis adds no origin
        visiting.add(key)
        if value in function.params:
            return self._parameter(function, function.params.index(value), visiting)
        text = function.defs.get(value)
        if text is None:
            return None
        if function.name == ENTRY_SYMBOL:
            slot = _argument_slot(function, text)
            if slot is not None:
                return frozenset([slot]) if slot in self.written else None
        sources = _pointer_sources(text)
        if sources is None:
            return None
        found = frozenset()
        for source in sources:
            roots = self._walk(function, source, visiting)
            if roots is None:
                return None
            found |= roots
        return found

    def _parameter(self, function: _Function, position: int, visiting: set):
        """A parameter of an internal function: the union over its call sites."""
        if function.name == ENTRY_SYMBOL:
            return None
        if self.calls is None:
            self.calls = _call_sites(self.functions)
        sites = self.calls.get(function.name, [])
        found = frozenset()
        for caller, args in sites:
            if position >= len(args) or not args[position].split()[0] == "ptr":
                return None
            roots = self._walk(caller, args[position].split()[-1], visiting)
            if roots is None:
                return None
            found |= roots
        return found if sites else None


def _call_sites(functions: dict) -> dict:
    """Callee name -> [(calling function, its argument list)] over the module's direct calls."""
    sites = {}
    for caller in functions.values():
        for line in caller.lines:
            match = _CALL.search(line)
            if match:
                sites.setdefault(match.group(1), []).append((caller, _top_level_split(match.group(2))))
    return sites


def _pointer_sources(text: str):
    """The pointer operands a pointer-valued instruction derives from, or None when it is not one that
    only offsets or chooses among them."""
    if text.startswith("getelementptr"):
        match = re.search(rf"ptr ({_NAME})", text)
        return [match.group(1)] if match else None
    if text.startswith("phi ptr"):
        incoming = re.findall(r"\[ ([^,]+),", text)
        return incoming if all(v.startswith("%") for v in incoming) else None
    if text.startswith("select"):
        values = re.findall(rf"ptr ({_NAME})", text)
        return values if len(values) == 2 else None
    return None


def _argument_slot(entry: _Function, text: str):
    """The runtime-argument index when `text` loads an argument's data pointer in the entry point:
    `load ptr, ptr %slot` where %slot is itself loaded from args[i] (entry.py's calling convention)."""
    match = re.fullmatch(rf"load ptr, ptr ({_NAME}), align \d+", text)
    if not match:
        return None
    inner = re.fullmatch(rf"load ptr, ptr ({_NAME}), align \d+", entry.defs.get(match.group(1), ""))
    if not inner:
        return None
    args_array = entry.params[0]
    address = inner.group(1)
    if address == args_array:
        return 0
    offset = re.fullmatch(rf"getelementptr (?:inbounds )?(?:nuw )?(i8|ptr), ptr {re.escape(args_array)}, i64 (\d+)",
                          entry.defs.get(address, ""))
    if not offset:
        return None
    return int(offset.group(2)) // (8 if offset.group(1) == "i8" else 1)


def _streams(function: _Function, line: str, roots: _Roots) -> bool:
    match = _STORE.match(line)
    if not match or match.group(4) not in _ELEMENT_BYTES:
        return False
    if int(match.group(3)) * _ELEMENT_BYTES[match.group(4)] < MIN_VECTOR_BYTES:
        return False
    return bool(roots.of(function, match.group(6)))


def _call_helper(line: str, helpers: dict) -> str:
    indent, vector, lanes, element, value, pointer, align = _STORE.match(line).groups()
    name = f"spine.stream.v{lanes}{element}.a{align}"
    helpers[name] = (int(lanes), element, int(align))
    return f"{indent}call void @{name}(ptr {pointer}, {vector} {value}, i1 %spine.streams)"


def _first_instruction(lines: list) -> int:
    """Where the entry block's instructions start (after its label, if it has one)."""
    return 1 if lines and re.match(r"^[-\w.$]+:", lines[0]) else 0


def _reassemble(lines: list, functions: dict) -> str:
    out, index = [], 0
    for function in sorted(functions.values(), key=lambda f: f.start):
        out += lines[index:function.start + 1] + function.lines
        index = function.end
    return "\n".join(out + lines[index:])


def _next_metadata_id(llvm_ir: str) -> int:
    return max((int(n) for n in re.findall(r"^!(\d+) = ", llvm_ir, re.M)), default=-1) + 1


def _declarations(helpers: dict, metadata_id: int) -> str:
    parts = ["declare void @llvm.x86.sse.sfence()",
             f"!{metadata_id} = !{{i32 1}}"]
    for name, (lanes, element, align) in helpers.items():
        parts.append(_helper(name, lanes, element, align, f"!{metadata_id}"))
    return "\n".join(parts) + "\n"


def _helper(name: str, lanes: int, element: str, align: int, nontemporal: str) -> str:
    """The store as a function (inlined afterwards): the whole vector non-temporal when its address is
    aligned to it; its two halves when aligned to half (rows of 1000 floats start 32 bytes apart); as before
    otherwise."""
    vector, whole = f"<{lanes} x {element}>", lanes * _ELEMENT_BYTES[element]
    half_lanes = lanes // 2
    half = f"<{half_lanes} x {element}>"
    halves = whole // 2 >= MIN_VECTOR_BYTES
    low_mask = ", ".join(f"i32 {i}" for i in range(half_lanes))
    high_mask = ", ".join(f"i32 {i}" for i in range(half_lanes, lanes))
    body = [
        f"define internal void @{name}(ptr %p, {vector} %v, i1 %streams) alwaysinline {{",
        "  %address = ptrtoint ptr %p to i64",
        f"  %low = and i64 %address, {whole - 1}",
        "  %aligned = icmp eq i64 %low, 0",
        "  %whole = and i1 %streams, %aligned",
        "  br i1 %whole, label %stream, label %other",
        "stream:",
        f"  store {vector} %v, ptr %p, align {whole}, !nontemporal {nontemporal}",
        "  ret void",
        "other:",
    ]
    if halves:
        body += [
            f"  %half.low = and i64 %address, {whole // 2 - 1}",
            "  %half.aligned = icmp eq i64 %half.low, 0",
            "  %split = and i1 %streams, %half.aligned",
            "  br i1 %split, label %halves, label %plain",
            "halves:",
            f"  %lo = shufflevector {vector} %v, {vector} poison, <{half_lanes} x i32> <{low_mask}>",
            f"  %hi = shufflevector {vector} %v, {vector} poison, <{half_lanes} x i32> <{high_mask}>",
            f"  %upper = getelementptr i8, ptr %p, i64 {whole // 2}",
            f"  store {half} %lo, ptr %p, align {whole // 2}, !nontemporal {nontemporal}",
            f"  store {half} %hi, ptr %upper, align {whole // 2}, !nontemporal {nontemporal}",
            "  ret void",
            "plain:",
        ]
    body += [f"  store {vector} %v, ptr %p, align {align}", "  ret void", "}"]
    return "\n".join(body)
