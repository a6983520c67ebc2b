/*
 * The submitter: sends a ledger's tasks through the API on N kept-alive
 * connections, in batches that may be paced. A few event-loop threads
 * (epoll, non-blocking sockets) share the connections: with one blocking
 * thread per connection the client's context switches took the CPU that the
 * system under test needs on a small machine.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "log.h"
#include "xmalloc.h"

#define LOOPS_MAX 2
#define IO_TIMEOUT_US (120 * 1000000LL) /* no progress on a request */

struct submitter {
	const struct bench_opts *o;
	struct ledger *l;
	char *topic_json; /* the "topic" member, escaped once */
	char *body_json;  /* the "body" member */
	int batch;
	size_t nbatches;
	const int64_t *send_mono_us;
	int64_t stop_mono; /* 0: no time limit */
	atomic_int halted; /* submitter_halt() */
	const char *path;
	char host[256];
	int port;
	struct sockaddr_storage addr; /* resolved once */
	socklen_t addrlen;
	char addr_err[256]; /* why there is no address */
	atomic_size_t next;
	atomic_long sent;
	struct sloop *loops;
	int nloops;
	struct submit_stats st;
	int64_t t0;
};

/* The tasks of a batch as JSON; returns the length. */
static size_t
build(struct submitter *s, size_t first, size_t n, char **buf, size_t *cap)
{
	size_t need = 64 + n * (strlen(s->topic_json) + strlen(s->body_json) +
				sizeof(s->l->prefix) + 96);
	size_t len = 0;
	char id[160];

	if (need > *cap) {
		*cap = need;
		*buf = xrealloc(*buf, *cap);
	}
	if (!s->o->single)
		len += (size_t)sprintf(*buf + len, "{\"tasks\":[");
	for (size_t i = first; i < first + n; i++) {
		ledger_id(s->l, i, id, sizeof(id));
		len += (size_t)sprintf(
			*buf + len,
			"%s{\"id\":\"%s\",%s,%s,\"due_at\":%" PRId64 "}",
			i > first ? "," : "", id, s->topic_json, s->body_json,
			s->l->due_ms[i]);
	}
	if (!s->o->single)
		len += (size_t)sprintf(*buf + len, "]}");
	return len;
}

/*
 * The integer "code" of each result in order ({"results":[{...,"code":201},
 * ...]}); an error result also has a nested string "code", skipped here.
 */
static size_t
parse_codes(const char *resp, int *codes, size_t n)
{
	const char *p = resp;
	size_t k = 0;

	while (k < n && (p = strstr(p, "\"code\":")) != NULL) {
		p += 7;
		while (*p == ' ')
			p++;
		if (*p >= '0' && *p <= '9')
			codes[k++] = atoi(p);
	}
	return k;
}

static void
count_code(struct submit_stats *st, int code, long n)
{
	if (code == 201)
		st->accepted += n;
	else if (code == 200)
		st->replayed += n;
	else if (code == 409)
		st->conflicts += n;
	else if (code >= 400 && code < 500)
		st->rejected += n;
	else if (code >= 500)
		st->unavailable += n;
	else
		st->neterr += n;
}

enum {
	CONN_IDLE,	 /* between requests: takes the next batch */
	CONN_WAIT,	 /* holds a batch not due yet */
	CONN_CONNECTING, /* non-blocking connect under way */
	CONN_SENDING,
	CONN_READING,
	CONN_DONE, /* no more batches for it */
};

/* One kept-alive connection: at most one request outstanding. */
struct sconn {
	struct sloop *lp;
	int fd;
	int state;
	unsigned events; /* registered with epoll */
	int fresh;	 /* connected for the current request */
	int got_any;	 /* answer bytes seen for it */
	size_t first, n; /* the batch's tasks */
	int64_t send_at; /* CONN_WAIT: planned send time */
	int64_t t1;	 /* request start */
	int64_t io_by;	 /* deadline of the next progress */
	char head[1024];
	size_t head_len;
	char *body;
	size_t body_len, body_cap;
	size_t sent; /* bytes of head + body written */
	struct http_resp resp;
};

/* An event-loop thread and the connections it owns. */
struct sloop {
	struct submitter *s;
	pthread_t thread;
	int epfd;
	struct sconn *conns;
	int nconns, active; /* active: not CONN_DONE */
	int *codes;
	struct submit_stats st;
	double *lat;
	size_t nlat, latcap;
};

static void
conn_watch(struct sconn *c, unsigned events)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};

	if (c->events == events)
		return;
	epoll_ctl(c->lp->epfd, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd,
		  &ev);
	c->events = events;
}

