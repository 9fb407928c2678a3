/* Modules `ferry instrument` rewrote (rewriter/pe_rewrite.py): each carries
 * a control block in a section `.ferryc` naming its own system-call stubs
 * and, per stub, a slot its rewritten entry jumps through.  ferry.dll gives
 * every slot a counting trampoline; a stub is named by the Nt function of
 * the loaded ntdll that has its SSN (what the call does on this build). */
#include <windows.h>
#include <winternl.h>

#include "ferry_dll.h"

#define CONTROL_VERSION 1

struct control_site {
    uint32_t entry, ssn, code, flags;
    uint64_t slot, reserved;
};

struct control {
    char magic[8];
    uint32_t version, n;
    struct control_site site[];
};

static struct control *control_of(uint8_t *base)
{
    IMAGE_NT_HEADERS64 *nt = (IMAGE_NT_HEADERS64 *)(base + ((IMAGE_DOS_HEADER *)base)->e_lfanew);
    IMAGE_SECTION_HEADER *sec = IMAGE_FIRST_SECTION(nt);
    static const char name[8] = ".ferryc";
    for (int i = 0; i < nt->FileHeader.NumberOfSections; i++) {
        int k = 0;
        while (k < 8 && sec[i].Name[k] == (uint8_t)name[k])
            k++;
        if (k < 8)
            continue;
        struct control *c = (struct control *)(base + sec[i].VirtualAddress);
        static const char magic[8] = "FERRYPE1";
        for (k = 0; k < 8; k++)
            if (c->magic[k] != magic[k])
                return 0;
        return c->version == CONTROL_VERSION ? c : 0;
    }
    return 0;
}

static void name_of(struct ferry_stub *s, const struct ferry_stub *named, int nnamed)
{
    for (int i = 0; i < nnamed; i++) {
        if (named[i].ssn == s->ssn) {
            ferry_copy(s->name, named[i].name, FERRY_WIN_NAME_MAX);
            return;
        }
    }
    static const char hex[] = "0123456789abcdef";
    char *p = s->name;
    ferry_copy(p, "ssn 0x", 6);
    p += 6;
    for (int sh = 12; sh >= 0; sh -= 4)
        if ((s->ssn >> sh) || sh == 0)
            *p++ = hex[(s->ssn >> sh) & 15];
    *p = 0;
}

void ferry_base_name(const UNICODE_STRING *full, char *out, int cap)
{
    const WCHAR *w = full ? full->Buffer : 0, *b = w;
    int len = w ? full->Length / 2 : 0;
    for (int i = 0; i < len; i++)
        if (w[i] == L'\\' || w[i] == L'/')
            b = w + i + 1;
    int n = w ? WideCharToMultiByte(CP_UTF8, 0, b, len - (int)(b - w), out, cap - 1, 0, 0) : 0;
    out[n > 0 ? n : 0] = 0;
}

int ferry_rewritten_stubs(uint8_t *base, struct ferry_stub *out, uint64_t **slots, int cap,
                          const struct ferry_stub *named, int nnamed)
{
    struct control *c = base ? control_of(base) : 0;
    if (!c || c->n == 0 || (int)c->n > cap)
        return 0;
    for (uint32_t k = 0; k < c->n; k++) {
        out[k].entry = base + c->site[k].entry;
        out[k].ssn = c->site[k].ssn;
        name_of(&out[k], named, nnamed);
        slots[k] = &c->site[k].slot;
    }
    return (int)c->n;
}

void ferry_each_module(void (*fn)(uint8_t *base, const UNICODE_STRING *full))
{
    PEB *peb;
    __asm__("movq %%gs:0x60, %0" : "=r"(peb));     /* the TEB's ProcessEnvironmentBlock */
    LIST_ENTRY *head = &peb->Ldr->InMemoryOrderModuleList;
    for (LIST_ENTRY *l = head->Flink; l != head; l = l->Flink) {
        LDR_DATA_TABLE_ENTRY *m = CONTAINING_RECORD(l, LDR_DATA_TABLE_ENTRY, InMemoryOrderLinks);
        if (m->DllBase)
            fn(m->DllBase, &m->FullDllName);
    }
}
