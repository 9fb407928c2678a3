/* Just enough HTTP/1.1 for wrk, Python's http.client and a browser:
 * persistent connections, pipelining, Content-Length on every reply. */
#include "http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The page is linked in by page.S (.incbin), so the server needs no file at
 * run time and every model does the same socket-only work per request;
 * disk mode (page_path set) reads it from a file for every request instead. */
extern const char net_page_start[], net_page_end[];

enum { R_PAGE, R_404, R_405, R_400, R_COUNT };
/* [kind][keep-alive?] */
static struct iovec canned[R_COUNT][2];

static const char body_404[] =
    "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>"
    "<body><h1>Not Found</h1><p>This server has one page: <a href=\"/\">/</a>.</p></body></html>\n";
static const char body_405[] =
    "<!DOCTYPE html>\n<html><head><title>405 Method Not Allowed</title></head>"
    "<body><h1>Method Not Allowed</h1><p>Only GET is served here.</p></body></html>\n";
static const char body_400[] =
    "<!DOCTYPE html>\n<html><head><title>400 Bad Request</title></head>"
    "<body><h1>Bad Request</h1></body></html>\n";

static void build(int kind, const char *status, const char *extra, const char *body, size_t blen)
{
    for (int keep = 0; keep < 2; keep++) {
        char head[512];
        int h = snprintf(head, sizeof head,
                         "HTTP/1.1 %s\r\nServer: ferry-net\r\nContent-Type: text/html; charset=utf-8\r\n"
                         "Content-Length: %zu\r\n%sConnection: %s\r\n\r\n",
                         status, blen, extra, keep ? "keep-alive" : "close");
        char *buf = malloc((size_t)h + blen);
        if (!buf) {
            fputs("net_server: out of memory\n", stderr);
            exit(1);
        }
        memcpy(buf, head, (size_t)h);
        memcpy(buf + h, body, blen);
        canned[kind][keep].iov_base = buf;
        canned[kind][keep].iov_len = (size_t)h + blen;
    }
}

static char *page_path;

int http_init(const char *docroot)
{
    if (docroot) {
        size_t n = strlen(docroot);
        page_path = malloc(n + sizeof "/index.html");
        if (!page_path)
            return -ENOMEM;
        memcpy(page_path, docroot, n);
        memcpy(page_path + n, "/index.html", sizeof "/index.html");
        int rc = page_file_check(page_path);
        if (rc < 0)
            return rc;
    }
    build(R_PAGE, "200 OK", "", net_page_start, http_page_size());
    build(R_404, "404 Not Found", "", body_404, sizeof body_404 - 1);
    build(R_405, "405 Method Not Allowed", "Allow: GET\r\n", body_405, sizeof body_405 - 1);
    build(R_400, "400 Bad Request", "", body_400, sizeof body_400 - 1);
    return 0;
}

void http_release(struct http_conn *c)
{
    free(c->body);
    c->body = NULL;
    c->body_cap = 0;
}

/* Disk mode: the page read now into c->body, its reply into r (two iovecs);
 * 0, or -1 when the file cannot be read (the request then gets a 404). */
static int page_from_disk(struct http_conn *c, struct replies *r, int keep)
{
    long got = page_file_read(page_path, &c->body, &c->body_cap);
    if (got < 0)
        return -1;
    int h = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 200 OK\r\nServer: ferry-net\r\nContent-Type: text/html; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n\r\n",
                     (size_t)got, keep ? "keep-alive" : "close");
    r->iov[r->n].iov_base = c->head;
    r->iov[r->n++].iov_len = (size_t)h;
    r->iov[r->n].iov_base = c->body;
    r->iov[r->n++].iov_len = (size_t)got;
    return 0;
}

size_t http_page_size(void)
{
    return (size_t)(net_page_end - net_page_start);
}

static int is_tchar(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static const char *find_end(const char *p, size_t n)
{
    for (size_t i = 0; i + 3 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' && p[i + 3] == '\n')
            return p + i;
    return NULL;
}

/* Whether a comma-separated header value holds `token` (case-insensitive). */
static int has_token(const char *v, size_t n, const char *token)
{
    size_t tl = strlen(token);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, token, tl) == 0)
            return 1;
    }
    return 0;
}

/* One request in [p, end) (end points at the blank line's CRLFCRLF);
 * returns the reply kind and whether the connection stays open. */
