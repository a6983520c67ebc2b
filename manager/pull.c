#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "hmap.h"
#include "http.h"
#include "kafka.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "timerwheel.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * Pull consumption: services without a Kafka client take the due tasks of
 * a topic over HTTP (GET /v1/topics/{topic}/next, POST .../ack, and
 * mykit-delay's GET /get/{topic}). Nothing here decides what is due: the
 * manager reads what the workers published to <prefix><topic>, with one
 * Kafka consumer per pull group and topic (group.id <prefix>G:<kafka
 * topic>), so a pull group is an ordinary Kafka consumer group whose
 * offsets live in Kafka, and pull clients see exactly what Kafka consumers
 * see.
 *
 * What a consumer delivers is held in memory: ready messages wait for a
 * request, a message handed out carries a lease (its visibility timeout),
 * and an expired lease makes it ready again. An acknowledged message is
 * done; a partition's offset is committed up to its first message not done,
 * so a restart, a rebalance or a closed group hands out again at most what
 * was not acknowledged (at-least-once). A message is never handed out
 * before its prophet-due-at by this manager's clock (the workers publish at
 * the due time, so this only holds back what a skewed clock lets through).
 *
 * Requests wait (long poll) on their group for up to wait_ms. A waiting
 * request is in service for the HTTP gate, which never evicts it at the
 * connection limit, hence pull.max_waiting and its cap at half of
 * http.max_connections. evhttp does not read a connection while its request
 * is in service, so a client that went away is found by the TCP state of
 * its socket: before anything is handed to it, and every second.
 */

#define PULL_TICK_MS 1000
#define PULL_COMMIT_MS 100
#define PULL_HOLD_MS 5000
#define PULL_ANSWER_BYTES (4 * 1024 * 1024)
#define PULL_MAX_RECEIPTS 10000
#define PULL_VISIBILITY_MIN 100
#define PULL_VISIBILITY_MAX 43200000
/* mykit-delay's Status.Ready: out of the delay queue, for a client. */
#define MYKIT_STATUS_READY 2

enum pmsg_state {
	PM_EARLY,  /* before its due time by our clock: held */
	PM_READY,  /* in the ready queue */
	PM_LEASED, /* handed out, lease running */
	PM_DONE,   /* acknowledged; freed once its offset is committed */
};

struct pgroup;

struct pmsg {
	struct pgroup *g;
	struct ppart *part;
	int64_t offset;
	int64_t due_at; /* prophet-due-at, 0 if none */
	enum pmsg_state state;
	int deliveries;
	int was_early;	     /* held once already (counted once) */
	int64_t lease_until; /* wall ms */
	char *key;	     /* NULL: none */
	size_t keylen;
	char *value;
	size_t vlen;
	rd_kafka_headers_t *hdrs;      /* the message's, a copy; NULL none */
	struct timerwheel_timer timer; /* lease, or the due time */
	TAILQ_ENTRY(pmsg) rlink;       /* ready queue */
	struct pmsg *pnext;	       /* partition order */
	char receipt[32];	       /* "<partition>:<offset>" */
};

struct ppart {
	int32_t partition;
	struct pmsg *head, *tail;
	int64_t committed; /* offset committed (next to read), -1 none */
	int64_t to_commit; /* after the last done message of the head run */
	int64_t next;	   /* after the last message received, -1 none */
	struct ppart *nextp;
};

struct pwait {
	struct pgroup *g;
	struct evhttp_request *req;
	size_t max;
	int64_t visibility_ms;
	int mykit;
	struct event *timer;
	TAILQ_ENTRY(pwait) link;
};

struct pgroup {
	struct pull *p;
	char *key; /* "<group> <topic>": no space in either */
	char *name, *topic, *ktopic;
	struct kafka_consumer *consumer;
	struct ppart *parts;
	struct hmap *receipts; /* receipt -> pmsg */
	TAILQ_HEAD(, pmsg) ready;
	TAILQ_HEAD(, pwait) waiters;
	size_t in_hand, in_hand_bytes, leased;
	int held; /* not polled (back-pressure) since held_ms */
	int64_t held_ms;
	int paused; /* fetching paused, polled (a hold that lasted) */
	int queued; /* in the serve list */
	int dirty;  /* offsets to commit */
	int64_t used_ms;
	size_t slot; /* of the per-group gauges */
	TAILQ_ENTRY(pgroup) link;
	TAILQ_ENTRY(pgroup) slink;
};

struct pull {
	struct manager *mg;
	struct hmap *by_key;
	TAILQ_HEAD(, pgroup) groups;
	TAILQ_HEAD(, pgroup) to_serve;
	size_t ngroups, nwaiting;
	size_t max_groups, max_waiting, max_batch, max_in_hand;
	int64_t max_in_hand_bytes, max_wait_ms, visibility_ms, idle_ms;
	struct timerwheel *tw; /* leases and due times, monotonic ms */
	int64_t wheel_at;      /* when wheel_ev fires, INT64_MAX: not armed */
	struct event *wheel_ev, *tick_ev, *serve_ev, *commit_ev;
	int stopping;
	char **labels; /* per group slot: its label set, NULL free */
	struct metric *m_groups, *m_waiting, *m_in_hand, *m_leased, *m_lag;
	struct metric *m_group_lag, *m_consumed, *m_handed, *m_acked;
	struct metric *m_redelivered, *m_early, *m_refused, *m_gone;
};

static void serve_queue(struct pgroup *g);

/* ------------------------------------------------------------ timers --- */

static void
wheel_schedule(struct pull *p, int64_t at)
{
	int64_t d = at - clock_mono_ms();
	struct timeval tv;

	if (d < 1)
		d = 1;
	tv.tv_sec = d / 1000;
	tv.tv_usec = (d % 1000) * 1000;
	evtimer_add(p->wheel_ev, &tv);
	p->wheel_at = at;
}

static void
wheel_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pull *p = arg;
	int64_t next;

	p->wheel_at = INT64_MAX;
	timerwheel_advance(p->tw, clock_mono_ms());
	next = timerwheel_next_timeout(p->tw);
	if (next >= 0)
		wheel_schedule(p,
			       timerwheel_now(p->tw) + (next > 0 ? next : 1));
}

