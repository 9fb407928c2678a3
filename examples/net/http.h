/* The HTTP side of the evaluation server, shared by every thread model so that
 * the models differ only in how they wait, never in the work per request. */
#ifndef NET_HTTP_H
#define NET_HTTP_H

#include <stddef.h>
#ifdef _WIN32
/* Winsock has no iovec: the same two fields, turned into WSABUFs to be sent. */
struct iovec {
    void *iov_base;
    size_t iov_len;
};
#else
#include <sys/uio.h>
#endif

/* A request larger than this (request line plus headers) is refused with 400:
 * the benchmark's requests are ~40 bytes, browsers' well under 8 KiB. */
#define CONN_BUF 8192
/* Pipelined requests answered per round: bounds the iovec, not the client. */
#define HTTP_MAX_REPLIES 16

/* A connection's HTTP state; each platform's server embeds it in its own
 * connection record, next to its socket and its way of waiting. */
struct http_conn {
    size_t len;                 /* bytes of buf holding unanswered input */
    /* disk mode: the page as read for the reply in flight, and its header */
    char *body;
    size_t body_cap;
    char head[256];
    char buf[CONN_BUF];
};

struct replies {
    struct iovec iov[HTTP_MAX_REPLIES];
    int n;
    int close;     /* close the connection once the replies are sent */
    int more;      /* stopped at HTTP_MAX_REPLIES: buf may hold further requests */
};

/* Builds the canned replies; call once before serving.  With a docroot
 * (disk mode), the page is DOCROOT/index.html, opened, fstat'ed, read and
 * closed for every request that asks for it, as the thesis's server did
 * (a real static-file server's work); NULL serves the page linked in.
 * Returns 0, or -errno when the docroot's page cannot be read. */
int http_init(const char *docroot);
size_t http_page_size(void);

/* Answers every complete request at the start of c->buf (the replies are
 * static buffers, shared by all connections, except a disk-mode page, read
 * into c->body: one such reply per call, then r->more) and drops them from buf. */
void http_take(struct http_conn *c, struct replies *r);

/* The blocking models' round (thread, pool, cluster): answers what c->buf
 * holds, handing each batch of replies to send(io, r) (0, or -1 when the
 * connection failed), until more input is needed.  Returns 1 when the
 * connection stays open, 0 when a reply or a failed send closes it. */
int http_serve_buffered(struct http_conn *c, int (*send)(void *io, struct replies *r), void *io);

/* Frees what http_take kept in `c` (before freeing c). */
void http_release(struct http_conn *c);

/* The platform's part (net_posix.c, net_win.c): the disk-mode page file.
 * page_file_check: 0 when `path` can be opened for reading, else -errno.
 * page_file_read: the whole regular file at `path` read into *buf (grown,
 * *cap its size), in the thesis's calls: open, size, read, close; the bytes
 * read, or -1 when it cannot be read. */
int page_file_check(const char *path);
long page_file_read(const char *path, char **buf, size_t *cap);

#endif