static void
conn_close(struct sconn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->events = 0;
}

/* Accounts the answer (status, or -1 with err) of the current request. */
static void
conn_result(struct sconn *c, int status, const char *err)
{
	struct sloop *lp = c->lp;
	struct submitter *s = lp->s;
	struct submit_stats *st = &lp->st;
	const char *resp = c->resp.body ? c->resp.body : "";
	int64_t t2 = clock_mono_us(), ts = now_us();
	size_t first = c->first, n = c->n;

	st->last_done_mono = t2;
	st->requests++;
	st->tasks_sent += (long)n;
	atomic_fetch_add(&s->sent, (long)n);
	if (lp->nlat == lp->latcap) {
		lp->latcap = lp->latcap ? 2 * lp->latcap : 4096;
		lp->lat = xrealloc(lp->lat, lp->latcap * sizeof(double));
	}
	lp->lat[lp->nlat++] = (double)(t2 - c->t1) / 1e3;
	if (status < 0) {
		st->neterr += (long)n;
		snprintf(st->last_error, sizeof(st->last_error), "%s", err);
		return;
	}
	if (s->o->single) {
		count_code(st, status, 1);
		if (status == 201 || status == 200) {
			s->l->accept_us[first] = ts;
			atomic_fetch_add(&s->l->accepted, 1);
		} else {
			snprintf(st->last_error, sizeof(st->last_error),
				 "HTTP %d: %.200s", status, resp);
		}
		return;
	}
	if (status != 200) {
		count_code(st, status, (long)n);
		snprintf(st->last_error, sizeof(st->last_error),
			 "HTTP %d: %.200s", status, resp);
		return;
	}
	if (parse_codes(resp, lp->codes, n) != n) {
		st->neterr += (long)n;
		snprintf(st->last_error, sizeof(st->last_error),
			 "unparsable batch answer: %.200s", resp);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		count_code(st, lp->codes[i], 1);
		if (lp->codes[i] == 201 || lp->codes[i] == 200) {
			s->l->accept_us[first + i] = ts;
			atomic_fetch_add(&s->l->accepted, 1);
		}
	}
}

/*
 * The request failed: recorded, and the loop gives the connection its next
 * batch (not from here: a refused connection fails every batch at once).
 */
static void
conn_fail(struct sconn *c, const char *err)
{
	conn_close(c);
	conn_result(c, -1, err);
	c->state = CONN_IDLE;
}

static void conn_start(struct sconn *c);

/* A connect failed (a fresh connection: nothing to retry). */
static void
conn_connect_failed(struct sconn *c, int errnum)
{
	struct submitter *s = c->lp->s;
	char err[512];

	snprintf(err, sizeof(err), "connect %s:%d: %s", s->host, s->port,
		 strerror(errnum));
	conn_fail(c, err);
}

/*
 * The connection broke during a request. A kept-alive one the server had
 * closed before any answer came is retried once on a fresh connection.
 */
static void
conn_broken(struct sconn *c, const char *why)
{
	char err[256];

	snprintf(err, sizeof(err), "POST %s: %s", c->lp->s->path, why);
	conn_close(c);
	if (c->fresh || c->got_any) {
		conn_fail(c, err);
		return;
	}
	conn_start(c);
}

/* Writes what the socket takes; then waits for the answer. */
static void
conn_write(struct sconn *c)
{
	while (c->sent < c->head_len + c->body_len) {
		struct iovec iov[2];
		int k = 0;
		ssize_t w;

		if (c->sent < c->head_len) {
			iov[k].iov_base = c->head + c->sent;
			iov[k++].iov_len = c->head_len - c->sent;
			iov[k].iov_base = c->body;
			iov[k++].iov_len = c->body_len;
		} else {
			iov[k].iov_base = c->body + (c->sent - c->head_len);
			iov[k++].iov_len = c->head_len + c->body_len - c->sent;
		}
		w = writev(c->fd, iov, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			conn_watch(c, EPOLLIN | EPOLLOUT);
			return;
		}
		if (w <= 0) {
			conn_broken(c, w < 0 ? strerror(errno)
					     : "connection closed");
			return;
		}
		c->sent += (size_t)w;
		c->io_by = clock_mono_us() + IO_TIMEOUT_US;
	}
	c->state = CONN_READING;
	conn_watch(c, EPOLLIN);
}

