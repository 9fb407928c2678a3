/* Group configurations on Windows: the default (pools of ferry.dll's
 * threads, routes by Nt call name), validation, and the profile's settings
 * (FERRY_AGG, the format profiles/aggenv.py writes; route numbers are
 * ferry.dll's stub indices). */
#include <windows.h>

#include "wagg.h"

static struct ferry_group_config profile;
static int profile_set, aggregating;
unsigned wagg_carriers = 1;
int wagg_threads_fibers;

/* Blocking file and device calls a pool's workers run as the program's
 * thread would; the rest stays on the calling thread.  Waits on objects do
 * not move: a mutant waited for belongs to the thread that waited. */
static const char *const to_pool[] = {
    "NtReadFile", "NtWriteFile", "NtReadFileScatter", "NtWriteFileGather", "NtFlushBuffersFile",
    "NtDeviceIoControlFile", "NtFsControlFile", "NtCreateFile", "NtOpenFile", "NtClose",
    "NtQueryInformationFile", "NtSetInformationFile", "NtQueryAttributesFile",
    "NtQueryFullAttributesFile", "NtQueryVolumeInformationFile", "NtQueryDirectoryFile",
    "NtQueryDirectoryFileEx", "NtDelayExecution", "NtYieldExecution", 0,
};
static const char *const to_worker[] = {
    "NtLockFile", "NtUnlockFile", "NtNotifyChangeDirectoryFile", 0,
};

static void route_names(struct ferry_group_config *cfg, const char *const *names, unsigned char to)
{
    for (int i = 0; names[i]; i++) {
        int k = wagg_index(names[i]);
        if (k >= 0 && k < FERRY_NR_MAX)
            cfg->route[k] = to;
    }
}

#define UNSET 0xfd     /* a route FERRY_AGG did not give: the default's */

/* everything but the routes, which are `route` */
static void base(struct ferry_group_config *cfg, unsigned char route)
{
    ferry_zero(cfg, sizeof(*cfg));
    cfg->npools = 1;
    cfg->pools[0] = (struct ferry_pool_config){.entries = 256, .sqpoll_cpu = -1,
                                               .wait = FERRY_WAIT_ADAPTIVE};
    cfg->workers = 4;
    cfg->fiber_stack = 256 * 1024;
    for (int i = 0; i < FERRY_NR_MAX; i++)
        cfg->route[i] = route;
}

/* the default routes where `cfg` has none (names are known once the stubs are) */
static void default_routes(struct ferry_group_config *cfg)
{
    struct ferry_group_config d;
    base(&d, FERRY_ROUTE_NATIVE);
    route_names(&d, to_pool, 0);
    route_names(&d, to_worker, FERRY_ROUTE_WORKER);
    for (int i = 0; i < FERRY_NR_MAX; i++)
        if (cfg->route[i] == UNSET)
            cfg->route[i] = d.route[i];
}

static unsigned online_cpus(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors ? si.dwNumberOfProcessors : 1;
}

int wagg_config_validate(const struct ferry_group_config *cfg)
{
    if (!cfg || cfg->npools == 0 || cfg->npools > FERRY_MAX_POOLS)
        return -EINVAL;
    unsigned ncpu = online_cpus();
    for (unsigned i = 0; i < cfg->npools; i++) {
        const struct ferry_pool_config *p = &cfg->pools[i];
        if (p->entries && ((p->entries & (p->entries - 1)) || p->entries > 32768))
            return -EINVAL;
        if (p->concurrency > 4096 || (ncpu < 64 && (p->cpus >> ncpu)))
            return -EINVAL;
        if (p->sqpoll_cpu < -1 || (p->sqpoll_cpu >= 0 && (unsigned)p->sqpoll_cpu >= ncpu))
            return -EINVAL;
        if (p->priority < -20 || p->priority > 19 || (unsigned)p->wait > FERRY_WAIT_ADAPTIVE)
            return -EINVAL;
        if (p->wait == FERRY_WAIT_SOME && (p->wait_limit == 0 || p->wait_timeout_ns == 0))
            return -EINVAL;
        if (p->wait_limit > (p->entries ? p->entries : 256) * 2)
            return -EINVAL;
    }
    long long none[FERRY_CALL_ARGS] = {0};
    none[0] = 1;    /* a thread call is the caller's only when it names it */
    for (int nr = 0; nr < FERRY_NR_MAX; nr++) {
        unsigned t = cfg->route[nr];
        if (t == FERRY_ROUTE_NATIVE)
            continue;
        if ((t != FERRY_ROUTE_WORKER && t >= cfg->npools) || wagg_must_native(nr, none))
            return -EINVAL;
    }
    if (cfg->workers > 256)
        return -EINVAL;
    if (cfg->fiber_stack && (cfg->fiber_stack < 16384 || cfg->fiber_stack > (1ULL << 30)))
        return -EINVAL;
    return 0;
}

