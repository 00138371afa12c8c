"""Generates one Python module per Kafka message from its JSON specification.

For a message the module holds slots dataclasses (the message and its nested/common
structs, one class covering every version; fields absent from a version keep their
defaults) and, for every version semel supports, a decoder ``(buf, pos) -> (msg, pos)`` and
an encoder ``(msg, out: bytearray)``. Versions whose generated bodies are identical share one
function. Neighbouring fixed-width fields are read and written with one ``struct`` call.

Decoders check every length and count against the remaining bytes (see
``protocol.primitives``); ``decode()`` converts any low-level failure into ProtocolError.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

from semel.protocol.api import snake

FIXED = {  # type -> (struct code, size)
    "bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2),
    "int32": ("i", 4), "uint32": ("I", 4), "int64": ("q", 8), "float64": ("d", 8),
    "uuid": ("16s", 16),
}
VARIABLE = {"string", "bytes", "records"}


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int | None  # None: open-ended

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)  # empty
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, v: int) -> bool:
        return v >= self.lo and (self.hi is None or v <= self.hi)


@dataclass
class Field:
    name: str
    py: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: str | None
    flexible_override: Versions | None
    struct: str | None = None  # element or field struct name

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class Struct:
    name: str
    fields: list[Field] = field(default_factory=list)


def py_name(name: str) -> str:
    s = snake(name)
    return s + "_" if keyword.iskeyword(s) else s


class MessageModel:
    """A parsed spec: its structs in dependency order (children first)."""

    def __init__(self, spec: dict) -> None:
        self.name: str = spec["name"]
        self.api_key: int | None = spec.get("apiKey")
        self.valid = Versions.parse(spec["validVersions"])
        self.flexible = Versions.parse(spec.get("flexibleVersions", "none"))
        self.structs: dict[str, Struct] = {}
        self._order: list[str] = []
        common = {c["name"]: c for c in spec.get("commonStructs", [])}
        self._common = common
        self.root = self._struct(self.name, spec["fields"])

    def _struct(self, name: str, fields: list[dict]) -> Struct:
        if name in self.structs:
            return self.structs[name]
        st = Struct(name)
        self.structs[name] = st
        for f in fields:
            fld = Field(
                name=f["name"], py=py_name(f["name"]), type=f["type"],
                versions=Versions.parse(f.get("versions")),
                nullable=Versions.parse(f.get("nullableVersions", "none")),
                tagged=Versions.parse(f.get("taggedVersions", "none")),
                tag=f.get("tag"), default=f.get("default"),
                flexible_override=(Versions.parse(f["flexibleVersions"])
                                   if "flexibleVersions" in f else None),
            )
            elem = fld.elem
            if elem not in FIXED and elem not in VARIABLE:
                fld.struct = elem
                if "fields" in f:
                    self._struct(elem, f["fields"])
                elif elem in self._common:
                    self._struct(elem, self._common[elem]["fields"])
                elif elem not in self.structs:
                    raise ValueError(f"{self.name}: unknown type {elem}")
            st.fields.append(fld)
        self._order.append(name)
        return st

    @property
    def ordered(self) -> list[Struct]:
        return [self.structs[n] for n in self._order]


# ---- defaults --------------------------------------------------------------------------

def default_expr(f: Field) -> str:
    """A Python expression for the field's default (fresh object for mutables)."""
    d = f.default
    if isinstance(d, bool):
        d = "true" if d else "false"
    elif isinstance(d, (int, float)):
        d = str(d)
    if f.is_array:
        return "None" if d == "null" else "[]"
    if f.struct:
        return "None" if d == "null" else f"{f.struct}()"
    t = f.type
    if d == "null":
        return "None"
    if t == "bool":
        return "True" if (d or "false").lower() == "true" else "False"
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return str(int(d, 0)) if d not in (None, "") else "0"
    if t == "float64":
        return repr(float(d)) if d not in (None, "") else "0.0"
    if t == "string":
        return repr(d or "")
    if t == "uuid":
        return "_ZERO_UUID"
    if t == "bytes":
        return "b''"
    if t == "records":
        return "None"
    raise ValueError(t)


def is_immutable_default(expr: str) -> bool:
    return expr not in ("[]",) and not expr.endswith("()")


# ---- code emission ---------------------------------------------------------------------