static void
timer_at(struct pull *p, struct timerwheel_timer *t, int64_t at_mono)
{
	timerwheel_add(p->tw, t, at_mono);
	if (at_mono < p->wheel_at)
		wheel_schedule(p, at_mono);
}

/* ---------------------------------------------------------- messages --- */

static void
msg_free(struct pgroup *g, struct pmsg *m)
{
	timerwheel_cancel(g->p->tw, &m->timer);
	if (m->state == PM_READY)
		TAILQ_REMOVE(&g->ready, m, rlink);
	else if (m->state == PM_LEASED)
		g->leased--;
	hmap_del(g->receipts, m->receipt);
	g->in_hand--;
	g->in_hand_bytes -= m->vlen;
	xfree(m->key);
	xfree(m->value);
	if (m->hdrs != NULL)
		rd_kafka_headers_destroy(m->hdrs);
	xfree(m);
}

static void
make_ready(struct pgroup *g, struct pmsg *m, int front)
{
	m->state = PM_READY;
	if (front)
		TAILQ_INSERT_HEAD(&g->ready, m, rlink);
	else
		TAILQ_INSERT_TAIL(&g->ready, m, rlink);
	serve_queue(g);
}

/* A lease ran out, or a held message became due. */
static void
msg_timer_cb(struct timerwheel_timer *t, void *arg)
{
	struct pmsg *m = arg;
	struct pgroup *g = m->g;

	if (m->state == PM_LEASED) {
		g->leased--;
		metric_inc(g->p->m_redelivered);
		make_ready(g, m, 1);
	} else if (m->state == PM_EARLY) {
		make_ready(g, m, 0);
	}
}

/* Holds m until its due time by our clock; 0 if it is due already. */
static int
hold_until_due(struct pgroup *g, struct pmsg *m)
{
	int64_t early = m->due_at - clock_now_ms();

	if (m->due_at <= 0 || early <= 0)
		return 0;
	m->state = PM_EARLY;
	/* The hold ends by the monotonic clock, the check is by the wall
	 * clock: their milliseconds tick at different instants, so the
	 * hand-out can find the message 1 ms early and hold it again. One
	 * message counts once. */
	if (!m->was_early)
		metric_inc(g->p->m_early);
	m->was_early = 1;
	timer_at(g->p, &m->timer, clock_mono_ms() + early);
	return 1;
}

/*
 * Back-pressure at pull.max_in_hand(_bytes): first the consumer is held
 * (not polled), so what librdkafka prefetched waits in its queue and is
 * there at once when clients catch up; a pause (fetching stopped, polling
 * on) would drop that prefetch and take some 300 ms to fetch again, which
 * held draining clients to a fifth of their rate. A hold that lasts
 * PULL_HOLD_MS becomes a pause (tick_cb): a member that does not poll
 * holds up its group's rebalances.
 */
static void
maybe_pause(struct pgroup *g)
{
	struct pull *p = g->p;
	int over = g->in_hand >= p->max_in_hand ||
		   (int64_t)g->in_hand_bytes >= p->max_in_hand_bytes;
	int under = g->in_hand < p->max_in_hand / 2 &&
		    (int64_t)g->in_hand_bytes < p->max_in_hand_bytes / 2;

	if (over && !g->held && !g->paused) {
		g->held = 1;
		g->held_ms = clock_mono_ms();
		kafka_consumer_hold(g->consumer, 1);
	} else if (under && (g->held || g->paused)) {
		if (g->paused)
			kafka_consumer_pause(g->consumer, 0);
		if (g->held)
			kafka_consumer_hold(g->consumer, 0);
		g->held = g->paused = 0;
	}
}

/* A hold that lasted: pause instead, and poll again. */
static void
hold_to_pause(struct pgroup *g, int64_t now)
{
	if (!g->held || now - g->held_ms < PULL_HOLD_MS)
		return;
	log_info("pull group full: fetching paused until its clients "
		 "acknowledge",
		 "group=%s topic=%s in_hand=%zu", g->name, g->topic,
		 g->in_hand);
	kafka_consumer_pause(g->consumer, 1);
	g->paused = 1;
	g->held = 0;
	kafka_consumer_hold(g->consumer, 0);
}

static void
commit_soon(struct pgroup *g)
{
	struct timeval tv = {0, PULL_COMMIT_MS * 1000};

	g->dirty = 1;
	if (!evtimer_pending(g->p->commit_ev, NULL))
		evtimer_add(g->p->commit_ev, &tv);
}

static void
group_commit(struct pgroup *g)
{
	for (struct ppart *pp = g->parts; pp != NULL; pp = pp->nextp)
		if (pp->to_commit > pp->committed) {
			kafka_consumer_commit(g->consumer, g->ktopic,
					      pp->partition, pp->to_commit);
			pp->committed = pp->to_commit;
		}
	g->dirty = 0;
}

static void
commit_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pull *p = arg;
	struct pgroup *g;

	TAILQ_FOREACH (g, &p->groups, link)
		if (g->dirty)
			group_commit(g);
}

/* Frees the partition's done messages up to its first one not done; their
 * offsets are committed shortly. */
static void
part_advance(struct pgroup *g, struct ppart *pp)
{
	struct pmsg *m;

	while ((m = pp->head) != NULL && m->state == PM_DONE) {
		pp->to_commit = m->offset + 1;
		pp->head = m->pnext;
		if (pp->head == NULL)
			pp->tail = NULL;
		msg_free(g, m);
	}
	if (pp->to_commit > pp->committed)
		commit_soon(g);
	maybe_pause(g);
}

/* Acknowledged (or, for mykit's /get, handed out). */
static void
msg_done(struct pgroup *g, struct pmsg *m)
{
	timerwheel_cancel(g->p->tw, &m->timer);
	if (m->state == PM_READY)
		TAILQ_REMOVE(&g->ready, m, rlink);
	else if (m->state == PM_LEASED)
		g->leased--;
	m->state = PM_DONE;
	/* The body is not needed any more: only the offset waits. */
	g->in_hand_bytes -= m->vlen;
	m->vlen = 0;
	xfree(m->value);
	m->value = NULL;
	metric_inc(g->p->m_acked);
	part_advance(g, m->part);
}

