/* The page, linked into the binary: the server reads no file at run time. */
    .section .rodata
    .balign 64
    .globl net_page_start, net_page_end
net_page_start:
    .incbin "index.html"
net_page_end:
#ifdef __ELF__
    .section .note.GNU-stack,"",@progbits
#endif