/* ---- FERRY_AGG ---------------------------------------------------------- */

struct text {
    const char *p;
    int bad;
};

static int word(struct text *t, const char *w)
{
    const char *p = t->p;
    while (*w && *p == *w)
        p++, w++;
    if (*w)
        return 0;
    t->p = p;
    return 1;
}

/* a number in `base` between lo and hi, then `sep` (0: none) */
static long long num(struct text *t, int base, long long lo, long long hi, char sep)
{
    const char *p = t->p;
    int neg = *p == '-';
    p += neg;
    long long v = 0;
    int any = 0;
    for (;; p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0'
              : base == 16 && (*p | 32) >= 'a' && (*p | 32) <= 'f' ? (*p | 32) - 'a' + 10 : -1;
        if (d < 0)
            break;
        if (v > (0x7fffffffffffffffLL - d) / base)
            t->bad = 1;
        v = v * base + d;
        any = 1;
    }
    v = neg ? -v : v;
    if (!any || v < lo || v > hi || (sep && *p != sep))
        t->bad = 1;
    t->p = sep && *p == sep ? p + 1 : p;
    return v;
}

static void parse_pool(struct text *t, struct ferry_pool_config *pc)
{
    static const char *const waits[] = {"none", "any", "some", "all", "adaptive"};
    pc->entries = (unsigned)num(t, 10, 0, 32768, ',');
    pc->concurrency = (unsigned)num(t, 10, 0, 4096, ',');
    pc->cpus = (uint64_t)num(t, 16, 0, 0x7fffffffffffffffLL, ',');
    pc->sqpoll_cpu = (int)num(t, 10, -1, 4096, ',');
    pc->priority = (int)num(t, 10, -20, 19, ',');
    int w = 0;
    while (w < 5 && !word(t, waits[w]))
        w++;
    t->bad |= w == 5 || !word(t, ",");
    pc->wait = (enum ferry_wait)w;
    pc->wait_limit = (unsigned)num(t, 10, 0, 65536, ',');
    pc->wait_timeout_ns = (uint64_t)num(t, 10, 0, 0x7fffffffffffffffLL, 0);
}

/* A route's call: its stub index, or (what `ferry run` gives a PE program:
 * profiles/aggenv.py) its Nt name, which only ferry.dll can number: -1 for
 * a name this ntdll lacks (the route is left out), -2 while the stubs are
 * not yet known (parsed again once they are: names_pending). */
static int names_pending;

static long long route_call(struct text *t)
{
    char c = *t->p;
    if (c >= '0' && c <= '9')
        return num(t, 10, 0, FERRY_NR_MAX - 1, ':');
    char name[FERRY_WIN_NAME_MAX];
    int n = 0;
    while (((*t->p | 32) >= 'a' && (*t->p | 32) <= 'z') || (*t->p >= '0' && *t->p <= '9'))
        if (n < FERRY_WIN_NAME_MAX - 1)
            name[n++] = *t->p++;
        else
            t->bad = 1, t->p++;
    name[n] = 0;
    if (!n || !word(t, ":"))
        t->bad = 1;
    if (!ferry_stub_count()) {
        names_pending = 1;
        return -2;
    }
    return wagg_index(name);
}

