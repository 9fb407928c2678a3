/* net_server.exe: the evaluation web server for Windows (issue 18), the
 * Linux server's four thread models in Windows' own terms, with the same
 * HTTP code (http.c), command line (cli.c) and answers:
 *
 *   thread   a thread per connection (CreateThread), blocking Winsock calls
 *   pool     a fixed pool of threads taking connections from a queue (a
 *            critical section and a condition variable), blocking calls
 *   async    one thread: overlapped AcceptEx / WSARecv / WSASend completed
 *            through an I/O completion port, taken many at a time with
 *            GetQueuedCompletionStatusEx
 *   cluster  fibers on carrier threads through the Ferry API of ferry.dll,
 *            found at run time (the program does not link it); the fibers
 *            make plain blocking Winsock calls, which ferry.dll routes to its
 *            pools when the program runs under `ferry run` aggregating
 *
 * Ctrl-C or Ctrl-Break stops it (exit 0); under wine that is SIGINT, while
 * SIGTERM ends a wine process before the program sees anything.
 */
#define WIN32_LEAN_AND_MEAN
#include <winsock2.h>
#include <mswsock.h>
#include <windows.h>

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ferry.h"
#include "http.h"

/* A connection: its socket, how the model waits for it, its HTTP state. */
struct conn {
    OVERLAPPED ov;              /* async model: the operation in flight */
    SOCKET s;
    struct conn *next;          /* pool model: the queue link */
    struct conn *live_prev, *live_next;
    /* async model: which operation is in flight, and the reply being sent,
     * advanced on short sends */
    int sending;
    WSABUF wb[HTTP_MAX_REPLIES];
    int nwb;
    int close_after;
    struct http_conn h;
};

const char net_stop_help[] = "Ctrl-C or Ctrl-Break stops it (SIGINT under wine).";

static SOCKET listen_sock = INVALID_SOCKET;
static struct sockaddr_in listen_addr;
static volatile LONG stopping;
/* Threads, carriers or the loop still running: shutdown waits for 0. */
static volatile LONG running;
static HANDLE stop_event;

static const char *win_error(DWORD e)
{
    static char msg[256];
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, e, 0, msg,
                             sizeof msg, NULL);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == ' ' || msg[n - 1] == '.'))
        n--;
    if (!n)
        n = (DWORD)snprintf(msg, sizeof msg, "error %lu", (unsigned long)e);
    msg[n] = 0;
    return msg;
}

static void die(const char *what, DWORD e)
{
    fprintf(stderr, PROG ": %s: %s\n", what, win_error(e));
    exit(1);
}

/* ---------------------------------------------------------------- connections */

/* Every open connection, so that a stop can wake its blocked reader.  A spin
 * lock, held for a few pointer writes: a fiber must not wait on a lock the
 * engine would have to park it for. */
static struct conn live = {.live_prev = &live, .live_next = &live};
static volatile LONG live_lock;

static void live_acquire(void)
{
    while (InterlockedExchange(&live_lock, 1))
        YieldProcessor();
}

static void live_release(void)
{
    InterlockedExchange(&live_lock, 0);
}

static struct conn *conn_new(SOCKET s)
{
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        closesocket(s);
        return NULL;
    }
    c->s = s;
    live_acquire();
    c->live_next = live.live_next;
    c->live_prev = &live;
    live.live_next->live_prev = c;
    live.live_next = c;
    live_release();
    return c;
}

static void conn_close(struct conn *c)
{
    live_acquire();
    c->live_prev->live_next = c->live_next;
    c->live_next->live_prev = c->live_prev;
    live_release();
    closesocket(c->s);
    http_release(&c->h);
    free(c);
}

/* accept() failures that concern one connection, or a passing shortage;
 * anything else means the listener is broken. */
static int accept_transient(int e)
{
    return e == WSAEINTR || e == WSAECONNRESET || e == WSAEWOULDBLOCK || e == WSAEMFILE || e == WSAENOBUFS;
}

/* The next connection, or INVALID_SOCKET once the server stops (closing the
 * listening socket fails a blocked accept). */
static SOCKET accept_conn(void)
{
    for (;;) {
        SOCKET s = accept(listen_sock, NULL, NULL);
        if (s != INVALID_SOCKET)
            return s;
        int e = WSAGetLastError();
        if (stopping || !accept_transient(e))
            return INVALID_SOCKET;
        if (e == WSAEMFILE || e == WSAENOBUFS)
            Sleep(10);     /* out of sockets: back off instead of spinning on the error */
    }
}

/* The reply's iovecs as WSABUFs; Winsock takes at most ULONG bytes a buffer,
 * far more than a reply holds. */