static struct ppart *
part_find(struct pgroup *g, int32_t partition, int create)
{
	struct ppart *pp;

	for (pp = g->parts; pp != NULL; pp = pp->nextp)
		if (pp->partition == partition)
			return pp;
	if (!create)
		return NULL;
	pp = xcalloc(1, sizeof(*pp));
	pp->partition = partition;
	pp->committed = -1;
	pp->to_commit = -1;
	pp->next = -1;
	pp->nextp = g->parts;
	g->parts = pp;
	return pp;
}

/* Forgets a partition and what is held of it (revoked, or the group
 * closes). */
static void
part_drop(struct pgroup *g, struct ppart *pp)
{
	struct ppart **pl = &g->parts;
	struct pmsg *m, *n;

	for (m = pp->head; m != NULL; m = n) {
		n = m->pnext;
		msg_free(g, m);
	}
	while (*pl != pp)
		pl = &(*pl)->nextp;
	*pl = pp->nextp;
	xfree(pp);
}

static int64_t
digits(const char *s, size_t n)
{
	int64_t v = 0;

	if (s == NULL || n == 0 || n > 15)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* A copy of the message's headers (NULL if none), and its
 * prophet-due-at (0 if none). */
static rd_kafka_headers_t *
headers_of(const rd_kafka_message_t *km, int64_t *due)
{
	rd_kafka_headers_t *h = NULL;
	const void *v;
	size_t len;

	*due = 0;
	if (rd_kafka_message_headers(km, &h) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return NULL;
	if (rd_kafka_header_get_last(h, "prophet-due-at", &v, &len) ==
		    RD_KAFKA_RESP_ERR_NO_ERROR &&
	    (*due = digits(v, v ? len : 0)) < 0)
		*due = 0;
	return rd_kafka_headers_copy(h);
}

static void
message_cb(const rd_kafka_message_t *km, void *arg)
{
	struct pgroup *g = arg;
	struct ppart *pp = part_find(g, km->partition, 1);
	struct pmsg *m;

	metric_inc(g->p->m_consumed);
	if (km->offset < pp->next)
		return; /* seen (a fetch repeated after a pause) */
	m = xcalloc(1, sizeof(*m));
	m->g = g;
	m->part = pp;
	m->offset = km->offset;
	snprintf(m->receipt, sizeof(m->receipt), "%d:%lld", (int)km->partition,
		 (long long)km->offset);
	if (km->key != NULL) {
		m->key = xmemdup(km->key, km->key_len);
		m->keylen = km->key_len;
	}
	m->value = km->payload ? xmemdup(km->payload, km->len) : xstrdup("");
	m->vlen = km->payload ? km->len : 0;
	m->hdrs = headers_of(km, &m->due_at);
	m->timer.fire_cb = msg_timer_cb;
	m->timer.arg = m;
	pp->next = km->offset + 1;
	if (pp->tail != NULL)
		pp->tail->pnext = m;
	else
		pp->head = m;
	pp->tail = m;
	hmap_put(g->receipts, m->receipt, m);
	g->in_hand++;
	g->in_hand_bytes += m->vlen;
	maybe_pause(g);
	if (!hold_until_due(g, m))
		make_ready(g, m, 0);
}

/* Assignments change with the group's members (other managers). What was
 * held of a revoked partition is dropped: its new owner reads it again
 * from the committed offset. */
static void
rebalance_cb(const rd_kafka_topic_partition_list_t *l, int assigned, void *arg)
{
	struct pgroup *g = arg;

	for (int i = 0; i < l->cnt; i++) {
		struct ppart *pp;

		if (strcmp(l->elems[i].topic, g->ktopic) != 0)
			continue;
		pp = part_find(g, l->elems[i].partition, 0);
		if (assigned || pp == NULL)
			continue;
		if (pp->to_commit > pp->committed) {
			kafka_consumer_commit(g->consumer, g->ktopic,
					      pp->partition, pp->to_commit);
			pp->committed = pp->to_commit;
		}
		part_drop(g, pp);
	}
	log_info(assigned ? "pull group assigned partitions"
			  : "pull group revoked partitions",
		 "group=%s topic=%s partitions=%d", g->name, g->topic, l->cnt);
	maybe_pause(g);
}

/* ----------------------------------------------------------- answers --- */

/* A header's value (the last of its name), or NULL; *lenp its length. */
static const char *
header_get(const struct pmsg *m, const char *name, size_t *lenp)
{
	const void *v;

	if (m->hdrs == NULL ||
	    rd_kafka_header_get_last(m->hdrs, name, &v, lenp) !=
		    RD_KAFKA_RESP_ERR_NO_ERROR ||
	    v == NULL)
		return NULL;
	return v;
}

/*
 * s[0..n) as a JSON string: what is not valid UTF-8 becomes U+FFFD,
 * U+0000 and the other controls are escaped. Answers are written with this
 * rather than built with jansson: building, copying and dumping a JSON
 * object per task took most of the manager's time when clients drained a
 * backlog.
 */
static void
put_str(struct evbuffer *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0, i = 0;

	evbuffer_add(b, "\"", 1);
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		size_t k;

		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			i++;
			run++;
			continue;
		}
		evbuffer_add(b, s + i - run, run);
		run = 0;
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};

			evbuffer_add(b, e, 2);
			i++;
		} else if (c < 0x20) {
			char e[6] = {'\\', 'u',		'0',
				     '0',  hex[c >> 4], hex[c & 15]};

			evbuffer_add(b, e, 6);
			i++;
		} else if ((k = utf8_char_len(s + i, n - i)) > 0) {
			evbuffer_add(b, s + i, k);
			i += k;
		} else {
			evbuffer_add(b, UTF8_REPLACEMENT,
				     sizeof(UTF8_REPLACEMENT) - 1);
			i++;
		}
	}
	evbuffer_add(b, s + i - run, run);
	evbuffer_add(b, "\"", 1);
}

