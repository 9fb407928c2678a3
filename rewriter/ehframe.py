"""Function ranges from .eh_frame.

Stripped binaries keep .eh_frame (the unwinder needs it), and each FDE names
the exact range of one function or one cold fragment.  LIEF does not expose
FDEs, so this reads the DWARF call-frame records directly: CIEs only for their
pointer encoding, FDEs only for pc_begin and pc_range.
"""
import struct

DW_EH_PE_omit = 0xFF
DW_EH_PE_pcrel = 0x10
DW_EH_PE_datarel = 0x30
DW_EH_PE_indirect = 0x80


def _leb128(data, pos, signed):
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            if signed and b & 0x40:
                result -= 1 << shift
            return result, pos


def _uleb(data, pos):
    return _leb128(data, pos, False)


def _sleb(data, pos):
    return _leb128(data, pos, True)


_FIXED = {0x00: "<Q", 0x02: "<H", 0x03: "<I", 0x04: "<Q", 0x0A: "<h", 0x0B: "<i", 0x0C: "<q"}


def _read_encoded(data, pos, enc, section_va):
    """Value and next position of a pointer encoded as `enc` at `pos`."""
    fmt = enc & 0x0F
    if fmt == 0x01:
        value, end = _uleb(data, pos)
    elif fmt == 0x09:
        value, end = _sleb(data, pos)
    elif fmt in _FIXED:
        size = struct.calcsize(_FIXED[fmt])
        (value,) = struct.unpack_from(_FIXED[fmt], data, pos)
        end = pos + size
    else:
        raise ValueError(f"unsupported pointer encoding {enc:#x}")
    if enc & 0x70 == DW_EH_PE_pcrel:
        value += section_va + pos
    return value & 0xFFFFFFFFFFFFFFFF, end


def _range_encoding(enc):
    """pc_range uses the value format of the pointer encoding, never pcrel."""
    return enc & 0x0F


def fde_ranges(data, section_va):
    """[(start, end)] of every FDE in an .eh_frame section's bytes."""
    ranges = []
    cie_encoding = {}
    pos = 0
    n = len(data)
    while pos + 4 <= n:
        (length,) = struct.unpack_from("<I", data, pos)
        if length == 0:
            break
        start = pos
        pos += 4
        if length == 0xFFFFFFFF:
            (length,) = struct.unpack_from("<Q", data, pos)
            pos += 8
        body = pos
        end = body + length
        if end > n:
            break
        (cie_id,) = struct.unpack_from("<I", data, body)
        try:
            if cie_id == 0:
                cie_encoding[start] = _cie_fde_encoding(data, body + 4, section_va)
            else:
                cie_pos = body - cie_id
                enc = cie_encoding.get(cie_pos)
                if enc is None:
                    # A CIE is always before its FDEs in practice; be lenient.
                    enc = 0x00
                p = body + 4
                pc_begin, p = _read_encoded(data, p, enc, section_va)
                pc_range, p = _read_encoded(data, p, _range_encoding(enc), section_va)
                if pc_begin and pc_range:
                    ranges.append((pc_begin, pc_begin + pc_range))
        except (ValueError, IndexError, struct.error):
            pass
        pos = end
    return ranges


def _cie_fde_encoding(data, pos, section_va):
    version = data[pos]
    pos += 1
    aug_end = data.index(b"\0", pos)
    aug = data[pos:aug_end].decode("ascii", "replace")
    pos = aug_end + 1
    if "eh" in aug:
        pos += 8
    _, pos = _uleb(data, pos)  # code alignment
    _, pos = _sleb(data, pos)  # data alignment
    if version == 1:
        pos += 1
    else:
        _, pos = _uleb(data, pos)  # return address register
    encoding = 0x00
    if aug.startswith("z"):
        _, pos = _uleb(data, pos)  # augmentation data length
        for ch in aug[1:]:
            if ch == "R":
                encoding = data[pos]
                pos += 1
            elif ch == "P":
                enc = data[pos]
                pos += 1
                _, pos = _read_encoded(data, pos, enc & ~DW_EH_PE_indirect, section_va)
            elif ch == "L":
                pos += 1
            elif ch in "SBG":
                continue
            else:
                break
    return encoding