/* Starts (or restarts on a fresh connection) the current request. */
static void
conn_start(struct sconn *c)
{
	struct submitter *s = c->lp->s;
	int one = 1;

	c->fresh = 0;
	c->got_any = 0;
	c->sent = 0;
	http_resp_reset(&c->resp);
	c->io_by = clock_mono_us() + IO_TIMEOUT_US;
	if (c->fd >= 0) {
		c->state = CONN_SENDING;
		conn_write(c);
		return;
	}
	c->fresh = 1;
	if (s->addrlen == 0) {
		conn_fail(c, s->addr_err);
		return;
	}
	c->fd = socket(s->addr.ss_family,
		       SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd >= 0)
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (c->fd >= 0 &&
	    connect(c->fd, (struct sockaddr *)&s->addr, s->addrlen) == 0) {
		c->state = CONN_SENDING;
		conn_write(c);
		return;
	}
	if (c->fd >= 0 && errno == EINPROGRESS) {
		c->state = CONN_CONNECTING;
		conn_watch(c, EPOLLOUT);
		return;
	}
	conn_connect_failed(c, errno);
}

/* The batch's time has come: send it, unless the time limit passed. */
static void
conn_send(struct sconn *c)
{
	struct submitter *s = c->lp->s;
	struct submit_stats *st = &c->lp->st;
	int64_t t1 = clock_mono_us();

	if (s->send_mono_us != NULL) {
		double lag = (double)(t1 - c->send_at) / 1e3;

		if (lag > st->max_send_lag_ms)
			st->max_send_lag_ms = lag;
		if (lag > 50)
			st->late_sends++;
	}
	if ((s->stop_mono && t1 > s->stop_mono) || atomic_load(&s->halted)) {
		conn_close(c);
		c->state = CONN_DONE;
		c->lp->active--;
		return;
	}
	c->body_len = build(s, c->first, c->n, &c->body, &c->body_cap);
	c->head_len = (size_t)snprintf(c->head, sizeof(c->head),
				       "POST %s HTTP/1.1\r\nHost: %s:%d\r\n%s"
				       "Content-Type: application/json\r\n"
				       "Content-Length: %zu\r\n\r\n",
				       s->path, s->host, s->port,
				       httpc_auth_header(), c->body_len);
	c->t1 = t1;
	if (t1 < st->first_send_mono)
		st->first_send_mono = t1;
	conn_start(c);
}

/* Takes the next batch: sends it now, or waits for its time. */
static void
conn_next(struct sconn *c)
{
	struct submitter *s = c->lp->s;
	size_t b;

	if (c->resp.close_after) {
		conn_close(c);
		c->resp.close_after = 0;
	}
	b = atomic_fetch_add(&s->next, 1);
	if (b >= s->nbatches || bench_stop || atomic_load(&s->halted)) {
		conn_close(c);
		c->state = CONN_DONE;
		c->lp->active--;
		return;
	}
	c->first = b * (size_t)s->batch;
	c->n = s->l->n - c->first < (size_t)s->batch ? s->l->n - c->first
						     : (size_t)s->batch;
	c->state = CONN_IDLE;
	if (s->send_mono_us != NULL) {
		c->send_at = s->send_mono_us[b];
		if (clock_mono_us() < c->send_at) {
			c->state = CONN_WAIT;
			return;
		}
	}
	conn_send(c);
}

static void
conn_readable(struct sconn *c)
{
	for (;;) {
		size_t room;
		char *p = http_resp_space(&c->resp, &room);
		ssize_t n = read(c->fd, p, room);
		int rc;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0) {
			conn_broken(c, strerror(errno));
			return;
		}
		if (n == 0) {
			if (http_resp_eof(&c->resp) < 0) {
				conn_broken(c, "connection closed");
				return;
			}
			conn_result(c, c->resp.status, NULL);
			c->state = CONN_IDLE;
			return;
		}
		c->got_any = 1;
		c->io_by = clock_mono_us() + IO_TIMEOUT_US;
		rc = http_resp_feed(&c->resp, (size_t)n);
		if (rc < 0) {
			conn_broken(c, "malformed HTTP answer");
			return;
		}
		if (rc > 0) {
			conn_result(c, c->resp.status, NULL);
			c->state = CONN_IDLE;
			return;
		}
	}
}

static void
conn_event(struct sconn *c, unsigned events)
{
	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	char b;

	switch (c->state) {
	case CONN_CONNECTING:
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr != 0) {
			conn_connect_failed(c, soerr);
			return;
		}
		c->state = CONN_SENDING;
		conn_write(c);
		return;
	case CONN_SENDING:
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			conn_write(c);
		else if (events & EPOLLIN)
			conn_readable(c); /* an early answer (error) */
		return;
	case CONN_READING: conn_readable(c); return;
	default:
		/* Between requests: the server closed the kept-alive
		 * connection (or spoke out of turn). */
		if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
		    errno == EAGAIN && !(events & (EPOLLERR | EPOLLHUP)))
			return;
		conn_close(c);
		return;
	}
}