static void
put_str_or_null(struct evbuffer *b, const char *s, size_t n)
{
	if (s == NULL)
		evbuffer_add(b, "null", 4);
	else
		put_str(b, s, n);
}

/* The headers as an object of strings; of a name repeated, the last. */
static void
put_headers(struct evbuffer *b, const rd_kafka_headers_t *h)
{
	const char *name, *later;
	const void *v, *lv;
	size_t len, llen;
	int first = 1;

	evbuffer_add(b, "{", 1);
	for (size_t i = 0;
	     h != NULL && rd_kafka_header_get_all(h, i, &name, &v, &len) ==
				  RD_KAFKA_RESP_ERR_NO_ERROR;
	     i++) {
		size_t j = i + 1;

		while (rd_kafka_header_get_all(h, j, &later, &lv, &llen) ==
			       RD_KAFKA_RESP_ERR_NO_ERROR &&
		       strcmp(later, name) != 0)
			j++;
		if (rd_kafka_header_get_all(h, j, &later, &lv, &llen) ==
		    RD_KAFKA_RESP_ERR_NO_ERROR)
			continue; /* a later one of this name */
		if (!first)
			evbuffer_add(b, ",", 1);
		first = 0;
		put_str(b, name, strlen(name));
		evbuffer_add(b, ":", 1);
		put_str(b, v, v ? len : 0);
	}
	evbuffer_add(b, "}", 1);
}

/* One task of a native answer. */
static void
put_task(struct evbuffer *b, const struct pgroup *g, const struct pmsg *m)
{
	size_t idlen;
	const char *id = header_get(m, "prophet-id", &idlen);

	evbuffer_add_printf(b, "{\"receipt\":\"%s\",\"id\":", m->receipt);
	put_str_or_null(b, id, idlen);
	evbuffer_add(b, ",\"topic\":", 9);
	put_str(b, g->topic, strlen(g->topic));
	evbuffer_add(b, ",\"key\":", 7);
	put_str_or_null(b, m->key, m->keylen);
	evbuffer_add(b, ",\"body\":", 8);
	put_str(b, m->value, m->vlen);
	if (m->due_at > 0)
		evbuffer_add_printf(b, ",\"due_at\":%lld",
				    (long long)m->due_at);
	else
		evbuffer_add(b, ",\"due_at\":null", 14);
	evbuffer_add(b, ",\"headers\":", 11);
	put_headers(b, m->hdrs);
	evbuffer_add_printf(b, ",\"deliveries\":%d,\"lease_expires_at\":%lld}",
			    m->deliveries, (long long)m->lease_until);
}

/* A header of the message for mykit's job, as a JSON string (NULL). */
static json_t *
header_json(const struct pmsg *m, const char *name)
{
	size_t len;
	const char *v = header_get(m, name, &len);

	return v != NULL ? utf8_json(v, len) : NULL;
}

/*
 * The job as mykit-delay's JobMsg serialises (fastjson: members in name
 * order, absent strings left out). Prophet keeps no submission time on
 * the message: createTime is the due time and delay 0, so createTime +
 * delay is the due time as in mykit-delay.
 */
static json_t *
mykit_job(const struct pgroup *g, const struct pmsg *m)
{
	json_t *o = json_object();
	json_t *biz = header_json(m, "mykit-bizkey");
	json_t *sub = header_json(m, "mykit-subtopic");
	json_t *id = header_json(m, "prophet-id");

	if (biz != NULL)
		json_object_set_new(o, "bizKey", biz);
	json_object_set_new(o, "body", utf8_json(m->value, m->vlen));
	json_object_set_new(o, "createTime", json_integer(m->due_at));
	json_object_set_new(o, "delay", json_integer(0));
	if (id != NULL)
		json_object_set_new(o, "id", id);
	json_object_set_new(o, "status", json_integer(MYKIT_STATUS_READY));
	if (sub != NULL)
		json_object_set_new(o, "subtopic", sub);
	json_object_set_new(o, "topic", json_string(g->topic));
	json_object_set_new(o, "ttl", json_integer(0));
	return o;
}

static void
reply_empty(struct evhttp_request *req, int mykit)
{
	http_reply_json(req, 200,
			mykit ? json_pack("{s:n}", "job")
			      : json_pack("{s:[]}", "tasks"));
}

/*
 * Whether the client of a request in service is still there: evhttp does
 * not read its connection meanwhile, so its closing is seen only here, by
 * the TCP state (CLOSE_WAIT once the client's FIN came; a peek at the bytes
 * would take a TLS close_notify for data). A client that shut down only
 * its sending side counts as gone.
 */
static int
client_there(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	evutil_socket_t fd;

	if (evcon == NULL)
		return 0;
	bev = evhttp_connection_get_bufferevent(evcon);
	fd = bev != NULL ? bufferevent_getfd(bev) : -1;
	if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return 1; /* cannot tell */
	return ti.tcpi_state == TCP_ESTABLISHED;
}

/*
 * An answer of tasks is often larger than the 16 KiB a bufferevent writes
 * at a time: with Nagle's algorithm on, every write after the first waited
 * for the client's delayed ACK (40 ms on Linux), which held one client to
 * about 2,000 tasks/s. The connections are evhttp's; TCP_NODELAY on them is
 * harmless.
 */