static int to_wsabufs(const struct replies *r, WSABUF *wb)
{
    for (int i = 0; i < r->n; i++) {
        wb[i].buf = r->iov[i].iov_base;
        wb[i].len = (ULONG)r->iov[i].iov_len;
    }
    return r->n;
}

/* Drops the `sent` bytes from the front of wb[0..n); the buffers left. */
static int wsabufs_advance(WSABUF *wb, int n, DWORD sent)
{
    int i = 0;
    while (i < n && sent >= wb[i].len)
        sent -= wb[i++].len;
    if (i < n) {
        memmove(wb, wb + i, sizeof *wb * (size_t)(n - i));
        wb[0].buf += sent;
        wb[0].len -= sent;
    }
    return n - i;
}

static int send_replies(void *conn, struct replies *r)
{
    SOCKET s = ((struct conn *)conn)->s;
    WSABUF wb[HTTP_MAX_REPLIES];
    int n = to_wsabufs(r, wb);
    while (n > 0) {
        DWORD sent;
        if (WSASend(s, wb, (DWORD)n, &sent, 0, NULL, NULL) != 0)
            return -1;
        n = wsabufs_advance(wb, n, sent);
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
    int k = recv(c->s, c->h.buf + c->h.len, (int)(CONN_BUF - c->h.len), 0);
    if (k <= 0)
        return 0;
    c->h.len += (size_t)k;
    return 1;
}

static void serve_blocking(struct conn *c)
{
    while (read_more(c) && serve_buffered(c))
        ;
    conn_close(c);
}

/* Hands each new connection to `take` until the server stops: the thread
 * and pool models' acceptor thread, and each carrier's first fiber. */
static void accept_loop(void (*take)(struct conn *))
{
    SOCKET s;
    while ((s = accept_conn()) != INVALID_SOCKET) {
        struct conn *c = conn_new(s);
        if (c)
            take(c);
    }
}

static void (*acceptor_take)(struct conn *);

static DWORD WINAPI acceptor_thread(LPVOID arg)
{
    (void)arg;
    accept_loop(acceptor_take);
    InterlockedDecrement(&running);
    return 0;
}

/* 2000 connections x the default 1 MiB stack would be 2 GiB reserved. */
#define THREAD_STACK (256 * 1024)

static void start_thread(LPTHREAD_START_ROUTINE fn, void *arg)
{
    HANDLE t = CreateThread(NULL, THREAD_STACK, fn, arg, STACK_SIZE_PARAM_IS_A_RESERVATION, NULL);
    if (!t)
        die("CreateThread", GetLastError());
    CloseHandle(t);
}

/* ---------------------------------------------------------------- thread */

static DWORD WINAPI connection_thread(LPVOID arg)
{
    serve_blocking(arg);
    InterlockedDecrement(&running);
    return 0;
}

static void thread_take(struct conn *c)
{
    InterlockedIncrement(&running);
    HANDLE t = CreateThread(NULL, THREAD_STACK, connection_thread, c, STACK_SIZE_PARAM_IS_A_RESERVATION, NULL);
    if (t) {
        CloseHandle(t);
    } else {
        InterlockedDecrement(&running);
        conn_close(c);
    }
}

/* ---------------------------------------------------------------- pool */

static CRITICAL_SECTION queue_lock;
static CONDITION_VARIABLE queue_cond = CONDITION_VARIABLE_INIT;
static struct conn *queue_head, *queue_tail;

static void enqueue(struct conn *c)
{
    c->next = NULL;
    EnterCriticalSection(&queue_lock);
    if (queue_tail)
        queue_tail->next = c;
    else
        queue_head = c;
    queue_tail = c;
    WakeConditionVariable(&queue_cond);
    LeaveCriticalSection(&queue_lock);
}

static struct conn *dequeue(void)
{
    EnterCriticalSection(&queue_lock);
    while (!queue_head && !stopping)
        SleepConditionVariableCS(&queue_cond, &queue_lock, INFINITE);
    struct conn *c = queue_head;
    if (c) {
        queue_head = c->next;
        if (!queue_head)
            queue_tail = NULL;
    }
    LeaveCriticalSection(&queue_lock);
    return c;
}

/* One round of a connection, then back to the tail (see the Linux server:
 * owning a keep-alive connection until it closes would starve every
 * connection beyond the pool's size). */
static DWORD WINAPI pool_thread(LPVOID arg)
{
    (void)arg;
    struct conn *c;
    while ((c = dequeue()) != NULL) {
        if (read_more(c) && serve_buffered(c) && !stopping)
            enqueue(c);
        else
            conn_close(c);
    }
    InterlockedDecrement(&running);
    return 0;
}

/* ---------------------------------------------------------------- async */

/* Completion keys: which kind of operation a completion is. */
#define KEY_CONN 0
#define KEY_LISTEN 1
#define KEY_WAKE 2
/* AcceptEx operations kept pending: connections that arrive together are
 * accepted together, the rest wait in the listen backlog. */
#define ACCEPTS 64
#define COMPLETIONS 256
#define ADDR_SPACE (sizeof(struct sockaddr_in) + 16)

struct accept_op {
    OVERLAPPED ov;
    SOCKET s;
    char addrs[2 * ADDR_SPACE];
};

static HANDLE iocp;
static LPFN_ACCEPTEX accept_ex;

static SOCKET overlapped_socket(void)
{
    return WSASocketW(AF_INET, SOCK_STREAM, IPPROTO_TCP, NULL, 0,
                      WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
}

/* 0, or -1 when the operation could not be started (it is then dropped). */
static int async_accept(struct accept_op *op)
{
    memset(&op->ov, 0, sizeof op->ov);
    op->s = overlapped_socket();
    if (op->s == INVALID_SOCKET)
        return -1;
    DWORD got;
    if (!accept_ex(listen_sock, op->s, op->addrs, 0, ADDR_SPACE, ADDR_SPACE, &got, &op->ov) &&
        WSAGetLastError() != ERROR_IO_PENDING) {
        closesocket(op->s);
        return -1;
    }
    return 0;
}

static void async_close(struct conn *c)
{
    conn_close(c);
}

static void async_recv(struct conn *c)
{
    memset(&c->ov, 0, sizeof c->ov);
    c->sending = 0;
    WSABUF b = {.len = (ULONG)(CONN_BUF - c->h.len), .buf = c->h.buf + c->h.len};
    DWORD flags = 0;
    /* Done at once or later, the completion comes through the port. */
    if (WSARecv(c->s, &b, 1, NULL, &flags, &c->ov, NULL) != 0 && WSAGetLastError() != WSA_IO_PENDING)
        async_close(c);
}

static void async_send(struct conn *c)
{
    memset(&c->ov, 0, sizeof c->ov);
    c->sending = 1;
    if (WSASend(c->s, c->wb, (DWORD)c->nwb, NULL, 0, &c->ov, NULL) != 0 &&
        WSAGetLastError() != WSA_IO_PENDING)
        async_close(c);
}

/* After input arrived or a send finished: answer what is buffered, or wait
 * for more input. */
static void async_next(struct conn *c)
{
    if (c->close_after) {
        async_close(c);
        return;
    }
    struct replies r;
    http_take(&c->h, &r);
    if (r.n == 0) {
        async_recv(c);
        return;
    }
    c->nwb = to_wsabufs(&r, c->wb);
    c->close_after = r.close;
    async_send(c);
}

static void async_accepted(struct accept_op *op, int ok)
{
    if (ok && setsockopt(op->s, SOL_SOCKET, SO_UPDATE_ACCEPT_CONTEXT, (char *)&listen_sock,
                         sizeof listen_sock) == 0) {
        struct conn *c = conn_new(op->s);
        if (c) {
            if (CreateIoCompletionPort((HANDLE)c->s, iocp, KEY_CONN, 0))
                async_recv(c);
            else
                async_close(c);
        }
    } else {
        closesocket(op->s);     /* reset before it was accepted: one connection's loss */
    }
    if (stopping || async_accept(op) < 0)
        free(op);
}

static void async_completed(struct conn *c, int ok, DWORD bytes)
{
    if (!ok || bytes == 0) {
        async_close(c);
    } else if (c->sending) {
        c->nwb = wsabufs_advance(c->wb, c->nwb, bytes);
        if (c->nwb)
            async_send(c);
        else
            async_next(c);
    } else {
        c->h.len += bytes;
        async_next(c);
    }
}

static DWORD WINAPI async_thread(LPVOID arg)
{
    (void)arg;
    OVERLAPPED_ENTRY done[COMPLETIONS];
    for (;;) {
        ULONG n;
        if (!GetQueuedCompletionStatusEx(iocp, done, COMPLETIONS, &n, INFINITE, FALSE))
            die("GetQueuedCompletionStatusEx", GetLastError());
        for (ULONG i = 0; i < n; i++) {
            ULONG_PTR key = done[i].lpCompletionKey;
            if (key == KEY_WAKE) {
                InterlockedDecrement(&running);
                return 0;
            }
            /* The operation's NTSTATUS: 0 (STATUS_SUCCESS) or a failure. */
            int ok = done[i].lpOverlapped->Internal == 0;
            if (key == KEY_LISTEN)
                async_accepted(CONTAINING_RECORD(done[i].lpOverlapped, struct accept_op, ov), ok);
            else
                async_completed(CONTAINING_RECORD(done[i].lpOverlapped, struct conn, ov), ok,
                                done[i].dwNumberOfBytesTransferred);
        }
    }
}

static void async_start(void)
{
    iocp = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
    if (!iocp)
        die("CreateIoCompletionPort", GetLastError());
    if (!CreateIoCompletionPort((HANDLE)listen_sock, iocp, KEY_LISTEN, 0))
        die("CreateIoCompletionPort", GetLastError());
    GUID id = WSAID_ACCEPTEX;
    DWORD got;
    if (WSAIoctl(listen_sock, SIO_GET_EXTENSION_FUNCTION_POINTER, &id, sizeof id, &accept_ex,
                 sizeof accept_ex, &got, NULL, NULL) != 0)
        die("AcceptEx", (DWORD)WSAGetLastError());
    for (int i = 0; i < ACCEPTS; i++) {
        struct accept_op *op = malloc(sizeof *op);
        if (!op || async_accept(op) < 0)
            die("AcceptEx", (DWORD)WSAGetLastError());
    }
    running = 1;
    start_thread(async_thread, NULL);
}

/* ---------------------------------------------------------------- cluster */

/* The Ferry API of ferry.dll, found at run time: the program does not link
 * it, so the other models carry no Ferry code and run under plain Windows. */
static struct {
    int (*config_default)(struct ferry_group_config *, int);
    int (*group_create)(struct ferry_group **, const struct ferry_group_config *);
    int (*group_destroy)(struct ferry_group *);
    int (*carrier_run)(struct ferry_group *, void (*)(void *), void *);
    int (*fiber_spawn)(struct ferry_fiber **, void (*)(void *), void *);
    int (*is_aggregating)(void);
} ferry;
static struct ferry_group *group;

static void cluster_refuse(const char *why)
{
    fprintf(stderr, PROG ": --model cluster needs the Ferry aggregation engine: run it as "
                    "`ferry run -p profiles/net.toml -- " PROG ".exe --model cluster ...` (%s)\n", why);
    exit(3);
}

/* Natively a fiber's blocking accept would block its whole carrier: the
 * server would hang, not run slowly, so it refuses instead. */
static void cluster_check(void)
{
    HMODULE dll = GetModuleHandleW(L"ferry.dll");
    if (!dll)
        cluster_refuse("ferry.dll is not loaded");
    ferry.config_default = (void *)GetProcAddress(dll, "ferry_group_config_default");
    ferry.group_create = (void *)GetProcAddress(dll, "ferry_group_create");
    ferry.group_destroy = (void *)GetProcAddress(dll, "ferry_group_destroy");
    ferry.carrier_run = (void *)GetProcAddress(dll, "ferry_carrier_run");
    ferry.fiber_spawn = (void *)GetProcAddress(dll, "ferry_fiber_spawn");
    ferry.is_aggregating = (void *)GetProcAddress(dll, "ferry_is_aggregating");
    if (!ferry.config_default || !ferry.group_create || !ferry.group_destroy || !ferry.carrier_run ||
        !ferry.fiber_spawn || !ferry.is_aggregating)
        cluster_refuse("the loaded ferry.dll has no aggregation engine");
    if (!ferry.is_aggregating())
        cluster_refuse("ferry.dll is loaded, but not in aggregate mode");
}

static void connection_fiber(void *arg)
{
    serve_blocking(arg);
}

static void fiber_take(struct conn *c)
{
    int rc = ferry.fiber_spawn(NULL, connection_fiber, c);
    if (rc < 0) {
        fprintf(stderr, PROG ": ferry_fiber_spawn: %s\n", strerror(-rc));
        conn_close(c);
    }
}

/* Each carrier's first fiber accepts; a blocked accept parks only this fiber
 * (ferry.dll routes it to a pool), the others keep serving. */
static void carrier_main(void *arg)
{
    (void)arg;
    accept_loop(fiber_take);
}

static DWORD WINAPI carrier_thread(LPVOID arg)
{
    int rc = ferry.carrier_run(group, carrier_main, arg);
    if (rc < 0) {
        fprintf(stderr, PROG ": ferry_carrier_run: %s\n", strerror(-rc));
        exit(1);
    }
    InterlockedDecrement(&running);
    return 0;
}

static void cluster_start(long carriers)
{
    struct ferry_group_config cfg;
    int rc = ferry.config_default(&cfg, 1);
    if (rc == 0)
        rc = ferry.group_create(&group, &cfg);
    if (rc < 0) {
        fprintf(stderr, PROG ": cannot create the Ferry group: %s\n", strerror(-rc));
        exit(1);
    }
    running = (LONG)carriers;
    for (long i = 0; i < carriers; i++)
        start_thread(carrier_thread, NULL);
}

/* ---------------------------------------------------------------- main */

static BOOL WINAPI on_console_event(DWORD type)
{
    if (type != CTRL_C_EVENT && type != CTRL_BREAK_EVENT && type != CTRL_CLOSE_EVENT)
        return FALSE;
    SetEvent(stop_event);
    return TRUE;
}

static long cpus_allowed(void)
{
    DWORD_PTR mine, all;
    long n = 0;
    if (GetProcessAffinityMask(GetCurrentProcess(), &mine, &all))
        for (; mine; mine &= mine - 1)
            n++;
    return n ? n : 1;
}

static void listen_on(long port)
{
    listen_sock = overlapped_socket();
    if (listen_sock == INVALID_SOCKET)
        die("socket", (DWORD)WSAGetLastError());
    listen_addr.sin_family = AF_INET;
    listen_addr.sin_port = htons((u_short)port);
    listen_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_sock, (struct sockaddr *)&listen_addr, sizeof listen_addr) != 0) {
        fprintf(stderr, PROG ": cannot bind 127.0.0.1:%ld: %s\n", port, win_error((DWORD)WSAGetLastError()));
        exit(1);
    }
    if (listen(listen_sock, SOMAXCONN) != 0)
        die("listen", (DWORD)WSAGetLastError());
    int len = sizeof listen_addr;
    if (getsockname(listen_sock, (struct sockaddr *)&listen_addr, &len) != 0)
        die("getsockname", (DWORD)WSAGetLastError());
}

