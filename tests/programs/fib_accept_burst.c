/* A thread-per-connection server that N clients connect to at once (issue 14,
 * tail latency): every client has connected and sent its request before the
 * acceptor thread starts, as when wrk opens 2000 connections together.
 *
 * A ticker thread yields in a loop until every client has been answered and
 * counts its turns.  Under fibers on one carrier a yielding fiber runs once
 * per scheduler round, so the count is the number of rounds the burst took
 * (natively it is just a count of yields, and meaningless), and it notes
 * the most connections accepted between two of its turns: the acceptor may
 * take the backlog in a row, but not so long that the others never run.
 * With `rounds` as argument both are printed on a line of their own, for
 * the test to bound; the rest of the output is the same natively and under
 * Ferry.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fib_common.h"

#define CLIENTS 128

static int listen_fd;
static atomic_int served, accepted;

static void *connection(void *arg)
{
    int fd = (int)(long)arg;
    char buf[16];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n != 5 || memcmp(buf, "ping\n", 5))
        die("request", n < 0 ? errno : EPROTO);
    if (write(fd, "pong\n", 5) != 5)
        die("reply", errno);
    close(fd);
    atomic_fetch_add(&served, 1);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    pthread_attr_t detached;
    MUST(pthread_attr_init(&detached));
    MUST(pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED));
    for (int i = 0; i < CLIENTS; i++) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            die("accept4", errno);
        atomic_fetch_add(&accepted, 1);
        pthread_t t;
        MUST(pthread_create(&t, &detached, connection, (void *)(long)fd));
    }
    return NULL;
}

struct turns {
    long turns;
    int most_accepted;   /* between two turns */
};

static void *ticker(void *arg)
{
    struct turns *t = arg;
    int seen = atomic_load(&accepted);
    while (atomic_load(&served) < CLIENTS) {
        sched_yield();
        t->turns++;
        int now = atomic_load(&accepted);
        if (now - seen > t->most_accepted)
            t->most_accepted = now - seen;
        seen = now;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    alarm(30);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) ||
        listen(listen_fd, CLIENTS * 2) || getsockname(listen_fd, (struct sockaddr *)&sa, &sl))
        die("listen", errno);
    int clients[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        clients[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (clients[i] < 0 || connect(clients[i], (struct sockaddr *)&sa, sizeof sa))
            die("connect", errno);
        if (write(clients[i], "ping\n", 5) != 5)
            die("request", errno);
    }
    struct turns turns = {0, 0};
    pthread_t tick = spawn(ticker, &turns), acc = spawn(acceptor, NULL);
    join(acc);
    join(tick);
    int answered = 0;
    for (int i = 0; i < CLIENTS; i++) {
        char buf[8];
        if (read(clients[i], buf, sizeof buf) == 5 && !memcmp(buf, "pong\n", 5))
            answered++;
        close(clients[i]);
    }
    printf("%d clients connected at once, %d answered\n", CLIENTS, answered);
    if (argc > 1 && !strcmp(argv[1], "rounds"))
        printf("rounds %ld, at most %d accepted in one\n", turns.turns, turns.most_accepted);
    return answered == CLIENTS ? 0 : 1;
}
