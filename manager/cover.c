#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "cfg.h"
#include "cover.h"
#include "daemon.h"
#include "kafka.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "utf8.h"
#include "xmalloc.h"
#include "zk.h"

/*
 * Callback coverage (issue 22): every running notifier announces what it
 * consumes in <root>/notifiers/ (notifier/announce.c); this reads them
 * every COVER_POLL_S and, for each task with a callback submitted here,
 * says so when none of them consumes its topic: its callback would not be
 * made until one does. A counter, a warning at most every COVER_WARN_S,
 * and the last such task in GET /v1/cluster (the console shows it).
 * A notifier gone for less than COVER_GRACE_S still covers what it
 * consumed while no notifier of its Kafka group is there: a restart (an
 * upgrade's) is not an uncovered callback, since it reads on from its
 * group's offsets; once a member of the group is back, what the group
 * consumes is what its members say.
 */

#define COVER_POLL_S 2
#define COVER_WARN_S 60
#define COVER_GRACE_S 10

struct coverage {
	struct manager *mg;
	struct event *tick;
	struct cover **nodes; /* the last complete read */
	size_t n;
	/* notifiers no longer there, until their grace ends (mono ms) */
	struct cover **gone;
	int64_t *gone_until;
	size_t ngone;
	int known; /* one read completed */
	/* the read in flight */
	struct cover **next;
	size_t next_n, next_cap;
	int outstanding;
	int failed;
	/* what was said */
	struct log_every uncovered_log;
	long long uncovered;
	char last_topic[TASK_TOPIC_MAX + 1];
	char last_id[TASK_ID_MAX + 1];
	int64_t last_at;
};

static void
free_nodes(struct cover **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cover_free(v[i]);
	xfree(v);
}

static const char *
node_str(const struct cover *v, const char *key)
{
	const char *s = json_string_value(json_object_get(cover_json(v), key));

	return s != NULL ? s : "";
}

/* Whether a node of now has v's key ("id", "group"). */
static int
node_in(const struct cover *v, const char *key, struct cover **now, size_t n)
{
	for (size_t j = 0; j < n; j++)
		if (!strcmp(node_str(v, key), node_str(now[j], key)))
			return 1;
	return 0;
}

/* Nodes of the last read not in the new one start their grace; graces
 * that ended are dropped. The last read's nodes are the caller's to
 * free, except those kept here (set to NULL). */
static void
keep_gone(struct coverage *c, struct cover **old, size_t n, struct cover **now,
	  size_t nn)
{
	int64_t t = clock_mono_ms();
	size_t k = 0;

	for (size_t i = 0; i < c->ngone; i++) {
		if (c->gone_until[i] > t &&
		    !node_in(c->gone[i], "group", now, nn)) {
			c->gone[k] = c->gone[i];
			c->gone_until[k++] = c->gone_until[i];
		} else {
			cover_free(c->gone[i]);
		}
	}
	c->ngone = k;
	for (size_t i = 0; i < n; i++) {
		if (node_in(old[i], "id", now, nn) ||
		    node_in(old[i], "group", now, nn))
			continue;
		c->gone = xrealloc(c->gone, (c->ngone + 1) * sizeof(*c->gone));
		c->gone_until = xrealloc(
			c->gone_until, (c->ngone + 1) * sizeof(*c->gone_until));
		c->gone[c->ngone] = old[i];
		c->gone_until[c->ngone++] = t + COVER_GRACE_S * 1000;
		old[i] = NULL;
	}
}

static void
read_done(struct coverage *c)
{
	if (--c->outstanding > 0)
		return;
	if (!c->failed) {
		keep_gone(c, c->nodes, c->n, c->next, c->next_n);
		free_nodes(c->nodes, c->n);
		c->nodes = c->next;
		c->n = c->next_n;
		c->known = 1;
		metric_set(c->mg->m.notifiers, (double)c->n);
	} else {
		free_nodes(c->next, c->next_n);
	}
	c->next = NULL;
	c->next_n = c->next_cap = 0;
}

static void
node_cb(struct zk *z, int rc, const char *data, int len, const struct Stat *st,
	void *arg)
{
	struct coverage *c = arg;
	struct cover *one;
	char err[256];

	(void)z;
	(void)st;
	if (rc == ZOK && data != NULL && len > 0) {
		one = cover_parse(data, (size_t)len, err, sizeof(err));
		if (one != NULL) {
			if (c->next_n == c->next_cap) {
				c->next_cap = c->next_cap ? c->next_cap * 2 : 8;
				c->next = xrealloc(c->next,
						   c->next_cap *
							   sizeof(*c->next));
			}
			c->next[c->next_n++] = one;
		}
	} else if (rc != ZNONODE) { /* ZNONODE: it stopped meanwhile */
		c->failed = 1;
	}
	read_done(c);
}