static void
no_delay(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev =
		evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
	int one = 1;

	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Hands up to max ready messages to req (mykit: one, acknowledged at
 * once) and answers; an empty answer if none is ready. */
static void
answer(struct pgroup *g, struct evhttp_request *req, size_t max,
       int64_t visibility_ms, int mykit)
{
	struct pull *p = g->p;
	struct evbuffer *b;
	json_t *job = NULL;
	size_t n = 0, bytes = 0;
	struct pmsg *m;

	if (!client_there(req)) {
		metric_inc(p->m_gone);
		reply_empty(req, mykit);
		return;
	}
	b = evbuffer_new();
	evbuffer_add(b, "{\"tasks\":[", 10);
	while (n < max && job == NULL && (m = TAILQ_FIRST(&g->ready)) != NULL) {
		if (n > 0 && bytes + m->vlen > PULL_ANSWER_BYTES)
			break;
		TAILQ_REMOVE(&g->ready, m, rlink);
		m->state = PM_EARLY; /* out of the queue, not handed out */
		/* The workers publish at the due time; our clock decides. */
		if (hold_until_due(g, m))
			continue;
		m->deliveries++;
		m->state = PM_LEASED;
		g->leased++;
		metric_inc(p->m_handed);
		if (mykit) {
			job = mykit_job(g, m);
			msg_done(g, m);
			break;
		}
		m->lease_until = clock_now_ms() + visibility_ms;
		timer_at(p, &m->timer, clock_mono_ms() + visibility_ms);
		if (n++ > 0)
			evbuffer_add(b, ",", 1);
		put_task(b, g, m);
		bytes += m->vlen;
	}
	if (n > 0 || job != NULL)
		no_delay(req);
	if (mykit) {
		evbuffer_free(b);
		http_reply_json(
			req, 200,
			json_pack("{s:o}", "job", job ? job : json_null()));
		return;
	}
	evbuffer_add(b, "]}\n", 3);
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", "application/json");
	http_send(req, 200, b);
	evbuffer_free(b);
}

/* ----------------------------------------------------------- waiting --- */

static void
waiter_free(struct pwait *w)
{
	TAILQ_REMOVE(&w->g->waiters, w, link);
	w->g->p->nwaiting--;
	event_free(w->timer);
	xfree(w);
}

static void
waiter_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pwait *w = arg;

	reply_empty(w->req, w->mykit);
	waiter_free(w);
}

/* Waiters take what is ready, first come first served. */
static void
serve(struct pgroup *g)
{
	struct pwait *w;

	while ((w = TAILQ_FIRST(&g->waiters)) != NULL &&
	       !TAILQ_EMPTY(&g->ready)) {
		struct evhttp_request *req = w->req;
		size_t max = w->max;
		int64_t vis = w->visibility_ms;
		int mykit = w->mykit;

		waiter_free(w);
		answer(g, req, max, vis, mykit);
	}
}

static void
serve_queue(struct pgroup *g)
{
	if (g->queued || TAILQ_EMPTY(&g->waiters))
		return;
	g->queued = 1;
	TAILQ_INSERT_TAIL(&g->p->to_serve, g, slink);
	event_active(g->p->serve_ev, EV_TIMEOUT, 0);
}

/* After a consumer's batch (or a timer): what arrived goes out in as few
 * answers as the waiters allow. */
static void
serve_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pull *p = arg;
	struct pgroup *g;

	while ((g = TAILQ_FIRST(&p->to_serve)) != NULL) {
		TAILQ_REMOVE(&p->to_serve, g, slink);
		g->queued = 0;
		serve(g);
	}
}

/* ------------------------------------------------------------ groups --- */

static void
group_destroy(struct pgroup *g)
{
	struct pull *p = g->p;
	struct pwait *w;

	while ((w = TAILQ_FIRST(&g->waiters)) != NULL) {
		reply_empty(w->req, w->mykit);
		waiter_free(w);
	}
	if (g->queued)
		TAILQ_REMOVE(&p->to_serve, g, slink);
	TAILQ_REMOVE(&p->groups, g, link);
	hmap_del(p->by_key, g->key);
	p->ngroups--;
	group_commit(g);
	/* Leaves the Kafka group (its commits first) on a thread of its own,
	 * which can take KAFKA_CLOSE_MS with Kafka down: the partitions move
	 * to the group's other members. */
	kafka_consumer_destroy_async(g->consumer);
	while (g->parts != NULL)
		part_drop(g, g->parts);
	hmap_destroy(g->receipts);
	xfree(p->labels[g->slot]);
	p->labels[g->slot] = NULL;
	xfree(g->key);
	xfree(g->name);
	xfree(g->topic);
	xfree(g->ktopic);
	xfree(g);
}

/* The group name on the topic, made on first use; NULL (answered 429 or
 * 503) if there cannot be another. */
static struct pgroup *
group_get(struct pull *p, struct evhttp_request *req, const char *name,
	  const char *topic)
{
	static const char *const props[] = {
		/* Prefetch (librdkafka's default 64 MiB) per group; what
		 * is held is bounded by pull.max_in_hand*. */
		"queued.max.messages.kbytes", "8192",
		/* A topic nothing was published to yet is found within
		 * 10 s once it is there. */
		"topic.metadata.refresh.interval.ms", "10000",
		/* Workers with kafka.exactly_once write in transactions:
		 * an aborted (fenced) one's records are never handed out. */
		"isolation.level", "read_committed", NULL};
	struct kafka_consumer_opts opts = {props, rebalance_cb, NULL, NULL};
	struct pgroup *g;
	char *key = xasprintf("%s %s", name, topic), *gid;
	char err[512];
	size_t slot;

	if ((g = hmap_get(p->by_key, key)) != NULL) {
		xfree(key);
		return g;
	}
	if (p->ngroups >= p->max_groups) {
		xfree(key);
		metric_inc(p->m_refused);
		http_reply_error(req, 429, "too_many_groups", "group",
				 "this manager serves %zu pull groups "
				 "(pull.max_groups); an idle one closes "
				 "after %lld s",
				 p->max_groups, (long long)(p->idle_ms / 1000));
		return NULL;
	}
	g = xcalloc(1, sizeof(*g));
	g->p = p;
	g->key = key;
	g->name = xstrdup(name);
	g->topic = xstrdup(topic);
	g->ktopic = xasprintf(
		"%s%s", cfg_str(p->mg->cfg, CFG_KAFKA_TOPIC_PREFIX), topic);
	g->receipts = hmap_create();
	TAILQ_INIT(&g->ready);
	TAILQ_INIT(&g->waiters);
	gid = xasprintf("%s%s:%s", cfg_str(p->mg->cfg, CFG_PULL_GROUP_PREFIX),
			name, g->ktopic);
	g->consumer = kafka_consumer_create_opts(p->mg->base, p->mg->cfg, gid,
						 g->ktopic, message_cb, g,
						 &opts, err, sizeof(err));
	if (g->consumer == NULL) {
		log_error("pull group: no Kafka consumer",
			  "group=%s error=\"%s\"", gid, err);
		http_reply_error(req, 503, "unavailable", NULL,
				 "cannot create a Kafka consumer: %s", err);
		xfree(gid);
		hmap_destroy(g->receipts);
		xfree(g->ktopic);
		xfree(g->topic);
		xfree(g->name);
		xfree(g->key);
		xfree(g);
		return NULL;
	}
	for (slot = 0; p->labels[slot] != NULL; slot++)
		;
	g->slot = slot;
	p->labels[slot] = xasprintf("group=\"%s\",topic=\"%s\"", name, topic);
	metric_vec_set(p->m_group_lag, slot, 0);
	hmap_put(p->by_key, g->key, g);
	TAILQ_INSERT_TAIL(&p->groups, g, link);
	p->ngroups++;
	log_info("pull group opened", "group=%s topic=%s kafka_group=%s", name,
		 topic, gid);
	xfree(gid);
	return g;
}

