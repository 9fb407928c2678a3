/* Connects to a listener of its own on loopback 20 times from a second
 * thread, then 20 times from the first, and prints how many connected and
 * how many were refused with EACCES (tests/programs/under_filter.c's
 * filter): under that filter, "0 connected, 20 refused" twice.  Under
 * fibers a thread's connect went to io_uring, whose operations no filter
 * binds, and connected. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in addr;

static void *connects(void *arg)
{
    (void)arg;
    int connected = 0, refused = 0;
    for (int i = 0; i < 20; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0)
            return (void *)1;
        if (connect(s, (struct sockaddr *)&addr, sizeof(addr)) == 0)
            connected++;
        else if (errno == EACCES)
            refused++;
        close(s);
    }
    printf("%d connected, %d refused\n", connected, refused);
    fflush(stdout);
    return 0;
}

int main(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof(addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l < 0 || bind(l, (struct sockaddr *)&addr, sizeof(addr)) || listen(l, 64) ||
        getsockname(l, (struct sockaddr *)&addr, &len))
        return 2;
    pthread_t t;
    void *failed = (void *)1;
    if (pthread_create(&t, 0, connects, 0) || pthread_join(t, &failed) || failed)
        return 3;
    return connects(0) ? 3 : 0;
}