static void parse_routes(struct text *t, struct ferry_group_config *cfg, unsigned npools)
{
    do {
        long long nr = route_call(t);
        char c = *t->p++;
        unsigned char to = c == 'n' ? FERRY_ROUTE_NATIVE : c == 'w' ? FERRY_ROUTE_WORKER
                         : (unsigned char)(c - '0');
        if ((c != 'n' && c != 'w' && (c < '0' || c > '7' || (unsigned)(c - '0') >= npools)) || t->bad)
            t->bad = 1;
        else if (nr >= 0 && nr < FERRY_NR_MAX)
            cfg->route[nr] = to;
    } while (!t->bad && word(t, ","));
}

/* 0, or -EINVAL (the settings then are the defaults) */
static int parse(const char *s, struct ferry_group_config *cfg)
{
    base(cfg, UNSET);
    struct text t = {s, 0};
    unsigned npools = 0;
    while (*t.p && !t.bad) {
        if (word(&t, "workers="))
            cfg->workers = (unsigned)num(&t, 10, 0, 256, 0);
        else if (word(&t, "stack="))
            cfg->fiber_stack = (size_t)num(&t, 10, 0, 1LL << 30, 0);
        else if (word(&t, "carriers="))
            wagg_carriers = (unsigned)num(&t, 10, 1, 64, 0);
        else if (word(&t, "threads="))
            t.bad |= !(word(&t, "native") || (wagg_threads_fibers = word(&t, "fibers")));
        else if (word(&t, "quiet="))
            t.bad |= !(word(&t, "ring") || (cfg->quiet = (unsigned)word(&t, "direct")));
        else if (word(&t, "pool=") && npools < FERRY_MAX_POOLS)
            parse_pool(&t, &cfg->pools[npools++]);
        else if (word(&t, "route="))
            parse_routes(&t, cfg, npools ? npools : 1);
        else
            t.bad = 1;
        if (!t.bad && *t.p && !word(&t, ";"))
            t.bad = 1;
    }
    if (npools)
        cfg->npools = npools;
    return t.bad ? -EINVAL : 0;
}

static void say(const char *s)
{
    DWORD n = 0, w;
    while (s[n])
        n++;
    WriteFile(GetStdHandle(STD_ERROR_HANDLE), s, n, &w, 0);
}

static char profile_text[16384];

/* FERRY_AGG as the process got it (empty: none), for its children */
const char *wagg_profile_text(void)
{
    return profile_text;
}

void wagg_configure(void)
{
    char *s = profile_text;
    char mode[16];
    DWORD n = GetEnvironmentVariableA("FERRY_MODE", mode, sizeof(mode));
    aggregating = n > 0 && n < sizeof(mode) && mode[0] == 'a' && mode[1] == 'g';
    n = GetEnvironmentVariableA("FERRY_AGG", s, sizeof(profile_text));
    if (n == 0 || n >= sizeof(profile_text))
        return;
    aggregating = 1;
    if (parse(s, &profile) == 0)
        profile_set = 1;
    else
        say("ferry: FERRY_AGG is malformed; ferry_group_config_default gives the defaults\n");
}

__declspec(dllexport) int ferry_is_aggregating(void)
{
    return aggregating;
}

__declspec(dllexport) int ferry_group_config_default(struct ferry_group_config *cfg, int from_profile)
{
    if (!cfg)
        return -EINVAL;
    if (from_profile && profile_set && names_pending) {
        names_pending = 0;      /* the stubs are known by now: the names too */
        parse(profile_text, &profile);
    }
    if (from_profile && profile_set)
        ferry_copy(cfg, &profile, sizeof(*cfg));
    else
        base(cfg, UNSET);
    default_routes(cfg);
    return 0;
}
