/* A Winsock echo server on 127.0.0.1 (an ephemeral port) under load from
 * CLIENTS client threads of the same program, each sending argv[1] messages
 * and checking every echo byte for byte; the server serves each client on a
 * thread of its own.  Prints what it checked; exit 0 when all echoes match. */
#include <winsock2.h>
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLIENTS 4
#define MSG 64

static int messages;
static unsigned short port;
static volatile LONG bad;

static int full(SOCKET s, char *buf, int n, int sending)
{
    for (int done = 0; done < n;) {
        int r = sending ? send(s, buf + done, n - done, 0) : recv(s, buf + done, n - done, 0);
        if (r <= 0)
            return -1;
        done += r;
    }
    return 0;
}

static DWORD WINAPI serve(LPVOID arg)
{
    SOCKET c = (SOCKET)(UINT_PTR)arg;
    char buf[MSG];
    while (full(c, buf, MSG, 0) == 0)
        if (full(c, buf, MSG, 1))
            break;
    closesocket(c);
    return 0;
}

static DWORD WINAPI client(LPVOID arg)
{
    int id = (int)(INT_PTR)arg;
    SOCKET s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
        InterlockedIncrement(&bad);
        return 1;
    }
    char out[MSG], in[MSG];
    for (int i = 0; i < messages; i++) {
        for (int k = 0; k < MSG; k++)
            out[k] = (char)(id * 31 + i * 7 + k);
        if (full(s, out, MSG, 1) || full(s, in, MSG, 0) || memcmp(in, out, MSG)) {
            InterlockedIncrement(&bad);
            break;
        }
    }
    closesocket(s);
    return 0;
}

int main(int argc, char **argv)
{
    messages = argc > 1 ? atoi(argv[1]) : 100;
    WSADATA w;
    if (WSAStartup(MAKEWORD(2, 2), &w))
        return 2;
    SOCKET l = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int len = sizeof(a);
    if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, CLIENTS) ||
        getsockname(l, (struct sockaddr *)&a, &len))
        return 3;
    port = ntohs(a.sin_port);
    HANDLE c[CLIENTS], s[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        c[i] = CreateThread(NULL, 0, client, (LPVOID)(INT_PTR)i, 0, NULL);
    for (int i = 0; i < CLIENTS; i++) {
        SOCKET conn = accept(l, NULL, NULL);
        s[i] = CreateThread(NULL, 0, serve, (LPVOID)(UINT_PTR)conn, 0, NULL);
    }
    WaitForMultipleObjects(CLIENTS, c, TRUE, INFINITE);
    WaitForMultipleObjects(CLIENTS, s, TRUE, INFINITE);
    closesocket(l);
    WSACleanup();
    printf("%d clients, %d messages each, %ld failed\n", CLIENTS, messages, bad);
    return bad ? 1 : 0;
}
