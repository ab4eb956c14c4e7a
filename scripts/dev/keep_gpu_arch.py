#!/usr/bin/env python3
"""Keep one GPU architecture's code in a CUDA library: `keep_gpu_arch.py IN OUT [ARCH]`.

LibTorch's libtorch_cuda.so carries its kernels for every architecture it supports (sm_75 ...
sm_120) in the `.nv_fatbin` section: about 310 MB that do not compress. The lent GPU machines
(H100, H200) are sm_90, so `scripts/gpu.sh pack` writes a copy in which every kernel image of
another architecture is zeroed in place: the headers, sizes and offsets stay as they were (the
CUDA driver still reads every entry's header and picks the sm_90 image), and the zeros compress
to nothing. A fat binary with no image of ARCH is left whole. Standard library only.

Fat binary layout (as the CUDA runtime reads it): a header {u32 magic 0xBA55ED50, u16 version,
u16 header size, u64 size of the entries}, then entries {u16 kind (1 PTX, 2 ELF), u16, u32 entry
header size, u64 payload size, u32, u32, u16 minor, u16 major, u32 arch, ...} each followed by
its payload.
"""
import shutil
import struct
import sys

MAGIC = 0xBA55ED50


def fatbin_section(path):
    """The file offset and size of the ELF64 section `.nv_fatbin`."""
    with open(path, "rb") as f:
        elf = f.read(64)
        if elf[:5] != b"\x7fELF\x02":
            sys.exit(f"{path}: not a 64-bit ELF file")
        shoff, = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
        _, _, _, _, names_off, names_size = sections[shstrndx]
        f.seek(names_off)
        names = f.read(names_size)
    for name, _, _, _, offset, size in sections:
        if names[name:names.index(b"\0", name)] == b".nv_fatbin":
            return offset, size
    sys.exit(f"{path}: no .nv_fatbin section")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    arch = int(sys.argv[3]) if len(sys.argv) > 3 else 90
    off, size = fatbin_section(src)
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(off)
        data = bytearray(f.read(size))
        pos, fatbins, zeroed, kept = 0, 0, 0, 0
        while pos < size:
            if pos % 8:
                pos += 8 - pos % 8
                continue
            if pos + 16 > size:
                break
            magic, _, header, entries_size = struct.unpack_from("<IHHQ", data, pos)
            if magic != MAGIC:
                if data[pos] != 0:
                    sys.exit(f"{src}: no fat binary header at section offset {pos:#x}")
                pos += 8  # padding between fat binaries
                continue
            fatbins += 1
            start, end = pos + header, pos + header + entries_size
            entries, e = [], start
            while e < end:
                _, _, entry_header, payload = struct.unpack_from("<HHIQ", data, e)
                entry_arch = struct.unpack_from("<I", data, e + 28)[0]
                entries.append((e + entry_header, payload, entry_arch))
                e += entry_header + payload
            if e != end:
                sys.exit(f"{src}: fat binary at {pos:#x} has entries past its end")
            if any(a == arch for _, _, a in entries):
                for p, n, a in entries:
                    if a == arch:
                        kept += n
                    else:
                        data[p:p + n] = bytes(n)
                        zeroed += n
            else:
                kept += sum(n for _, n, _ in entries)
            pos = end
        f.seek(off)
        f.write(data)
    print(f"{dst}: {fatbins} fat binaries, kept {kept / 1e6:.1f} MB (sm_{arch} or "
          f"no sm_{arch} image), zeroed {zeroed / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
