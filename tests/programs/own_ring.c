/* A program with an io_uring of its own (liburing), as MariaDB's InnoDB
 * has: one thread waits for its completions (io_uring_wait_cqe), another
 * submits.
 *
 *   own_ring shared   the main thread submits 100 NOPs, one at a time,
 *                     each after the waiter took the one before
 *   own_ring single   the waiter makes a SINGLE_ISSUER ring, which only it
 *                     may enter, submits a 30 ms timeout and waits for it
 *
 * Prints what the waiter saw. */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct io_uring ring;
static int took[2];   /* the waiter says it took a completion */
static int seen;

static void *waiter(void *arg)
{
    (void)arg;
    for (;;) {
        struct io_uring_cqe *cqe;
        int r = io_uring_wait_cqe(&ring, &cqe);
        if (r < 0)
            return fprintf(stderr, "wait: %s\n", strerror(-r)), (void *)1;
        unsigned long long data = cqe->user_data;
        io_uring_cqe_seen(&ring, cqe);
        if (data == 999)
            return 0;
        seen++;
        if (write(took[1], "t", 1) != 1)
            return (void *)1;
    }
}

static void *single(void *arg)
{
    (void)arg;
    struct io_uring own;
    int r = io_uring_queue_init(8, &own, IORING_SETUP_SINGLE_ISSUER);
    if (r == -EINVAL)   /* before Linux 6.0 */
        r = io_uring_queue_init(8, &own, 0);
    if (r < 0)
        return fprintf(stderr, "init: %s\n", strerror(-r)), (void *)1;
    struct __kernel_timespec ts = {0, 30 * 1000 * 1000};
    io_uring_prep_timeout(io_uring_get_sqe(&own), &ts, 0, 0);
    io_uring_submit(&own);
    struct io_uring_cqe *cqe;
    r = io_uring_wait_cqe(&own, &cqe);
    printf("timeout %s\n", r == 0 && cqe->res == -ETIME ? "ETIME" : "wrong");
    io_uring_queue_exit(&own);
    return 0;
}

int main(int argc, char **argv)
{
    int one = argc == 2 && !strcmp(argv[1], "single");
    if (argc != 2 || (!one && strcmp(argv[1], "shared"))) {
        fprintf(stderr, "usage: own_ring shared|single\n");
        return 2;
    }
    pthread_t t;
    void *res;
    if (one) {
        if (pthread_create(&t, 0, single, 0) || pthread_join(t, &res))
            return perror("pthread"), 1;
        return res != 0;
    }
    if (io_uring_queue_init(8, &ring, 0) || pipe(took) || pthread_create(&t, 0, waiter, 0))
        return perror("setup"), 1;
    char c;
    for (int i = 0; i < 100; i++) {
        io_uring_prep_nop(io_uring_get_sqe(&ring));
        io_uring_submit(&ring);
        if (read(took[0], &c, 1) != 1)
            return perror("read"), 1;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    io_uring_prep_nop(sqe);
    sqe->user_data = 999;
    io_uring_submit(&ring);
    if (pthread_join(t, &res))
        return perror("pthread_join"), 1;
    printf("seen %d\n", seen);
    return res != 0;
}