static int answer(const char *p, const char *end, int *keep)
{
    const char *eol = memchr(p, '\r', (size_t)(end + 2 - p));
    if (eol[1] != '\n')
        return R_400;
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (!sp1 || sp1 == p)
        return R_400;
    for (const char *q = p; q < sp1; q++)
        if (!is_tchar(*q))
            return R_400;
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', (size_t)(eol - target));
    if (!sp2 || sp2 == target || *target != '/')
        return R_400;
    const char *version = sp2 + 1;
    if (eol - version != 8 || memcmp(version, "HTTP/1.", 7) != 0 || (version[7] != '0' && version[7] != '1'))
        return R_400;
    int http11 = version[7] == '1';
    *keep = http11;

    int host = 0;
    const char *line = eol + 2;
    while (line < end + 2) {
        const char *le = memchr(line, '\r', (size_t)(end + 2 - line));
        if (le[1] != '\n')
            return R_400;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (!colon || colon == line)
            return R_400;
        for (const char *q = line; q < colon; q++)
            if (!is_tchar(*q))
                return R_400;
        const char *v = colon + 1;
        size_t nlen = (size_t)(colon - line), vlen = (size_t)(le - v);
        if (nlen == 4 && strncasecmp(line, "host", 4) == 0) {
            host++;
        } else if (nlen == 10 && strncasecmp(line, "connection", 10) == 0) {
            if (has_token(v, vlen, "close"))
                *keep = 0;
            else if (has_token(v, vlen, "keep-alive"))
                *keep = 1;
        } else if (nlen == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
            /* A body we would have to skip: GET has none worth supporting. */
            return R_400;
        } else if (nlen == 14 && strncasecmp(line, "content-length", 14) == 0) {
            while (vlen && (*v == ' ' || *v == '\t'))
                v++, vlen--;
            while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
                vlen--;
            if (vlen != 1 || *v != '0')
                return R_400;
        }
        line = le + 2;
    }
    /* RFC 9112 3.2: an HTTP/1.1 request without exactly one Host is a 400. */
    if (http11 && host != 1)
        return R_400;
    if (sp1 - p != 3 || memcmp(p, "GET", 3) != 0)
        return R_405;
    size_t plen = (size_t)(sp2 - target);
    const char *qm = memchr(target, '?', plen);
    if (qm)
        plen = (size_t)(qm - target);
    if ((plen == 1) || (plen == 11 && memcmp(target, "/index.html", 11) == 0))
        return R_PAGE;
    return R_404;
}

void http_take(struct http_conn *c, struct replies *r)
{
    size_t off = 0;
    r->n = 0;
    r->close = 0;
    r->more = 0;
    while (!r->close) {
        if (r->n == HTTP_MAX_REPLIES) {
            r->more = 1;
            break;
        }
        const char *p = c->buf + off;
        const char *end = find_end(p, c->len - off);
        if (!end) {
            /* No room left to complete the request: it can never be answered. */
            if (off == 0 && c->len == CONN_BUF) {
                r->iov[r->n++] = canned[R_400][0];
                r->close = 1;
            }
            break;
        }
        int keep = 0;
        int kind = answer(p, end, &keep);
        if (kind == R_400)
            keep = 0;
        off = (size_t)(end + 4 - c->buf);
        if (kind == R_PAGE && page_path) {
            if (r->n + 2 > HTTP_MAX_REPLIES) {
                off = (size_t)(p - c->buf);     /* answered next round */
                r->more = 1;
                break;
            }
            if (page_from_disk(c, r, keep) < 0)
                r->iov[r->n++] = canned[R_404][keep];
            r->close = !keep;
            /* c->body is this reply's until it is sent: one page a round */
            r->more = !r->close && off < c->len;
            break;
        }
        r->iov[r->n++] = canned[kind][keep];
        r->close = !keep;
    }
    if (r->close)
        c->len = 0;
    else if (off) {
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
}

int http_serve_buffered(struct http_conn *c, int (*send)(void *io, struct replies *r), void *io)
{
    for (;;) {
        struct replies r;
        http_take(c, &r);
        if (r.n && send(io, &r) < 0)
            return 0;
        if (r.close)
            return 0;
        if (!r.more)
            return 1;
    }
}