int main(int argc, char **argv)
{
    /* Lines end in \n as the Linux server's do, for the tools that read them. */
    _setmode(_fileno(stdout), _O_BINARY);
    _setmode(_fileno(stderr), _O_BINARY);
    struct net_options o;
    net_parse_options(argc, argv, &o);
    if (o.model == MODEL_CLUSTER)
        cluster_check();
    if (!o.carriers)
        o.carriers = cpus_allowed();

    int rc = http_init(o.docroot);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s/index.html: %s\n", o.docroot, strerror(-rc));
        return 2;
    }
    WSADATA wsa;
    if ((rc = WSAStartup(MAKEWORD(2, 2), &wsa)) != 0)
        die("WSAStartup", (DWORD)rc);
    listen_on(o.port);

    stop_event = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!stop_event || !SetConsoleCtrlHandler(on_console_event, TRUE))
        die("SetConsoleCtrlHandler", GetLastError());
    InitializeCriticalSection(&queue_lock);

    if (o.model == MODEL_THREAD) {
        running = 1;
        acceptor_take = thread_take;
        start_thread(acceptor_thread, NULL);
    } else if (o.model == MODEL_POOL) {
        running = (LONG)o.threads + 1;
        for (long i = 0; i < o.threads; i++)
            start_thread(pool_thread, NULL);
        acceptor_take = enqueue;
        start_thread(acceptor_thread, NULL);
    } else if (o.model == MODEL_ASYNC) {
        async_start();
    } else {
        cluster_start(o.carriers);
    }

    printf("listening on %u\n", ntohs(listen_addr.sin_port));
    fflush(stdout);
    WaitForSingleObject(stop_event, INFINITE);

    /* Stop accepting, wake every blocked reader, give them a moment to close
     * their connections, then leave whatever still hangs to ExitProcess. */
    InterlockedExchange(&stopping, 1);
    /* fails every accept, blocked or pending (AcceptEx), as shutdown() does
     * on Linux */
    closesocket(listen_sock);
    if (iocp)
        PostQueuedCompletionStatus(iocp, 0, KEY_WAKE, NULL);
    live_acquire();
    for (struct conn *c = live.live_next; c != &live; c = c->live_next)
        shutdown(c->s, SD_BOTH);
    live_release();
    EnterCriticalSection(&queue_lock);
    WakeAllConditionVariable(&queue_cond);
    LeaveCriticalSection(&queue_lock);
    for (int i = 0; i < 200 && running > 0; i++)
        Sleep(10);
    if (o.model == MODEL_CLUSTER && running == 0)
        ferry.group_destroy(group);
    return 0;
}