static void
children_cb(struct zk *z, int rc, const struct String_vector *names, void *arg)
{
	struct coverage *c = arg;
	char path[1024];

	if (rc == ZOK) {
		for (int i = 0; i < names->count; i++) {
			zpath_child(path, sizeof(path),
				    cfg_str(c->mg->cfg, CFG_CLUSTER_ROOT),
				    ZPATH_NOTIFIERS, names->data[i]);
			c->outstanding++;
			if (zk_aget(z, path, 0, node_cb, c) < 0) {
				c->outstanding--;
				c->failed = 1;
			}
		}
	} else if (rc != ZNONODE) {
		c->failed = 1;
	}
	read_done(c);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct coverage *c = arg;
	char path[1024];

	(void)fd;
	(void)what;
	if (c->outstanding > 0 || !zk_is_connected(c->mg->zk))
		return;
	zpath(path, sizeof(path), cfg_str(c->mg->cfg, CFG_CLUSTER_ROOT),
	      ZPATH_NOTIFIERS);
	c->failed = 0;
	c->outstanding = 1;
	if (zk_aget_children(c->mg->zk, path, 0, children_cb, c) < 0)
		c->outstanding = 0;
}

struct coverage *
cover_start(struct manager *mg)
{
	struct coverage *c = xcalloc(1, sizeof(*c));
	struct timeval tv = {COVER_POLL_S, 0};

	c->mg = mg;
	c->tick = event_new(mg->base, -1, EV_PERSIST, tick_cb, c);
	event_add(c->tick, &tv);
	tick_cb(-1, 0, c);
	return c;
}

void
cover_destroy(struct coverage *c)
{
	if (c == NULL)
		return;
	event_free(c->tick);
	free_nodes(c->nodes, c->n);
	free_nodes(c->next, c->next_n);
	free_nodes(c->gone, c->ngone);
	xfree(c->gone_until);
	xfree(c);
}

void
cover_check(struct manager *mg, const struct task *t)
{
	struct coverage *c = mg->cover;
	char ktopic[KAFKA_TOPIC_NAME_MAX + TASK_TOPIC_MAX + 2];
	int64_t now;
	long skipped;

	if (c == NULL || t->callback == NULL || !c->known)
		return;
	snprintf(ktopic, sizeof(ktopic), "%s%s",
		 cfg_str(mg->cfg, CFG_KAFKA_TOPIC_PREFIX), t->topic);
	for (size_t i = 0; i < c->n; i++)
		if (cover_covers(c->nodes[i], ktopic))
			return;
	now = clock_mono_ms();
	for (size_t i = 0; i < c->ngone; i++)
		if (c->gone_until[i] > now && cover_covers(c->gone[i], ktopic))
			return;
	metric_inc(mg->m.cb_uncovered);
	c->uncovered++;
	snprintf(c->last_topic, sizeof(c->last_topic), "%s", t->topic);
	snprintf(c->last_id, sizeof(c->last_id), "%s", t->id);
	c->last_at = clock_now_ms();
	if (log_every(&c->uncovered_log, now, COVER_WARN_S * 1000, &skipped))
		log_warn("task with a callback on a topic no running notifier "
			 "consumes: the callback is not made until one does",
			 "topic=%s kafka_topic=%s id=%s notifiers=%zu "
			 "not_logged_since_last=%ld",
			 t->topic, ktopic, t->id, c->n, skipped);
}

json_t *
cover_status_json(struct manager *mg)
{
	struct coverage *c = mg->cover;
	json_t *o, *list;

	if (c == NULL)
		return json_null();
	list = json_array();
	for (size_t i = 0; i < c->n; i++)
		json_array_append(list, (json_t *)cover_json(c->nodes[i]));
	o = json_pack("{s:o, s:b, s:I}", "notifiers", list, "known", c->known,
		      "uncovered_total", (json_int_t)c->uncovered);
	if (c->last_at > 0)
		json_object_set_new(o, "last_uncovered",
				    json_pack("{s:o, s:o, s:I}", "topic",
					      utf8_json_str(c->last_topic),
					      "id", utf8_json_str(c->last_id),
					      "at", (json_int_t)c->last_at));
	else
		json_object_set_new(o, "last_uncovered", json_null());
	return o;
}
