/* net_server: the evaluation web server of the Cluster Calls thesis (seed 000,
 * section 5.5), one static page in four thread models:
 *
 *   thread   a dedicated thread per connection, blocking calls
 *   pool     a fixed pool of threads taking connections from a queue
 *   async    one thread, an io_uring event loop (liburing)
 *   cluster  fibers on carrier threads through the Ferry API; the fibers make
 *            plain blocking calls, which the shim aggregates onto io_uring
 *            when the binary runs under `ferry run` with an aggregate profile
 *
 * The thread and pool models use nothing but pthreads and blocking system
 * calls on purpose: issue 6 runs them unmodified as fibers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ferry.h"
#include "http.h"

/* Weak and not linked: the Ferry API resolves against the shim that `ferry
 * run` loads, and is null when the program runs natively (or against a shim
 * without the aggregation engine); the cluster model checks for it.  The
 * other models thus stay plain binaries with no Ferry code in them. */
#pragma weak ferry_group_config_default
#pragma weak ferry_group_create
#pragma weak ferry_group_destroy
#pragma weak ferry_carrier_run
#pragma weak ferry_fiber_spawn
#pragma weak ferry_is_aggregating

/* A connection: its socket, how the model waits for it, its HTTP state. */
struct conn {
    int fd;
    struct conn *next;          /* pool model: the queue link */
    /* async model: the reply in flight, as an iovec advanced on short sends */
    struct iovec iov[HTTP_MAX_REPLIES];
    int niov;
    struct msghdr mh;
    int close_after;
    struct http_conn h;
};

const char net_stop_help[] = "SIGTERM or SIGINT stops it.";

static int listen_fd = -1;
static atomic_int stopping;
/* Threads, fibers' carriers or loops still running: shutdown waits for 0. */
static atomic_int running;

/* Open connections by fd, so that shutdown can wake every blocked reader
 * without a lock (fibers must not hold a pthread mutex across a call). */
static _Atomic unsigned char *live;
static long live_max;

static void die(const char *what)
{
    fprintf(stderr, PROG ": %s: %s\n", what, strerror(errno));
    exit(1);
}

static void conn_opened(int fd)
{
    if (fd < live_max)
        atomic_store_explicit(&live[fd], 1, memory_order_relaxed);
}

static void conn_close(struct conn *c)
{
    if (c->fd < live_max)
        atomic_store_explicit(&live[c->fd], 0, memory_order_relaxed);
    close(c->fd);
    http_release(&c->h);
    free(c);
}