/*
 * Connects before the first batch, as the blocking client did, so that no
 * handshake is in the first requests' latency. A failure is left to the
 * first request to report.
 */
static void
conn_preconnect(struct sconn *c)
{
	struct submitter *s = c->lp->s;
	int one = 1;

	if (s->addrlen == 0)
		return;
	c->fd = socket(s->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return;
	if (connect(c->fd, (struct sockaddr *)&s->addr, s->addrlen) < 0) {
		conn_close(c);
		return;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
}

/* Times out requests that made no progress for IO_TIMEOUT_US. */
static void
loop_timeouts(struct sloop *lp, int64_t now)
{
	for (int i = 0; i < lp->nconns; i++) {
		struct sconn *c = &lp->conns[i];

		if (c->state >= CONN_CONNECTING && c->state <= CONN_READING &&
		    now > c->io_by)
			conn_broken(c, "no progress for 120 s");
	}
}

static void *
loop_main(void *arg)
{
	struct sloop *lp = arg;
	struct epoll_event evs[64];
	int64_t next_scan = clock_mono_us() + 1000000;

	for (int i = 0; i < lp->nconns; i++)
		conn_preconnect(&lp->conns[i]);
	while (lp->active > 0) {
		int64_t now, wake = next_scan, wait;
		struct timespec ts;
		int n;

		for (int i = 0; i < lp->nconns; i++) {
			struct sconn *c = &lp->conns[i];

			if (c->state == CONN_IDLE)
				conn_next(c);
			if (c->state == CONN_WAIT) {
				now = clock_mono_us();
				if (c->send_at <= now)
					conn_send(c);
				else if (c->send_at < wake)
					wake = c->send_at;
			}
			if (c->state == CONN_IDLE)
				wake = 0; /* failed at once: go on at once */
		}
		now = clock_mono_us();
		if (now >= next_scan) {
			loop_timeouts(lp, now);
			next_scan = now + 1000000;
			continue;
		}
		if (lp->active == 0)
			break;
		wait = wake > now ? wake - now : 0;
		ts.tv_sec = (time_t)(wait / 1000000);
		ts.tv_nsec = (long)(wait % 1000000) * 1000;
		n = epoll_pwait2(lp->epfd, evs, 64, &ts, NULL);
		for (int i = 0; i < n; i++)
			conn_event(evs[i].data.ptr, evs[i].events);
	}
	return NULL;
}

/* Adds a loop's figures to the submitter's. */
static void
loop_merge(struct submitter *s, struct sloop *lp)
{
	struct submit_stats *local = &lp->st;

	s->st.requests += local->requests;
	s->st.tasks_sent += local->tasks_sent;
	s->st.accepted += local->accepted;
	s->st.replayed += local->replayed;
	s->st.conflicts += local->conflicts;
	s->st.rejected += local->rejected;
	s->st.unavailable += local->unavailable;
	s->st.neterr += local->neterr;
	s->st.late_sends += local->late_sends;
	if (local->max_send_lag_ms > s->st.max_send_lag_ms)
		s->st.max_send_lag_ms = local->max_send_lag_ms;
	if (local->requests && local->first_send_mono < s->st.first_send_mono)
		s->st.first_send_mono = local->first_send_mono;
	if (local->last_done_mono > s->st.last_done_mono)
		s->st.last_done_mono = local->last_done_mono;
	if (local->last_error[0])
		memcpy(s->st.last_error, local->last_error,
		       sizeof(local->last_error));
	s->st.req_ms = xrealloc(s->st.req_ms,
				(s->st.nreq + lp->nlat + 1) * sizeof(double));
	if (lp->nlat)
		memcpy(s->st.req_ms + s->st.nreq, lp->lat,
		       lp->nlat * sizeof(double));
	s->st.nreq += lp->nlat;
}

/* The API's address, once for every connection (err: why not). */
static void
resolve(struct submitter *s)
{
	struct addrinfo hints = {0}, *res = NULL;
	char port[16];
	int rc;

	if (http_base_parse(s->o->api, s->host, sizeof(s->host), &s->port) <
	    0) {
		snprintf(s->addr_err, sizeof(s->addr_err),
			 "bad URL '%s' (want http://host:port)", s->o->api);
		return;
	}
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(port, sizeof(port), "%d", s->port);
	rc = getaddrinfo(s->host, port, &hints, &res);
	if (rc != 0) {
		snprintf(s->addr_err, sizeof(s->addr_err), "%.200s: %s",
			 s->host, gai_strerror(rc));
		return;
	}
	memcpy(&s->addr, res->ai_addr, res->ai_addrlen);
	s->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
}

struct submitter *
submitter_start(const struct bench_opts *o, struct ledger *l, const char *topic,
		int batch, const int64_t *send_mono_us, double stop_after_s)
{
	struct submitter *s = xcalloc(1, sizeof(*s));
	char *body = xmalloc((size_t)o->body_size + 1);

	for (int i = 0; i < o->body_size; i++)
		body[i] = (char)('a' + i % 26);
	body[o->body_size] = '\0';
	s->o = o;
	s->l = l;
	s->batch = o->single ? 1 : batch;
	s->nbatches = (l->n + (size_t)s->batch - 1) / (size_t)s->batch;
	s->send_mono_us = send_mono_us;
	s->topic_json = xasprintf("\"topic\":\"%s\"", topic);
	if (o->callback_url != NULL)
		s->body_json = xasprintf("\"body\":\"%s\",\"callback\":"
					 "{\"url\":\"%s\"}",
					 body, o->callback_url);
	else
		s->body_json = xasprintf("\"body\":\"%s\"", body);
	xfree(body);
	s->t0 = clock_mono_us();
	s->stop_mono =
		stop_after_s > 0 ? s->t0 + (int64_t)(stop_after_s * 1e6) : 0;
	s->st.first_send_mono = INT64_MAX;
	s->path = o->single ? "/v1/tasks" : "/v1/tasks/batch";
	resolve(s);
	s->nloops = o->conns < LOOPS_MAX ? o->conns : LOOPS_MAX;
	s->loops = xcalloc((size_t)s->nloops, sizeof(*s->loops));
	for (int i = 0; i < s->nloops; i++) {
		struct sloop *lp = &s->loops[i];

		lp->s = s;
		lp->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (lp->epfd < 0)
			log_fatal("epoll_create1 failed", "error=\"%s\"",
				  strerror(errno));
		/* Connection k belongs to loop k % nloops. */
		lp->nconns = (o->conns - i + s->nloops - 1) / s->nloops;
		lp->active = lp->nconns;
		lp->conns = xcalloc((size_t)lp->nconns, sizeof(*lp->conns));
		for (int k = 0; k < lp->nconns; k++) {
			lp->conns[k].lp = lp;
			lp->conns[k].fd = -1;
		}
		lp->codes = xcalloc((size_t)s->batch, sizeof(int));
		lp->st.first_send_mono = INT64_MAX;
	}
	for (int i = 0; i < s->nloops; i++)
		pthread_create(&s->loops[i].thread, NULL, loop_main,
			       &s->loops[i]);
	return s;
}

void
submitter_halt(struct submitter *s)
{
	atomic_store(&s->halted, 1);
}

long
submitter_sent(struct submitter *s)
{
	return atomic_load(&s->sent);
}

void
submitter_join(struct submitter *s, struct submit_stats *st)
{
	for (int i = 0; i < s->nloops; i++) {
		struct sloop *lp = &s->loops[i];

		pthread_join(lp->thread, NULL);
		loop_merge(s, lp);
		for (int k = 0; k < lp->nconns; k++) {
			conn_close(&lp->conns[k]);
			xfree(lp->conns[k].body);
			http_resp_free(&lp->conns[k].resp);
		}
		close(lp->epfd);
		xfree(lp->conns);
		xfree(lp->codes);
		xfree(lp->lat);
	}
	*st = s->st;
	if (st->first_send_mono == INT64_MAX)
		st->first_send_mono = st->last_done_mono = clock_mono_us();
	xfree(s->loops);
	xfree(s->topic_json);
	xfree(s->body_json);
	xfree(s);
}

void
submit_report(struct report *r, const struct submit_stats *st)
{
	report_int(r, "requests", "HTTP requests", st->requests);
	report_int(r, "tasks_sent", "tasks sent", st->tasks_sent);
	report_int(r, "accepted", "accepted (201)", st->accepted);
	if (st->replayed)
		report_int(r, "replayed", "replayed (200)", st->replayed);
	report_int(r, "errors", "not accepted (409/4xx/5xx/transport)",
		   st->conflicts + st->rejected + st->unavailable + st->neterr);
	if (st->unavailable)
		report_int(r, "unavailable", "  of which 5xx", st->unavailable);
	if (st->neterr)
		report_int(r, "neterr", "  of which transport", st->neterr);
	if (st->last_error[0])
		report_str(r, "last_error", "last error", st->last_error);
}
