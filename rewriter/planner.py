"""Sites and their patch windows.

A window is a run of whole instructions around one `syscall` that is at least
five bytes long (room for `jmp rel32`).  The instructions it displaces run in
the trampoline instead, so each of them must be movable: no control flow, no
second syscall, no `endbr64`.  No address inside the window but its first byte
may be a branch target.  Among the windows that qualify, the planner prefers
the fewest instructions after the syscall (they run after the call returns,
also in a clone child), then the smallest window.
"""
import re
from dataclasses import dataclass, field

import capstone

from ..base.syscall_table import name_of

JMP_REL32_SIZE = 5
MAX_BEFORE = 6
MAX_AFTER = 4

_CONTROL = ("j", "call", "ret", "loop", "int", "ud", "hlt", "syscall", "sysenter", "sysexit",
            "iret", "xbegin", "xabort", "xend", "endbr", "lret", "retf")
_MOV_RAX = re.compile(r"^(?:eax|rax), (0x[0-9a-f]+|\d+)$")
_RAX_NAMES = {"rax", "eax", "ax", "al", "ah"}

_detail = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_detail.detail = True


@dataclass
class Site:
    id: int
    address: int
    section: str
    function: str = None
    function_start: int = None
    nr: int = None
    window: tuple = None          # (start, end) when patched
    before: list = field(default_factory=list)  # Insns displaced before the syscall
    after: list = field(default_factory=list)   # Insns displaced after it
    status: str = "unpatched"
    reason: str = None
    trampoline: int = None        # address, filled in by the patcher

    @property
    def name(self):
        return name_of(self.nr) if self.nr is not None else None

    @property
    def patched(self):
        return self.status == "patched"


def movable(insn):
    """Whether `insn` can run in a trampoline instead of where it is."""
    return not any(word.startswith(_CONTROL) for word in insn.mnemonic.split())


def _writes_rax(insn, read):
    code = read(insn.address, insn.size)
    if code is None:
        return True
    for d in _detail.disasm(code, insn.address):
        _, written = d.regs_access()
        return any(d.reg_name(r) in _RAX_NAMES for r in written)
    return True


def _static_nr(insns, k, targets, read):
    """The syscall number when the instructions just before the syscall set
    eax to a constant on every path that reaches it."""
    for m in range(k - 1, max(-1, k - 16), -1):
        insn = insns[m]
        if insn.mnemonic.startswith(("j", "ret", "call", "loop")):
            return None
        if _writes_rax(insn, read):
            hit = _MOV_RAX.match(insn.op_str)
            if insn.mnemonic == "mov" and hit:
                return int(hit.group(1), 0)
            if insn.mnemonic == "xor" and insn.op_str in ("eax, eax", "rax, rax"):
                return 0
            return None
        if insn.address in targets:
            return None  # other paths join here; we looked as far as is safe
    return None


def _window(insns, k, targets, taken):
    """The best (i, j) window around insns[k], or a reason why there is none:
    the fewest instructions after the syscall, then the fewest before."""
    reason = "no run of movable instructions of 5 bytes or more around the syscall"
    for after in range(0, MAX_AFTER + 1):
        j = k + after
        if j >= len(insns):
            break
        ok_after = all(movable(insns[m]) for m in range(k + 1, j + 1))
        if not ok_after:
            break
        if any(insns[m].address in targets for m in range(k + 1, j + 1)):
            reason = "a branch target lies right after the syscall"
            break
        for before in range(0, MAX_BEFORE + 1):
            i = k - before
            if i < 0:
                break
            if before and not movable(insns[i]):
                reason = f"'{insns[i].mnemonic}' before the syscall cannot be moved"
                break
            if before and insns[i + 1].address in targets:
                reason = "a branch target lies inside every candidate window"
                break
            start, end = insns[i].address, insns[j].end
            if end - start < JMP_REL32_SIZE:
                continue
            if any(s < end and start < e for s, e in taken):
                reason = "overlaps the window of another site"
                break
            if insns[k].address in targets and i != k:
                reason = "the syscall itself is a branch target"
                break
            return (i, j), None
    return None, reason


def plan(cmap):
    """Sites of a CodeMap, in address order, each patched or with its reason."""
    sites = []
    taken = []
    entries = sorted(cmap.sites, key=lambda t: t[0])
    all_addresses = sorted([(a, "site", r) for a, r in entries] +
                           [(a, "undecoded", None) for a in cmap.undecoded], key=lambda t: t[0])
    for index, (address, kind, region) in enumerate(all_addresses):
        func = cmap.function_of(address)
        section = cmap.section_of(address)
        site = Site(id=index, address=address, section=section.name if section else "?",
                    function=func[0] if func else None, function_start=func[1] if func else None)
        sites.append(site)
        if kind == "undecoded":
            site.reason = "not reached by decoding (data, or code the decoder could not follow)"
            continue
        insns = region.insns
        k = next(n for n, insn in enumerate(insns) if insn.address == address)
        site.nr = _static_nr(insns, k, cmap.targets, cmap.read)
        if not region.clean:
            site.reason = "the containing function did not decode cleanly"
            continue
        win, why = _window(insns, k, cmap.targets, taken)
        if win is None:
            site.reason = why
            continue
        i, j = win
        site.window = (insns[i].address, insns[j].end)
        site.before = insns[i:k]
        site.after = insns[k + 1:j + 1]
        site.status = "patched"
        taken.append(site.window)
    return sites