class Emitter:
    def __init__(self, model: MessageModel, versions: list[int]) -> None:
        self.m = model
        self.versions = versions
        self.structs_codes: dict[str, None] = {}  # struct formats used, ordered
        # (prefix, struct, version) -> the function that serves it after deduplication
        self.canon: dict[tuple[str, str, int], str] = {}
        self.lines: list[str] = []

    def flexible(self, v: int) -> bool:
        return v in self.m.flexible

    def _fmt_name(self, fmt: str) -> str:
        self.structs_codes[fmt] = None
        return "_S_" + fmt.replace("16s", "u").replace("?", "o")

    # -- decode -------------------------------------------------------------------------

    def decode_value(self, f: Field, v: int, target: str, buf: str, ind: str) -> list[str]:
        """Lines that read field ``f`` (present, untagged or tagged) into ``target``."""
        flex = self.flexible(v) if f.flexible_override is None else v in f.flexible_override
        nullable = v in f.nullable
        out: list[str] = []
        if f.is_array:
            if flex:  # fast path: a one-byte count (< 127 elements, not null)
                out.append(f"{ind}_n = {buf}[pos] - 1")
                out.append(f"{ind}if 0 <= _n < 0x7f:")
                out.append(f"{ind}    pos += 1")
                out.append(f"{ind}else:")
                out.append(f"{ind}    _n, pos = _read_compact_array_len({buf}, pos, {nullable})")
            else:
                out.append(f"{ind}_n, pos = _read_array_len({buf}, pos, {nullable})")
            out.append(f"{ind}if _n < 0:")
            out.append(f"{ind}    {target} = None")
            out.append(f"{ind}else:")
            e = f.elem
            if e in FIXED:
                code, size = FIXED[e]
                if e == "uuid":
                    out.append(f"{ind}    {target} = [_UUID(bytes=bytes({buf}[pos + 16 * _i:"
                               f"pos + 16 * _i + 16])) for _i in range(_n)]")
                    out.append(f"{ind}    if pos + 16 * _n > len({buf}): raise _PE('truncated')")
                else:
                    out.append(f"{ind}    {target} = list(_unpack_from(f'>{{_n}}{code}', "
                               f"{buf}, pos))")
                out.append(f"{ind}    pos += {size} * _n")
            else:
                out.append(f"{ind}    {target} = _l = []")
                out.append(f"{ind}    for _ in range(_n):")
                out.append(f"{ind}        _x, pos = {self.reader(f, e, v, flex, False)}({buf}, pos)")
                out.append(f"{ind}        _l.append(_x)")
            return out
        if f.struct:
            if nullable:
                out.append(f"{ind}if {buf}[pos] == 0xff:")
                out.append(f"{ind}    {target} = None; pos += 1")
                out.append(f"{ind}else:")
                out.append(f"{ind}    pos += 1")
                out.append(f"{ind}    {target}, pos = {self.canon[('_d', f.struct, v)]}({buf}, pos)")
            else:
                out.append(f"{ind}{target}, pos = {self.canon[('_d', f.struct, v)]}({buf}, pos)")
            return out
        if f.type in FIXED:
            code, size = FIXED[f.type]
            out.append(f"{ind}({target},) = {self._fmt_name(code)}.unpack_from({buf}, pos)")
            if f.type == "uuid":
                out.append(f"{ind}{target} = _UUID(bytes={target})")
            out.append(f"{ind}pos += {size}")
            return out
        out.append(f"{ind}{target}, pos = {self.reader(f, f.type, v, flex, nullable)}({buf}, pos)")
        return out

    def reader(self, f: Field, t: str, v: int, flex: bool, nullable: bool) -> str:
        if t == "string":
            return {(False, False): "_read_string", (False, True): "_read_nullable_string",
                    (True, False): "_read_compact_string",
                    (True, True): "_read_compact_nullable_string"}[(flex, nullable)]
        if t == "bytes":
            return {(False, False): "_read_bytes", (False, True): "_read_nullable_bytes",
                    (True, False): "_read_compact_bytes",
                    (True, True): "_read_compact_nullable_bytes"}[(flex, nullable)]
        if t == "records":
            return "_read_compact_records" if flex else "_read_records"
        return self.canon[("_d", t, v)]

    def decode_body(self, st: Struct, v: int) -> list[str]:
        lines: list[str] = []
        regular = [f for f in st.fields if v in f.versions and v not in f.tagged]
        tagged = sorted((f for f in st.fields if v in f.versions and v in f.tagged),
                        key=lambda f: f.tag)
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in FIXED and not f.is_array:
                group = [f]
                while i + 1 < len(regular) and regular[i + 1].type in FIXED \
                        and not regular[i + 1].is_array:
                    i += 1
                    group.append(regular[i])
                if len(group) == 1:
                    lines += self.decode_value(f, v, "v_" + f.py, "buf", "    ")
                else:
                    fmt = "".join(FIXED[g.type][0] for g in group)
                    size = sum(FIXED[g.type][1] for g in group)
                    names = ", ".join("v_" + g.py for g in group)
                    lines.append(f"    ({names},) = {self._fmt_name(fmt)}.unpack_from(buf, pos)")
                    lines.append(f"    pos += {size}")
                    for g in group:
                        if g.type == "uuid":
                            lines.append(f"    v_{g.py} = _UUID(bytes=v_{g.py})")
            else:
                lines += self.decode_value(f, v, "v_" + f.py, "buf", "    ")
            i += 1
        if self.flexible(v):
            for f in tagged:
                lines.append(f"    v_{f.py} = {default_expr(f)}")
            if tagged:
                lines.append("    _nt, pos = _read_uvarint(buf, pos)")
                lines.append("    for _ in range(_nt):")
                lines.append("        _tag, _end, pos = _read_tagged_header(buf, pos)")
                kw = "if"
                for f in tagged:
                    lines.append(f"        {kw} _tag == {f.tag}:")
                    lines.append("            _b = buf[:_end]")
                    lines += self.decode_value(f, v, "v_" + f.py, "_b", "            ")
                    lines.append("            _check_end(pos, _end)")
                    kw = "elif"
                lines.append("        else:")
                lines.append("            pos = _end")
            else:  # almost always an empty tagged-field section: one zero byte
                lines.append("    if buf[pos] == 0:")
                lines.append("        pos += 1")
                lines.append("    else:")
                lines.append("        pos = _skip_tagged_fields(buf, pos)")
        args = []
        for f in st.fields:
            if v in f.versions:
                args.append("v_" + f.py)
            else:
                args.append(default_expr(f))
        lines.append(f"    return {st.name}({', '.join(args)}), pos")
        return lines

    # -- encode -------------------------------------------------------------------------

    def encode_value(self, f: Field, v: int, expr: str, out: str, ind: str) -> list[str]:
        flex = self.flexible(v) if f.flexible_override is None else v in f.flexible_override
        nullable = v in f.nullable
        lines: list[str] = []
        if f.is_array:
            lines.append(f"{ind}_a = {expr}")
            lines.append(f"{ind}if _a is None:")
            if nullable:
                null = "0" if flex else "255, 255, 255, 255"
                lines.append(f"{ind}    {out} += bytes(({null},))")
            else:
                lines.append(f"{ind}    raise _PE('null in non-nullable array {f.name}')")
            lines.append(f"{ind}else:")
            if flex:
                lines.append(f"{ind}    _write_uvarint({out}, len(_a) + 1)")
            else:
                lines.append(f"{ind}    {out} += _INT32.pack(len(_a))")
            e = f.elem
            if e in FIXED:
                code, _ = FIXED[e]
                if e == "uuid":
                    lines.append(f"{ind}    for _x in _a: {out} += _x.bytes")
                else:
                    lines.append(f"{ind}    {out} += _pack(f'>{{len(_a)}}{code}', *_a)")
            elif e in VARIABLE:
                lines.append(f"{ind}    for _x in _a: {self.writer(e, flex, False)}({out}, _x)")
            else:
                lines.append(f"{ind}    for _x in _a: {self.canon[('_e', e, v)]}(_x, {out})")
            return lines
        if f.struct:
            if nullable:
                lines.append(f"{ind}if {expr} is None:")
                lines.append(f"{ind}    {out}.append(0xff)")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {out}.append(1)")
                lines.append(f"{ind}    {self.canon[('_e', f.struct, v)]}({expr}, {out})")
            else:
                lines.append(f"{ind}{self.canon[('_e', f.struct, v)]}({expr}, {out})")
            return lines
        if f.type in FIXED:
            code, _ = FIXED[f.type]
            val = f"{expr}.bytes" if f.type == "uuid" else expr
            lines.append(f"{ind}{out} += {self._fmt_name(code)}.pack({val})")
            return lines
        lines.append(f"{ind}{self.writer(f.type, flex, nullable)}({out}, {expr})")
        return lines

    def writer(self, t: str, flex: bool, nullable: bool) -> str:
        base = {"string": "string", "bytes": "bytes", "records": "bytes"}[t]
        if t == "records":
            nullable = True
        return "_write_" + ("compact_" if flex else "") + ("nullable_" if nullable else "") + base

    def encode_body(self, st: Struct, v: int) -> list[str]:
        lines: list[str] = []
        regular = [f for f in st.fields if v in f.versions and v not in f.tagged]
        tagged = sorted((f for f in st.fields if v in f.versions and v in f.tagged),
                        key=lambda f: f.tag)
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in FIXED and not f.is_array:
                group = [f]
                while i + 1 < len(regular) and regular[i + 1].type in FIXED \
                        and not regular[i + 1].is_array:
                    i += 1
                    group.append(regular[i])
                if len(group) == 1:
                    lines += self.encode_value(f, v, "o." + f.py, "out", "    ")
                else:
                    fmt = "".join(FIXED[g.type][0] for g in group)
                    vals = ", ".join(f"o.{g.py}.bytes" if g.type == "uuid" else f"o.{g.py}"
                                     for g in group)
                    lines.append(f"    out += {self._fmt_name(fmt)}.pack({vals})")
            else:
                lines += self.encode_value(f, v, "o." + f.py, "out", "    ")
            i += 1
        if self.flexible(v):
            if not tagged:
                lines.append("    out.append(0)")
            else:
                lines.append("    _tf = []")
                for f in tagged:
                    d = default_expr(f)
                    if d == "[]":
                        cond = f"o.{f.py}"
                    elif d.endswith("()"):
                        cond = f"o.{f.py} != {d}"
                    elif d == "None":
                        cond = f"o.{f.py} is not None"
                    else:
                        cond = f"o.{f.py} != {d}"
                    lines.append(f"    if {cond}:")
                    lines.append("        _t = bytearray()")
                    lines += self.encode_value(f, v, "o." + f.py, "_t", "        ")
                    lines.append(f"        _tf.append(({f.tag}, _t))")
                lines.append("    _write_tagged_fields(out, _tf)")
        if not lines:
            lines.append("    pass")
        return lines

    # -- module -------------------------------------------------------------------------

    def dataclass_lines(self, st: Struct) -> list[str]:
        """A slots class with __init__/__eq__/__repr__ written out (what @dataclass would
        make, without running dataclass machinery at import: it keeps start-up fast)."""
        lines = [f"class {st.name}:"]
        names = [f.py for f in st.fields]
        lines.append(f"    __slots__ = ({''.join(repr(n) + ', ' for n in names)})")
        lines.append("    __hash__ = None  # mutable, compared by value")
        if not st.fields:
            lines += ["", "    def __eq__(self, other):",
                      "        return other.__class__ is self.__class__",
                      "", "    def __repr__(self):", f"        return '{st.name}()'"]
            return lines
        params = []
        body = []
        for f in st.fields:
            d = default_expr(f)
            ann = self.annotation(f)
            if is_immutable_default(d):
                params.append(f"{f.py}: {ann} = {d}")
                body.append(f"        self.{f.py} = {f.py}")
            else:
                params.append(f"{f.py}: {ann} = _FRESH")
                body.append(f"        self.{f.py} = {d} if {f.py} is _FRESH else {f.py}")
        lines.append("")
        lines.append(f"    def __init__(self, {', '.join(params)}) -> None:")
        lines += body
        own = ", ".join(f"self.{n}" for n in names)
        other = ", ".join(f"other.{n}" for n in names)
        lines += ["", "    def __eq__(self, other):",
                  "        if other.__class__ is not self.__class__:",
                  "            return NotImplemented",
                  f"        return ({own},) == ({other},)",
                  "", "    def __repr__(self):",
                  f"        return f'{st.name}("
                  + ", ".join(f"{n}={{self.{n}!r}}" for n in names) + ")'"]
        return lines

    def annotation(self, f: Field) -> str:
        base = {"bool": "bool", "int8": "int", "int16": "int", "uint16": "int", "int32": "int",
                "uint32": "int", "int64": "int", "float64": "float", "uuid": "UUID",
                "string": "str", "bytes": "bytes", "records": "Any"}.get(f.elem, f.elem)
        ann = f"list[{base}]" if f.is_array else base
        if (f.nullable.hi is None or f.nullable.lo <= f.nullable.hi) and f.type != "records":
            ann += " | None"
        return f"'{ann}'"

    def generate(self, source: str) -> str:
        m = self.m
        body: list[str] = []
        for st in m.ordered:
            body += self.dataclass_lines(st)
            body += ["", ""]
        dec_names: dict[int, str] = {}
        enc_names: dict[int, str] = {}
        for st in m.ordered:
            seen_d: dict[str, str] = {}
            seen_e: dict[str, str] = {}
            for v in self.versions:
                d = "\n".join(self.decode_body(st, v))
                name = f"_d_{st.name}_v{v}"
                if d in seen_d:
                    self.canon[("_d", st.name, v)] = seen_d[d]
                else:
                    self.canon[("_d", st.name, v)] = name
                    seen_d[d] = name
                    body.append(f"def {name}(buf, pos):")
                    body.append(d)
                e = "\n".join(self.encode_body(st, v))
                name_e = f"_e_{st.name}_v{v}"
                if e in seen_e:
                    self.canon[("_e", st.name, v)] = seen_e[e]
                else:
                    self.canon[("_e", st.name, v)] = name_e
                    seen_e[e] = name_e
                    body.append(f"def {name_e}(o, out):")
                    body.append(e)
                body.append("")
                if st is m.root:
                    dec_names[v] = self.canon[("_d", st.name, v)]
                    enc_names[v] = self.canon[("_e", st.name, v)]
        first_flex = m.flexible.lo if any(self.flexible(v) for v in self.versions) else None
        if first_flex is not None:
            first_flex = min(v for v in self.versions if self.flexible(v))
        body.append(f"MESSAGE = {m.name}")
        body.append(f"FIRST_FLEXIBLE = {first_flex}")
        body.append("# Kafka field types by class and attribute (for tests and tools).")
        body.append("FIELD_TYPES = {")
        for st in m.ordered:
            types = ", ".join(f"{f.py!r}: {f.type!r}" for f in st.fields)
            body.append(f"    {st.name!r}: {{{types}}},")
        body.append("}")
        body.append("DECODERS = {" + ", ".join(f"{v}: {n}" for v, n in dec_names.items()) + "}")
        body.append("ENCODERS = {" + ", ".join(f"{v}: {n}" for v, n in enc_names.items()) + "}")
        body.append("")
        body.append("")
        body.append(f"def decode(version: int, buf, pos: int = 0) -> tuple[{m.name}, int]:")
        body.append("    return _decode_guarded(DECODERS[version], buf, pos)")
        body.append("")
        body.append("")
        body.append(f"def encode(version: int, msg: {m.name}, out: bytearray | None = None)"
                    " -> bytearray:")
        body.append("    if out is None:")
        body.append("        out = bytearray()")
        body.append("    ENCODERS[version](msg, out)")
        body.append("    return out")
        body.append("")
        structs = []
        for fmt in self.structs_codes:
            structs.append(f"{self._fmt_name(fmt)} = _Struct('>{fmt}')")
        vr = f"{self.versions[0]}-{self.versions[-1]}"
        header = [
            f'"""Generated codec for {m.name}, versions {vr}. Do not edit.',
            "",
            f"Generated by protocol.codegen from the {source} specification.",
            '"""',
            "# ruff: noqa",
            "from __future__ import annotations",
            "",
            "from struct import Struct as _Struct, pack as _pack, unpack_from as _unpack_from",
            "from typing import Any",
            "from uuid import UUID",
            "",
            "from semel.protocol.errors import ProtocolError as _PE",
            "from semel.protocol.primitives import (",
            "    INT32 as _INT32, ZERO_UUID as _ZERO_UUID, check_end as _check_end,",
            "    decode_guarded as _decode_guarded,",
            "    read_array_len as _read_array_len, read_bytes as _read_bytes,",
            "    read_compact_array_len as _read_compact_array_len,",
            "    read_compact_bytes as _read_compact_bytes,",
            "    read_compact_nullable_bytes as _read_compact_nullable_bytes,",
            "    read_compact_nullable_string as _read_compact_nullable_string,",
            "    read_compact_records as _read_compact_records,",
            "    read_compact_string as _read_compact_string,",
            "    read_nullable_bytes as _read_nullable_bytes,",
            "    read_nullable_string as _read_nullable_string, read_records as _read_records,",
            "    read_string as _read_string, read_tagged_header as _read_tagged_header,",
            "    read_uvarint as _read_uvarint, skip_tagged_fields as _skip_tagged_fields,",
            "    write_bytes as _write_bytes, write_compact_bytes as _write_compact_bytes,",
            "    write_compact_nullable_bytes as _write_compact_nullable_bytes,",
            "    write_compact_nullable_string as _write_compact_nullable_string,",
            "    write_compact_string as _write_compact_string,",
            "    write_nullable_bytes as _write_nullable_bytes,",
            "    write_nullable_string as _write_nullable_string, write_string as _write_string,",
            "    write_tagged_fields as _write_tagged_fields, write_uvarint as _write_uvarint,",
            ")",
            "",
            "_UUID = UUID",
            "_FRESH = object()  # default marker: a new list/struct per instance",
            *structs,
            "",
            "",
        ]
        text = "\n".join(header + body) + "\n"
        return re.sub(r"\n{3,}(?=(def |_d_|_e_))", "\n\n", text)