/* Messages of the group not yet committed, as far as the high watermarks
 * fetched tell (partitions nothing was read from yet do not count). */
static int64_t
group_lag(struct pgroup *g)
{
	int64_t lag = 0;

	for (struct ppart *pp = g->parts; pp != NULL; pp = pp->nextp) {
		int64_t hi = kafka_consumer_high_watermark(
			g->consumer, g->ktopic, pp->partition);
		int64_t from = pp->head != NULL ? pp->head->offset : pp->next;

		if (hi >= 0 && from >= 0 && hi > from)
			lag += hi - from;
	}
	return lag;
}

/* Every second: gone clients, idle groups, the gauges, and a poll of
 * every consumer (a member that does not poll leaves its group after
 * max.poll.interval.ms, and a consumer queue only wakes the loop when
 * messages arrive). */
static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pull *p = arg;
	struct pgroup *g, *gn;
	struct pwait *w, *wn;
	int64_t now = clock_mono_ms();
	size_t in_hand = 0, leased = 0;
	int64_t lag = 0, glag;

	for (g = TAILQ_FIRST(&p->groups); g != NULL; g = gn) {
		gn = TAILQ_NEXT(g, link);
		for (w = TAILQ_FIRST(&g->waiters); w != NULL; w = wn) {
			wn = TAILQ_NEXT(w, link);
			if (!client_there(w->req)) {
				metric_inc(p->m_gone);
				reply_empty(w->req, w->mykit);
				waiter_free(w);
			}
		}
		if (TAILQ_EMPTY(&g->waiters) && now - g->used_ms > p->idle_ms) {
			log_info("pull group idle: closing",
				 "group=%s topic=%s", g->name, g->topic);
			group_destroy(g);
			continue;
		}
		hold_to_pause(g, now);
		kafka_consumer_poll(g->consumer, 1000);
		in_hand += g->in_hand;
		leased += g->leased;
		glag = group_lag(g);
		metric_vec_set(p->m_group_lag, g->slot, (double)glag);
		lag += glag;
	}
	metric_set(p->m_groups, (double)p->ngroups);
	metric_set(p->m_waiting, (double)p->nwaiting);
	metric_set(p->m_in_hand, (double)in_hand);
	metric_set(p->m_leased, (double)leased);
	metric_set(p->m_lag, (double)lag);
}

/* ---------------------------------------------------------- requests --- */

/* The path's topic: valid, allowed (http.topics_allowed, as submissions)
 * and a Kafka topic name with the prefix; else answered 400. */
static int
topic_ok(struct pull *p, struct evhttp_request *req, const char *t, size_t n)
{
	size_t klen = strlen(cfg_str(p->mg->cfg, CFG_KAFKA_TOPIC_PREFIX)) + n;

	if (t == NULL || strlen(t) != n || !task_topic_valid(t, n)) {
		http_reply_error(req, 400, "invalid_value", "topic",
				 "topic must be 1-200 characters of "
				 "[A-Za-z0-9._-]");
		return 0;
	}
	if (!api_topic_allowed(p->mg, t)) {
		http_reply_error(req, 400, "invalid_value", "topic",
				 "topic '%s' is not in http.topics_allowed", t);
		return 0;
	}
	if (klen > KAFKA_TOPIC_NAME_MAX) {
		http_reply_error(req, 400, "invalid_value", "topic",
				 "kafka.topic_prefix + topic is %zu "
				 "characters; Kafka allows %d",
				 klen, KAFKA_TOPIC_NAME_MAX);
		return 0;
	}
	return 1;
}

static int
group_name_ok(struct evhttp_request *req, const char *s, size_t n)
{
	if (s != NULL && strlen(s) == n && task_topic_valid(s, n))
		return 1;
	http_reply_error(req, 400, "invalid_value", "group",
			 "group must be 1-200 characters of [A-Za-z0-9._-]");
	return 0;
}

/* A non-negative integer query parameter: 0 absent (*v untouched), 1
 * read, -1 invalid (answered 400). */
static int
query_int(struct evhttp_request *req, const char *name, int64_t *v)
{
	size_t len;
	char *s = http_query_get(req, name, &len);
	int64_t x = digits(s, len);

	if (s == NULL)
		return 0;
	free(s);
	if (x < 0) {
		http_reply_error(req, 400, "invalid_value", name,
				 "%s must be a non-negative integer", name);
		return -1;
	}
	*v = x;
	return 1;
}

/*
 * A request for the next tasks of (group, topic): answered at once when
 * something is ready or wait_ms is 0, else it waits. HEAD answers as GET
 * would with nothing ready, and takes nothing.
 */
