/* The server's command line, the same on every platform. */
#ifndef NET_CLI_H
#define NET_CLI_H

#define PROG "net_server"

enum net_model { MODEL_THREAD, MODEL_POOL, MODEL_ASYNC, MODEL_CLUSTER };

struct net_options {
    enum net_model model;
    long port;              /* 0: a free one, printed */
    long threads;           /* pool model */
    long carriers;          /* cluster model; 0: the CPUs the process may use */
    const char *docroot;    /* NULL: the page linked in */
};

/* How this platform's server is stopped, a line of --help (its server file
 * defines it). */
extern const char net_stop_help[];

/* Fills `o` from argv.  --help prints the usage and exits 0; bad input is one
 * line on stderr and exit 2. */
void net_parse_options(int argc, char **argv, struct net_options *o);

#endif
