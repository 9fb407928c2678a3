"""The code a patched site jumps to.

    T:   <instructions displaced from before the syscall>
         mov   rcx, [rip + ctl.vector]   ; NULL until the shim enabled this module
         jrcxz RAW                       ; tests without touching the flags
         lea   rsp, [rsp - 128]          ; step over the red zone
         lea   r11, [rip + site_record]
         call  [rcx]                     ; ferry_entry
    A:   lea   rsp, [rsp + 128]
         jmp   POST
    B:   lea   rsp, [rsp + 128]          ; the entry returns here (A + 10) for calls
         syscall                         ;   that must run at the program's rsp: clone,
         mov   rcx, [rip + ctl.vector]   ;   vfork, rt_sigreturn; then, in parent and
         jrcxz POST                      ;   child alike (the child on its own stack),
         lea   rsp, [rsp - 128]          ;   ferry_post_entry, which preserves
         call  [rcx + 8]                 ;   everything; unless `ferry detach` took the
         lea   rsp, [rsp + 128]          ;   vector away while the call ran (a new
         jmp   POST                      ;   thread would find it NULL)
    RAW: syscall                         ; the shim is not there (yet)
    POST:<instructions displaced from after the syscall>
         jmp   <end of the window>

Only rcx and r11 change on the way, which `syscall` clobbers anyway; `lea`
and `jrcxz` leave the flags alone.  Displaced instructions keep their bytes;
those that address memory relative to rip get a new displacement.
"""
import struct

import capstone
import keystone

from . import layout
from .planner import JMP_REL32_SIZE

# mov rcx,[rip+d] 7 + jrcxz 2 + lea rsp,[rsp-128] 5 + lea r11,[rip+d] 7 + call [rcx] 2
# + lea rsp,[rsp+128] 8 + jmp short 2
# + lea rsp,[rsp+128] 8 + syscall 2 + mov rcx,[rip+d] 7 + jrcxz 2 + lea rsp,[rsp-128] 5
#   + call [rcx+8] 3 + lea rsp,[rsp+128] 8 + jmp short 2
# + syscall 2
GLUE_SIZE = 72

_ks = keystone.Ks(keystone.KS_ARCH_X86, keystone.KS_MODE_64)
_cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_cs.detail = True

_GLUE = """mov rcx, qword ptr [rip + {vector}]
jrcxz raw
lea rsp, [rsp - 0x80]
lea r11, [rip + {record}]
call qword ptr [rcx]
lea rsp, [rsp + 0x80]
jmp post
lea rsp, [rsp + 0x80]
syscall
mov rcx, qword ptr [rip + {vector2}]
jrcxz post
lea rsp, [rsp - 0x80]
call qword ptr [rcx + 8]
lea rsp, [rsp + 0x80]
jmp post
raw: syscall
post:
"""
# Offsets inside the glue, checked against what Keystone produced.
_AFTER_VECTOR_LOAD = 7
_AFTER_RECORD_LEA = 7 + 2 + 5 + 7
_LABEL_A = 7 + 2 + 5 + 7 + 2
_LABEL_B = _LABEL_A + layout.TRAMP_RAW_DELTA
_AFTER_VECTOR_RELOAD = _LABEL_B + 8 + 2 + 7


class TrampolineError(Exception):
    pass


def size(site):
    """Bytes the trampoline of `site` takes."""
    moved = sum(insn.size for insn in site.before + site.after)
    return moved + GLUE_SIZE + JMP_REL32_SIZE


def relocate(insn_bytes, old_address, new_address, fields=None):
    """`insn_bytes` moved from `old_address` to `new_address`, with a
    rip-relative displacement adjusted so it still reaches the same place.
    The offset of that displacement in the instruction is appended to
    `fields` (it refers into the module: a load-time plan must move it)."""
    insn = next(_cs.disasm(insn_bytes, old_address), None)
    if insn is None or insn.size != len(insn_bytes):
        raise TrampolineError(f"cannot decode instruction at {old_address:#x}")
    if "rip" not in insn.op_str:
        return insn_bytes
    if insn.disp_size != 4:
        raise TrampolineError(f"rip-relative instruction at {old_address:#x} without disp32")
    target = old_address + insn.size + insn.disp
    disp = target - (new_address + insn.size)
    if not -(1 << 31) <= disp < (1 << 31):
        raise TrampolineError(f"{new_address:#x}: displacement out of range")
    off = insn.disp_offset
    if fields is not None:
        fields.append(off)
    return insn_bytes[:off] + struct.pack("<i", disp) + insn_bytes[off + 4:]


def _assemble(source, address):
    encoding, _ = _ks.asm(source, address)
    return bytes(encoding or b"")


def glue(address, vector_address, record_address):
    code = _assemble(_GLUE.format(vector=vector_address - (address + _AFTER_VECTOR_LOAD),
                                  record=record_address - (address + _AFTER_RECORD_LEA),
                                  vector2=vector_address - (address + _AFTER_VECTOR_RELOAD)), address)
    if len(code) != GLUE_SIZE or code[_LABEL_A - 2:_LABEL_A] != b"\xff\x11" \
            or code[_LABEL_B:_LABEL_B + 8] != b"\x48\x8d\xa4\x24\x80\x00\x00\x00":
        raise TrampolineError(f"unexpected glue encoding at {address:#x}: {code.hex()}")
    return code


def jmp_rel32(address, target):
    code = _assemble(f"jmp {target:#x}", address)
    if len(code) != JMP_REL32_SIZE:  # Keystone chose a short jump: encode ours
        rel = target - (address + JMP_REL32_SIZE)
        code = b"\xe9" + struct.pack("<i", rel)
    return code


def build(site, address, vector_address, record_address, read, module_refs=None):
    """Bytes of the trampoline of `site` placed at `address`.  The offsets of
    the rel32 fields that refer into the module (displaced rip-relative
    operands, the jump back) are appended to `module_refs`; the glue's refer
    only to the control block, which always keeps its distance."""
    out = bytearray()

    def moved(insn):
        fields = []
        code = relocate(read(insn.address, insn.size), insn.address, address + len(out), fields)
        if module_refs is not None:
            module_refs.extend(len(out) + f for f in fields)
        return code

    for insn in site.before:
        out += moved(insn)
    out += glue(address + len(out), vector_address, record_address)
    for insn in site.after:
        out += moved(insn)
    if module_refs is not None:
        module_refs.append(len(out) + 1)
    out += jmp_rel32(address + len(out), site.window[1])
    return bytes(out)


def window_patch(site, trampoline_address):
    """What replaces the window: a jump to the trampoline, then int3 so that
    anything landing inside the window traps instead of running garbage."""
    start, end = site.window
    return jmp_rel32(start, trampoline_address) + b"\xcc" * (end - start - JMP_REL32_SIZE)