static void
take(struct pull *p, struct evhttp_request *req, const char *name,
     const char *topic, size_t max, int64_t wait_ms, int64_t visibility_ms,
     int mykit)
{
	struct timeval tv;
	struct pgroup *g;
	struct pwait *w;

	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
		reply_empty(req, mykit);
		return;
	}
	if ((g = group_get(p, req, name, topic)) == NULL)
		return;
	g->used_ms = clock_mono_ms();
	if (!TAILQ_EMPTY(&g->ready) || wait_ms == 0) {
		answer(g, req, max, visibility_ms, mykit);
		return;
	}
	if (p->nwaiting >= p->max_waiting) {
		metric_inc(p->m_refused);
		http_reply_error(req, 429, "too_many_waiting", NULL,
				 "%zu pull requests are waiting already "
				 "(pull.max_waiting); try again",
				 p->nwaiting);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	w->g = g;
	w->req = req;
	w->max = max;
	w->visibility_ms = visibility_ms;
	w->mykit = mykit;
	w->timer = evtimer_new(p->mg->base, waiter_timeout_cb, w);
	tv.tv_sec = wait_ms / 1000;
	tv.tv_usec = (wait_ms % 1000) * 1000;
	evtimer_add(w->timer, &tv);
	TAILQ_INSERT_TAIL(&g->waiters, w, link);
	p->nwaiting++;
}

static int
refuse_stopping(struct pull *p, struct evhttp_request *req)
{
	if (!p->stopping)
		return 0;
	http_reply_error(req, 503, "unavailable", NULL,
			 "server is shutting down");
	return 1;
}

static const char *const next_params[] = {"group", "max", "wait_ms",
					  "visibility_ms", NULL};

void
pull_next(struct manager *mg, struct evhttp_request *req, const char *topic,
	  size_t tlen)
{
	struct pull *p = mg->pull;
	int64_t max = 1, wait_ms = 0, vis = p->visibility_ms;
	size_t glen;
	char *group;

	if (!topic_ok(p, req, topic, tlen) ||
	    http_query_known(req, next_params) < 0)
		return;
	group = http_query_get(req, "group", &glen);
	if (group == NULL) {
		http_reply_error(req, 400, "missing_field", "group",
				 "group is required");
		return;
	}
	if (!group_name_ok(req, group, glen) ||
	    query_int(req, "max", &max) < 0 ||
	    query_int(req, "wait_ms", &wait_ms) < 0 ||
	    query_int(req, "visibility_ms", &vis) < 0)
		goto out;
	if (max < 1) {
		http_reply_error(req, 400, "invalid_value", "max",
				 "max must be at least 1");
		goto out;
	}
	if (vis < PULL_VISIBILITY_MIN || vis > PULL_VISIBILITY_MAX) {
		http_reply_error(req, 400, "invalid_value", "visibility_ms",
				 "visibility_ms must be %d to %d",
				 PULL_VISIBILITY_MIN, PULL_VISIBILITY_MAX);
		goto out;
	}
	if (refuse_stopping(p, req))
		goto out;
	take(p, req, group, topic,
	     (size_t)max < p->max_batch ? (size_t)max : p->max_batch,
	     wait_ms < p->max_wait_ms ? wait_ms : p->max_wait_ms, vis, 0);
out:
	free(group);
}

void
pull_mykit_get(struct manager *mg, struct evhttp_request *req,
	       const char *topic, size_t tlen)
{
	struct pull *p = mg->pull;

	if (!topic_ok(p, req, topic, tlen) || refuse_stopping(p, req))
		return;
	take(p, req, cfg_str(mg->cfg, CFG_PULL_MYKIT_GROUP), topic, 1,
	     p->max_wait_ms, p->visibility_ms, 1);
}

/* One receipt of an acknowledgement: 1 done now, 0 not held here (done
 * before, never handed out, or its partition moved to another member). */
static int
ack_one(struct pgroup *g, const char *receipt)
{
	struct pmsg *m = g ? hmap_get(g->receipts, receipt) : NULL;

	if (m == NULL || m->deliveries == 0 || m->state == PM_DONE ||
	    m->state == PM_EARLY)
		return 0;
	msg_done(g, m);
	return 1;
}

void
pull_ack(struct manager *mg, struct evhttp_request *req, const char *topic,
	 size_t tlen)
{
	struct pull *p = mg->pull;
	json_t *in, *group, *receipts, *r, *unknown;
	const char *key;
	struct pgroup *g;
	size_t i, acked = 0;
	char *gkey;

	if (!topic_ok(p, req, topic, tlen) ||
	    (in = api_body_json(mg, req)) == NULL)
		return;
	group = json_object_get(in, "group");
	receipts = json_object_get(in, "receipts");
	if (!json_is_object(in)) {
		http_reply_error(req, 400, "invalid_type", NULL,
				 "expected {\"group\":...,\"receipts\":[...]}");
		goto out;
	}
	json_object_foreach (in, key, r)
		if (strcmp(key, "group") && strcmp(key, "receipts")) {
			char name[64];

			utf8_copy(name, sizeof(name), key, strlen(key));
			http_reply_error(req, 400, "unknown_field", name,
					 "unknown member '%s'", name);
			goto out;
		}
	if (!json_is_string(group)) {
		http_reply_error(req, 400,
				 group ? "invalid_type" : "missing_field",
				 "group", "group must be a string");
		goto out;
	}
	if (!group_name_ok(req, json_string_value(group),
			   json_string_length(group)))
		goto out;
	if (!json_is_array(receipts) ||
	    json_array_size(receipts) > PULL_MAX_RECEIPTS) {
		http_reply_error(req, 400,
				 receipts ? "invalid_value" : "missing_field",
				 "receipts",
				 "receipts must be an array of at most %d "
				 "receipt strings",
				 PULL_MAX_RECEIPTS);
		goto out;
	}
	json_array_foreach (receipts, i, r)
		if (!json_is_string(r)) {
			http_reply_error(req, 400, "invalid_type", "receipts",
					 "receipts[%zu] is not a string", i);
			goto out;
		}
	gkey = xasprintf("%s %s", json_string_value(group), topic);
	g = hmap_get(p->by_key, gkey);
	xfree(gkey);
	if (g != NULL)
		g->used_ms = clock_mono_ms();
	unknown = json_array();
	json_array_foreach (receipts, i, r) {
		if (ack_one(g, json_string_value(r)))
			acked++;
		else
			json_array_append_new(unknown,
					      utf8_json(json_string_value(r),
							json_string_length(r)));
	}
	http_reply_json(req, 200,
			json_pack("{s:I, s:o}", "acked", (json_int_t)acked,
				  "unknown", unknown));
out:
	json_decref(in);
}

/* ------------------------------------------------------------- life --- */

