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

int ferry_find_rewritten(struct ferry_stub *out, uint64_t **slots, int cap,
                         const struct ferry_stub *named, int nnamed, struct ferry_module *mods,
                         int maxmods, int *nmods)
{
    PEB *peb;
    __asm__("movq %%gs:0x60, %0" : "=r"(peb));     /* the TEB's ProcessEnvironmentBlock */
    LIST_ENTRY *head = &peb->Ldr->InMemoryOrderModuleList;
    int n = 0;
    for (LIST_ENTRY *l = head->Flink; l != head && *nmods < maxmods; l = l->Flink) {
        LDR_DATA_TABLE_ENTRY *m = CONTAINING_RECORD(l, LDR_DATA_TABLE_ENTRY, InMemoryOrderLinks);
        uint8_t *base = m->DllBase;
        struct control *c = base ? control_of(base) : 0;
        if (!c || c->n == 0 || n + (int)c->n > cap)
            continue;
        struct ferry_module *mod = &mods[(*nmods)++];
        mod->first = n;
        mod->nsites = (int)c->n;
        const WCHAR *full = m->FullDllName.Buffer, *b = full;
        for (USHORT i = 0; full && i < m->FullDllName.Length / 2; i++)
            if (full[i] == L'\\' || full[i] == L'/')
                b = full + i + 1;
        int len = full ? (int)(m->FullDllName.Length / 2 - (b - full)) : 0;
        int w = WideCharToMultiByte(CP_UTF8, 0, b, len, mod->name, sizeof(mod->name) - 1, 0, 0);
        mod->name[w > 0 ? w : 0] = 0;
        for (uint32_t k = 0; k < c->n; k++, n++) {
            out[n].entry = base + c->site[k].entry;
            out[n].ssn = c->site[k].ssn;
            name_of(&out[n], named, nnamed);
            slots[n] = &c->site[k].slot;
        }
    }
    return n;
}
