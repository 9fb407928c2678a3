/* A server's child that dropped root, then runs threads (apache2's and
 * nginx's workers do).  Once it changed its user the process is no longer
 * dumpable and cannot open its own /proc/self/auxv; what it learns there
 * must come from elsewhere.  Under fibers, its two threads hand a byte back
 * and forth over pipes 500 times: each hand-over is a fiber switch.
 *
 * Prints "handed 500" natively and under fibers (run by another user than
 * root, it keeps its user).
 */
#define _GNU_SOURCE
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define ROUNDS 500
static int to_b[2], to_a[2];

static void *b_side(void *arg)
{
    (void)arg;
    char c;
    for (int i = 0; i < ROUNDS; i++)
        if (read(to_b[0], &c, 1) != 1 || write(to_a[1], &c, 1) != 1)
            break;
    return 0;
}

int main(void)
{
    if (geteuid() == 0 && (setgroups(0, 0) || setgid(65534) || setuid(65534))) {
        perror("dropping root");
        return 1;
    }
    if (pipe(to_b) || pipe(to_a))
        return 1;
    pthread_t t;
    if (pthread_create(&t, 0, b_side, 0))
        return 1;
    int handed = 0;
    char c = 'x';
    for (int i = 0; i < ROUNDS; i++) {
        if (write(to_b[1], &c, 1) != 1 || read(to_a[0], &c, 1) != 1)
            break;
        handed++;
    }
    pthread_join(t, 0);
    printf("handed %d\n", handed);
    return 0;
}