struct pull *
pull_create(struct manager *mg)
{
	struct pull *p = xcalloc(1, sizeof(*p));
	const struct cfg *cfg = mg->cfg;
	long maxconn = http_server_max_connections(mg->http);
	struct timeval tick = {PULL_TICK_MS / 1000, 0};

	p->mg = mg;
	p->by_key = hmap_create();
	TAILQ_INIT(&p->groups);
	TAILQ_INIT(&p->to_serve);
	p->max_groups = (size_t)cfg_int(cfg, CFG_PULL_MAX_GROUPS);
	p->max_waiting = (size_t)cfg_int(cfg, CFG_PULL_MAX_WAITING);
	/* In service, a waiting request is never evicted at the connection
	 * limit: half of it always stays for everyone else. */
	if (p->max_waiting > (size_t)(maxconn / 2 > 0 ? maxconn / 2 : 1)) {
		p->max_waiting = (size_t)(maxconn / 2 > 0 ? maxconn / 2 : 1);
		log_info("pull: waiting requests capped at half of "
			 "http.max_connections",
			 "max_waiting=%zu", p->max_waiting);
	}
	p->max_batch = (size_t)cfg_int(cfg, CFG_PULL_MAX_BATCH);
	p->max_in_hand = (size_t)cfg_int(cfg, CFG_PULL_MAX_IN_HAND);
	p->max_in_hand_bytes = cfg_int(cfg, CFG_PULL_MAX_IN_HAND_BYTES);
	p->max_wait_ms = cfg_int(cfg, CFG_PULL_MAX_WAIT_MS);
	p->visibility_ms = cfg_int(cfg, CFG_PULL_VISIBILITY_MS);
	p->idle_ms = cfg_int(cfg, CFG_PULL_IDLE_GROUP_S) * 1000;
	p->tw = timerwheel_create(clock_mono_ms());
	p->wheel_at = INT64_MAX;
	p->wheel_ev = evtimer_new(mg->base, wheel_cb, p);
	p->serve_ev = event_new(mg->base, -1, 0, serve_cb, p);
	p->commit_ev = evtimer_new(mg->base, commit_cb, p);
	p->tick_ev = event_new(mg->base, -1, EV_PERSIST, tick_cb, p);
	event_add(p->tick_ev, &tick);
	p->labels = xcalloc(p->max_groups, sizeof(*p->labels));
	p->m_groups = metrics_register(METRIC_GAUGE, "prophet_pull_groups",
				       "pull groups open on this manager (a "
				       "Kafka consumer each)",
				       NULL, 0);
	p->m_waiting =
		metrics_register(METRIC_GAUGE, "prophet_pull_waiting_requests",
				 "pull requests waiting for a task", NULL, 0);
	p->m_in_hand = metrics_register(
		METRIC_GAUGE, "prophet_pull_in_hand_messages",
		"messages the pull groups hold (ready, handed out, or "
		"acknowledged and waiting for their offset's commit)",
		NULL, 0);
	p->m_leased = metrics_register(
		METRIC_GAUGE, "prophet_pull_leased_messages",
		"messages handed out and not acknowledged", NULL, 0);
	p->m_lag = metrics_register(METRIC_GAUGE, "prophet_pull_lag_messages",
				    "messages of the pull groups' partitions "
				    "not yet committed, all groups",
				    NULL, 0);
	p->m_group_lag = metrics_register(
		METRIC_GAUGE, "prophet_pull_group_lag_messages",
		"messages of a pull group's partitions on this manager not yet "
		"committed",
		"group", p->max_groups);
	metric_set_label_sets(p->m_group_lag, (const char *const *)p->labels);
	p->m_consumed = metrics_register(
		METRIC_COUNTER, "prophet_pull_consumed_total",
		"messages the pull groups read from Kafka", NULL, 0);
	p->m_handed = metrics_register(METRIC_COUNTER,
				       "prophet_pull_handed_out_total",
				       "tasks handed to pull clients (each "
				       "delivery, redeliveries included)",
				       NULL, 0);
	p->m_acked = metrics_register(
		METRIC_COUNTER, "prophet_pull_acked_total",
		"tasks acknowledged (mykit's /get: handed out)", NULL, 0);
	p->m_redelivered = metrics_register(
		METRIC_COUNTER, "prophet_pull_redelivered_total",
		"leases that ran out: the task is handed out again", NULL, 0);
	p->m_early = metrics_register(
		METRIC_COUNTER, "prophet_pull_held_until_due_total",
		"messages read before their prophet-due-at by this manager's "
		"clock and held until then",
		NULL, 0);
	p->m_refused =
		metrics_register(METRIC_COUNTER, "prophet_pull_refused_total",
				 "pull requests answered 429 (pull.max_groups, "
				 "pull.max_waiting)",
				 NULL, 0);
	p->m_gone = metrics_register(
		METRIC_COUNTER, "prophet_pull_clients_gone_total",
		"waiting pull requests whose client had closed its connection",
		NULL, 0);
	return p;
}

/* SIGTERM: waiting requests are answered (empty) now, new ones get 503. */
void
pull_stop(struct pull *p)
{
	struct pgroup *g;

	if (p == NULL)
		return;
	p->stopping = 1;
	TAILQ_FOREACH (g, &p->groups, link) {
		struct pwait *w;

		while ((w = TAILQ_FIRST(&g->waiters)) != NULL) {
			reply_empty(w->req, w->mykit);
			waiter_free(w);
		}
	}
}

void
pull_destroy(struct pull *p)
{
	struct pgroup *g;

	if (p == NULL)
		return;
	while ((g = TAILQ_FIRST(&p->groups)) != NULL)
		group_destroy(g);
	/* All of them at once: with Kafka down, 5 s in all, not a group. */
	kafka_consumer_wait_closed();
	hmap_destroy(p->by_key);
	timerwheel_destroy(p->tw);
	event_free(p->wheel_ev);
	event_free(p->serve_ev);
	event_free(p->commit_ev);
	event_free(p->tick_ev);
	metric_set_label_sets(p->m_group_lag, NULL);
	xfree(p->labels);
	xfree(p);
}
