/* Two threads hand a turn back and forth by busy-waiting on a shared word,
 * making no system call while they spin (as user-space spin locks and
 * flags do): natively each runs on a CPU of its own, and on one CPU the
 * kernel's tick preempts the spinner.  Under -p fibers, on one carrier, the
 * engine's tick must do the same: the program's first thread, preempted
 * before the scheduler's first turn, was left unqueued and never ran again
 * (the process hung).  Prints "handed N times". */
#include <pthread.h>
#include <stdio.h>

#define ROUNDS 20

static volatile int turn;  /* even: the first thread's; odd: the other's */

static void *other(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        while (turn % 2 == 0)
            ;
        __atomic_add_fetch(&turn, 1, __ATOMIC_SEQ_CST);
    }
    return 0;
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, 0, other, 0);
    for (int i = 0; i < ROUNDS; i++) {
        __atomic_add_fetch(&turn, 1, __ATOMIC_SEQ_CST);
        while (turn % 2 == 1)
            ;
    }
    pthread_join(t, 0);
    printf("handed %d times\n", turn);
    return 0;
}
