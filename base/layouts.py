"""The binary formats Ferry's Python side shares with the shim, taken from the
shim's C headers (tools/gen_layouts.py compiles them and writes `_layouts`;
`make shim` and the wheel's build run it).  Readers name members, never
offsets, so a header change reaches them at the next build; a member they
need that a header renamed or dropped is a LayoutError naming it.
"""
import struct
from functools import cached_property

try:
    from . import _layouts
except ImportError as e:  # pragma: no cover - a tree where the shim was never built
    raise ImportError("ferry.base._layouts is missing: `make shim` generates it from shim/src/*.h "
                      "(tools/gen_layouts.py)") from e


class LayoutError(LookupError):
    pass


def constant(name):
    """An enum constant or FERRY_* macro of the shim's headers: int, or bytes for a string."""
    try:
        return _layouts.CONSTANTS[name]
    except KeyError:
        raise LayoutError(f"the shim's headers define no {name}") from None


def constants(prefix):
    """{name without prefix: value} of every constant whose name starts with `prefix`."""
    return {k[len(prefix):]: v for k, v in _layouts.CONSTANTS.items() if k.startswith(prefix)}


class Layout:
    """One C struct as the compiler laid it out."""

    def __init__(self, name):
        try:
            self.size, self.members = _layouts.STRUCTS[name]
        except KeyError:
            raise LayoutError(f"the shim's headers define no struct {name}") from None
        self.name = name
        self._parts = {}

    def _member(self, member):
        try:
            return self.members[member]
        except KeyError:
            raise LayoutError(f"struct {self.name} has no member {member}") from None

    def offset(self, member):
        return self._member(member)[0]

    def span(self, member):
        """Bytes the member takes (0 for a flexible array member)."""
        return self._member(member)[1]

    def count(self, member):
        """Elements of an array member (1 for a scalar, 0 for a flexible array)."""
        return self._member(member)[2]

    def stride(self, member):
        """Bytes of one element of the member."""
        return self._member(member)[3]

    @cached_property
    def _codec(self):
        """(struct.Struct of every sized member, [(member, first value, values or 0 for one)])."""
        return self._build(None)

    def _build(self, only):
        fmt, pos, spec, flat = "<", 0, [], 0
        for member, (off, size, count, elem, kind) in sorted(self.members.items(), key=lambda m: m[1][0]):
            if not size or (only is not None and member not in only):
                continue  # a flexible array (the caller reads its elements), or not asked for
            if off > pos:
                fmt += f"{off - pos}x"
            n = 0
            if kind and kind != "s":
                fmt += f"{count}{kind}"
                n = count if size != elem else 0   # an array of numbers: a tuple
            else:
                fmt += f"{size}s"
            spec.append((member, flat, n))
            flat += n or 1
            pos = off + size
        if self.size > pos:
            fmt += f"{self.size - pos}x"
        return struct.Struct(fmt), spec

    @property
    def codec(self):
        """A struct.Struct of the whole struct: its values in member order (arrays of
        numbers flattened); `position` says where a member's value is."""
        return self._codec[0]

    def position(self, member):
        for name, flat, _n in self._codec[1]:
            if name == member:
                return flat
        raise LayoutError(f"struct {self.name} has no sized member {member}")

    def unpack(self, data, offset=0):
        """{member: value} of the struct at `offset`: an int, a tuple for an array of
        numbers, bytes for a char array, a nested struct or a pointer."""
        return _members(self._codec, data, offset)

    def unpack_only(self, data, members, offset=0):
        """{member: value} of `members` only, as `unpack` gives them: the other
        members are skipped, not copied out (a process record's header is 64 KiB,
        most of it tables that are read apart, or not at all)."""
        key = tuple(members)
        part = self._parts.get(key)
        if part is None:
            unknown = [m for m in key if m not in self.members]
            if unknown:
                raise LayoutError(f"struct {self.name} has no member {unknown[0]}")
            part = self._parts[key] = self._build(set(key))
        return _members(part, data, offset)

    def rows(self, data, offset, member, layout, count=None):
        """The elements of an array `member` of structs `layout` (a Layout), unpacked;
        the first `count` of them when given."""
        base = offset + self.offset(member)
        n = self.count(member) if count is None else min(count, self.count(member) or count)
        return [layout.unpack(data, base + i * layout.size) for i in range(n)]

    def pack_into(self, buf, offset=0, **values):
        """Write members into `buf` (what a test or tool that makes a file needs)."""
        for member, value in values.items():
            off, size, count, elem, kind = self._member(member)
            at = offset + off
            if kind and kind != "s":
                items = value if isinstance(value, (list, tuple)) else (value,)
                struct.pack_into(f"<{len(items)}{kind}", buf, at, *items)
            else:
                if len(value) > size:
                    raise ValueError(f"{self.name}.{member}: {len(value)} bytes, room for {size}")
                buf[at:at + len(value)] = value


def _members(part, data, offset):
    """{member: value} from a (codec, spec) of Layout._build."""
    codec, spec = part
    values = codec.unpack_from(data, offset)
    return {member: values[i:i + n] if n else values[i] for member, i, n in spec}


_cache = {}


def layout(name):
    """The Layout of `struct name` (e.g. "ferry_proc_header")."""
    if name not in _cache:
        _cache[name] = Layout(name)
    return _cache[name]


def describe(name):
    """Lines of `struct name` as the compiler laid it out: offset, size, member."""
    lay = layout(name)
    lines = [f"struct {name}: {lay.size} bytes"]
    for member, (off, size, count, elem, kind) in sorted(lay.members.items(), key=lambda m: m[1][0]):
        shape = f"[{count}] x {elem}" if size != elem else ""
        lines.append(f"  {off:>7}  {size or '-':>7}  {member}{shape}")
    return lines


if __name__ == "__main__":
    import sys
    for arg in sys.argv[1:] or sorted(_layouts.STRUCTS):
        print("\n".join(describe(arg)))