static struct conn *conn_new(int fd)
{
    struct conn *c = malloc(sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->fd = fd;
    c->next = NULL;
    c->niov = 0;
    c->close_after = 0;
    c->h.len = 0;
    c->h.body = NULL;
    c->h.body_cap = 0;
    conn_opened(fd);
    return c;
}

/* accept() failures that concern one connection, or a passing shortage;
 * anything else means the listener is gone (shutdown) or broken. */
static int accept_transient(int e)
{
    return e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM || e == EAGAIN ||
           e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

static int accept_conn(void)
{
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            return fd;
        if (atomic_load(&stopping) || !accept_transient(errno))
            return -1;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Out of descriptors: back off instead of spinning on the error. */
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

static int send_replies(void *conn, struct replies *r)
{
    int fd = ((struct conn *)conn)->fd;
    struct iovec *iov = r->iov;
    int n = r->n;
    while (n > 0) {
        ssize_t k = n == 1 ? write(fd, iov->iov_base, iov->iov_len) : writev(fd, iov, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        while (n > 0 && (size_t)k >= iov->iov_len) {
            k -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + k;
            iov->iov_len -= (size_t)k;
        }
    }
    return 0;
}

/* Answers what c->h.buf holds; 0 when the connection is to be closed. */
static int serve_buffered(struct conn *c)
{
    return http_serve_buffered(&c->h, send_replies, c);
}

static int read_more(struct conn *c)
{
    for (;;) {
        ssize_t k = read(c->fd, c->h.buf + c->h.len, CONN_BUF - c->h.len);
        if (k > 0) {
            c->h.len += (size_t)k;
            return 1;
        }
        if (k < 0 && errno == EINTR)
            continue;
        return 0;
    }
}

static void serve_blocking(struct conn *c)
{
    while (read_more(c) && serve_buffered(c))
        ;
    conn_close(c);
}

/* ---------------------------------------------------------------- thread */

static pthread_attr_t small_stack;

static void *connection_thread(void *arg)
{
    serve_blocking(arg);
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static void *thread_acceptor(void *arg)
{
    (void)arg;
    int fd;
    while ((fd = accept_conn()) >= 0) {
        struct conn *c = conn_new(fd);
        if (!c)
            continue;
        pthread_t t;
        atomic_fetch_add(&running, 1);
        if (pthread_create(&t, &small_stack, connection_thread, c) != 0) {
            atomic_fetch_sub(&running, 1);
            conn_close(c);
        }
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

/* ---------------------------------------------------------------- pool */

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static struct conn *queue_head, *queue_tail;

static void enqueue(struct conn *c)
{
    c->next = NULL;
    pthread_mutex_lock(&queue_lock);
    if (queue_tail)
        queue_tail->next = c;
    else
        queue_head = c;
    queue_tail = c;
    pthread_cond_signal(&queue_cond);
    pthread_mutex_unlock(&queue_lock);
}

static struct conn *dequeue(void)
{
    pthread_mutex_lock(&queue_lock);
    while (!queue_head && !atomic_load(&stopping))
        pthread_cond_wait(&queue_cond, &queue_lock);
    struct conn *c = queue_head;
    if (c) {
        queue_head = c->next;
        if (!queue_head)
            queue_tail = NULL;
    }
    pthread_mutex_unlock(&queue_lock);
    return c;
}

/* A pool thread answers one round of a connection and puts it back at the
 * tail, rather than owning it until it closes: with keep-alive clients and
 * more connections than threads, ownership would starve every connection
 * beyond the pool's size.  A client keeps one request outstanding, so by the
 * time a connection comes round again its next request has usually arrived. */
static void *pool_thread(void *arg)
{
    (void)arg;
    struct conn *c;
    while ((c = dequeue()) != NULL) {
        if (read_more(c) && serve_buffered(c) && !atomic_load(&stopping))
            enqueue(c);
        else
            conn_close(c);
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static void *pool_acceptor(void *arg)
{
    (void)arg;
    int fd;
    while ((fd = accept_conn()) >= 0) {
        struct conn *c = conn_new(fd);
        if (c)
            enqueue(c);
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

/* ---------------------------------------------------------------- async */

static int async_wake_fd = -1;

/* user_data tags besides a struct conn pointer (which is 8-byte aligned). */
#define TAG_ACCEPT 1
#define TAG_WAKE 2
#define TAG_IGNORE 3

struct async_loop {
    struct io_uring ring;
    uint64_t wake_value;
};

static struct io_uring_sqe *get_sqe(struct io_uring *ring)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    while (!sqe) {
        /* SQ full: hand what is queued to the kernel and take a fresh slot. */
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}

static void async_arm_accept(struct io_uring *ring)
{
    struct io_uring_sqe *sqe = get_sqe(ring);
    io_uring_prep_multishot_accept(sqe, listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, TAG_ACCEPT);
}

static void async_recv(struct io_uring *ring, struct conn *c)
{
    struct io_uring_sqe *sqe = get_sqe(ring);
    io_uring_prep_recv(sqe, c->fd, c->h.buf + c->h.len, CONN_BUF - c->h.len, 0);
    io_uring_sqe_set_data(sqe, c);
}

static void async_send(struct io_uring *ring, struct conn *c)
{
    struct io_uring_sqe *sqe = get_sqe(ring);
    if (c->niov == 1) {
        io_uring_prep_send(sqe, c->fd, c->iov[0].iov_base, c->iov[0].iov_len, MSG_NOSIGNAL);
    } else {
        /* The kernel may read the msghdr after submission (async issue), so it
         * lives in the connection, not on this stack frame. */
        memset(&c->mh, 0, sizeof c->mh);
        c->mh.msg_iov = c->iov;
        c->mh.msg_iovlen = (size_t)c->niov;
        io_uring_prep_sendmsg(sqe, c->fd, &c->mh, MSG_NOSIGNAL);
    }
    io_uring_sqe_set_data(sqe, c);
}

static void async_close(struct io_uring *ring, struct conn *c)
{
    if (c->fd < live_max)
        atomic_store_explicit(&live[c->fd], 0, memory_order_relaxed);
    struct io_uring_sqe *sqe = get_sqe(ring);
    io_uring_prep_close(sqe, c->fd);
    io_uring_sqe_set_data64(sqe, TAG_IGNORE);
    http_release(&c->h);
    free(c);
}

/* After input arrived or a send finished: answer what is buffered, or wait
 * for more input. */
static void async_next(struct io_uring *ring, struct conn *c)
{
    if (c->close_after) {
        async_close(ring, c);
        return;
    }
    struct replies r;
    http_take(&c->h, &r);
    if (r.n == 0) {
        async_recv(ring, c);
        return;
    }
    memcpy(c->iov, r.iov, sizeof(struct iovec) * (size_t)r.n);
    c->niov = r.n;
    c->close_after = r.close;
    async_send(ring, c);
}

static void async_sent(struct io_uring *ring, struct conn *c, int res)
{
    if (res <= 0) {
        async_close(ring, c);
        return;
    }
    size_t k = (size_t)res;
    int i = 0;
    while (i < c->niov && k >= c->iov[i].iov_len)
        k -= c->iov[i++].iov_len;
    if (i < c->niov) {
        memmove(c->iov, c->iov + i, sizeof(struct iovec) * (size_t)(c->niov - i));
        c->niov -= i;
        c->iov[0].iov_base = (char *)c->iov[0].iov_base + k;
        c->iov[0].iov_len -= k;
        async_send(ring, c);
        return;
    }
    c->niov = 0;
    async_next(ring, c);
}

static void *async_thread(void *arg)
{
    struct async_loop *L = arg;
    struct io_uring *ring = &L->ring;
    async_arm_accept(ring);
    struct io_uring_sqe *sqe = get_sqe(ring);
    io_uring_prep_read(sqe, async_wake_fd, &L->wake_value, sizeof L->wake_value, 0);
    io_uring_sqe_set_data64(sqe, TAG_WAKE);
    int done = 0;
    while (!done) {
        int rc = io_uring_submit_and_wait(ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            errno = -rc;
            die("io_uring_submit_and_wait");
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(ring, head, cqe)
        {
            seen++;
            uint64_t tag = io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            if (tag == TAG_WAKE) {
                done = 1;
            } else if (tag == TAG_ACCEPT) {
                if (res >= 0) {
                    struct conn *c = conn_new(res);
                    if (c)
                        async_recv(ring, c);
                } else if (!accept_transient(-res) || atomic_load(&stopping)) {
                    done = 1;
                    continue;
                }
                if (!(cqe->flags & IORING_CQE_F_MORE) && !atomic_load(&stopping))
                    async_arm_accept(ring);
            } else if (tag == TAG_IGNORE) {
            } else {
                struct conn *c = (struct conn *)(uintptr_t)tag;
                if (c->niov) {
                    async_sent(ring, c, res);
                } else if (res <= 0) {
                    async_close(ring, c);
                } else {
                    c->h.len += (size_t)res;
                    async_next(ring, c);
                }
            }
        }
        io_uring_cq_advance(ring, seen);
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

/* ---------------------------------------------------------------- cluster */

static struct ferry_group *group;

static void connection_fiber(void *arg)
{
    serve_blocking(arg);
}

/* Each carrier's first fiber accepts; a blocked accept parks only this fiber
 * (under aggregation it is an io_uring operation), the others keep serving. */
static void carrier_main(void *arg)
{
    (void)arg;
    int fd;
    while ((fd = accept_conn()) >= 0) {
        struct conn *c = conn_new(fd);
        if (!c)
            continue;
        int rc = ferry_fiber_spawn(NULL, connection_fiber, c);
        if (rc < 0) {
            fprintf(stderr, PROG ": ferry_fiber_spawn: %s\n", strerror(-rc));
            conn_close(c);
        }
    }
}

static void *carrier_thread(void *arg)
{
    int rc = ferry_carrier_run(group, carrier_main, arg);
    if (rc < 0) {
        fprintf(stderr, PROG ": ferry_carrier_run: %s%s\n", strerror(-rc),
                rc == -EBUSY ? " (this thread runs as a fiber already: the cluster model makes its own "
                               "carriers; run it under -p aggregate or -p net, not -p fibers)" : "");
        exit(1);
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static void cluster_check(void)
{
    if (!ferry_group_config_default || !ferry_group_create || !ferry_carrier_run || !ferry_fiber_spawn ||
        !ferry_is_aggregating) {
        fprintf(stderr, PROG ": --model cluster needs the Ferry aggregation engine: run it as "
                        "`ferry run -p profiles/net.toml -- " PROG " --model cluster ...` (%s)\n",
                ferry_group_create ? "the loaded libferry.so has no ferry_group_create" : "no shim loaded");
        exit(3);
    }
    if (!ferry_is_aggregating()) {
        /* Without the shim in aggregate mode a fiber's blocking accept would
         * block its whole carrier: the server would hang, not run slowly. */
        fprintf(stderr, PROG ": --model cluster needs the aggregation engine: run it as "
                        "`ferry run -p profiles/net.toml -- " PROG " --model cluster ...` "
                        "(the shim is loaded, but not in aggregate mode)\n");
        exit(3);
    }
}

/* ---------------------------------------------------------------- main */

static int cpus_allowed(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

int main(int argc, char **argv)
{
    struct net_options o;
    net_parse_options(argc, argv, &o);
    if (o.model == MODEL_CLUSTER)
        cluster_check();
    long port = o.port, threads = o.threads, carriers = o.carriers;
    const char *docroot = o.docroot;
    int m = (int)o.model;
    if (!carriers)
        carriers = cpus_allowed();

    /* Thousands of connections: take every descriptor the hard limit allows. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    live_max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (1u << 22) ? (long)rl.rlim_cur : 1 << 22;
    live = calloc((size_t)live_max, 1);
    if (!live)
        die("calloc");

    int rc = http_init(docroot);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s/index.html: %s\n", docroot, strerror(-rc));
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0)
        die("socket");
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        fprintf(stderr, PROG ": cannot bind 127.0.0.1:%ld: %s\n", port, strerror(errno));
        return 1;
    }
    if (listen(listen_fd, 4096) < 0)
        die("listen");
    socklen_t sl = sizeof sa;
    if (getsockname(listen_fd, (struct sockaddr *)&sa, &sl) < 0)
        die("getsockname");

    /* Every thread inherits this mask, so the signals reach only sigwait
     * below, never a worker in the middle of a call. */
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);

    pthread_attr_init(&small_stack);
    pthread_attr_setdetachstate(&small_stack, PTHREAD_CREATE_DETACHED);
    /* 2000 connections x glibc's default 8 MiB would be 16 GiB of address space. */
    pthread_attr_setstacksize(&small_stack, 256 * 1024);

    struct async_loop *loop = NULL;
    pthread_t t;
    if (m == MODEL_THREAD) {
        atomic_store(&running, 1);
        if (pthread_create(&t, &small_stack, thread_acceptor, NULL))
            die("pthread_create");
    } else if (m == MODEL_POOL) {
        atomic_store(&running, (int)threads + 1);
        for (long i = 0; i < threads; i++)
            if (pthread_create(&t, &small_stack, pool_thread, NULL))
                die("pthread_create");
        if (pthread_create(&t, &small_stack, pool_acceptor, NULL))
            die("pthread_create");
    } else if (m == MODEL_ASYNC) {
        loop = calloc(1, sizeof *loop);
        async_wake_fd = eventfd(0, EFD_CLOEXEC);
        if (!loop || async_wake_fd < 0)
            die("eventfd");
        struct io_uring_params p = {0};
        /* Task work only when the loop enters the kernel anyway: no IPIs. */
        p.flags = IORING_SETUP_COOP_TASKRUN;
        int rc = io_uring_queue_init_params(4096, &loop->ring, &p);
        if (rc == -EINVAL) {
            memset(&p, 0, sizeof p);
            rc = io_uring_queue_init_params(4096, &loop->ring, &p);
        }
        if (rc < 0) {
            fprintf(stderr, PROG ": io_uring_queue_init: %s\n", strerror(-rc));
            return 1;
        }
        atomic_store(&running, 1);
        if (pthread_create(&t, NULL, async_thread, loop))
            die("pthread_create");
    } else {
        struct ferry_group_config cfg;
        int rc = ferry_group_config_default(&cfg, 1);
        if (rc == 0)
            rc = ferry_group_create(&group, &cfg);
        if (rc < 0) {
            fprintf(stderr, PROG ": cannot create the Ferry group: %s\n", strerror(-rc));
            return 1;
        }
        atomic_store(&running, (int)carriers);
        pthread_attr_t detached;
        pthread_attr_init(&detached);
        pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
        for (long i = 0; i < carriers; i++)
            if (pthread_create(&t, &detached, carrier_thread, NULL))
                die("pthread_create");
    }

    printf("listening on %u\n", ntohs(sa.sin_port));
    fflush(stdout);

    int sig;
    while (sigwait(&stop_set, &sig) != 0)
        ;

    /* Stop accepting, wake every blocked reader, give them a moment to close
     * their connections, then leave whatever still hangs to exit(). */
    atomic_store(&stopping, 1);
    shutdown(listen_fd, SHUT_RDWR);
    if (async_wake_fd >= 0) {
        uint64_t v = 1;
        if (write(async_wake_fd, &v, sizeof v) < 0)
            perror(PROG ": eventfd");
    }
    for (long fd = 0; fd < live_max; fd++)
        if (atomic_load_explicit(&live[fd], memory_order_relaxed))
            shutdown((int)fd, SHUT_RDWR);
    pthread_mutex_lock(&queue_lock);
    pthread_cond_broadcast(&queue_cond);
    pthread_mutex_unlock(&queue_lock);
    for (int i = 0; i < 200 && atomic_load(&running) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (m == MODEL_CLUSTER && atomic_load(&running) == 0 && ferry_group_destroy)
        ferry_group_destroy(group);
    return 0;
}
