/* The command line shared by the Linux and the Windows server, so that both
 * take the same options and refuse the same input in the same words. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see --help)\n");
    exit(2);
}

static long parse_num(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, PROG ": %s: expected an integer in %ld..%ld, got '%s' (see --help)\n", opt, lo,
                hi, s);
        exit(2);
    }
    return v;
}

static void usage(void)
{
    printf("usage: " PROG " --model thread|pool|async|cluster [--port N] [--threads N] [--carriers N]\n"
           "                  [--docroot DIR]\n"
           "  --port N      TCP port on 127.0.0.1; 0 (default) picks a free one\n"
           "  --threads N   pool model: threads in the pool (default 64)\n"
           "  --carriers N  cluster model: carrier threads (default: CPUs this process may use)\n"
           "  --docroot DIR the page is DIR/index.html, opened, fstat'ed, read and closed for\n"
           "                every request (default: the page linked into the program)\n"
           "Prints \"listening on PORT\" once ready; %s\n"
           "The cluster model runs only under `ferry run` with an aggregate profile whose\n"
           "threads are the program's own (aggregate, net; not fibers).\n",
           net_stop_help);
}

void net_parse_options(int argc, char **argv, struct net_options *o)
{
    const char *model = NULL;
    *o = (struct net_options){.threads = 64};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            exit(0);
        }
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        char name[32];
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            val = eq + 1;
            a = name;
        }
        int known = !strcmp(a, "--model") || !strcmp(a, "--port") || !strcmp(a, "--threads") ||
                    !strcmp(a, "--carriers") || !strcmp(a, "--docroot");
        if (!known)
            usage_error("unknown argument '%s'", argv[i]);
        if (!val) {
            if (i + 1 >= argc)
                usage_error("%s needs a value", a);
            val = argv[++i];
        }
        if (!strcmp(a, "--model"))
            model = val;
        else if (!strcmp(a, "--port"))
            o->port = parse_num("--port", val, 0, 65535);
        else if (!strcmp(a, "--threads"))
            o->threads = parse_num("--threads", val, 1, 100000);
        else if (!strcmp(a, "--docroot"))
            o->docroot = val;
        else
            o->carriers = parse_num("--carriers", val, 1, 1024);
    }
    if (!model)
        usage_error("%s", "--model is required: thread, pool, async or cluster");
    static const char *const names[] = {"thread", "pool", "async", "cluster"};
    for (int m = 0; m < 4; m++)
        if (!strcmp(model, names[m])) {
            o->model = (enum net_model)m;
            return;
        }
    usage_error("--model: unknown model '%s' (thread, pool, async or cluster)", model);
}
