#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "cfg.h"
#include "daemon.h"
#include "hmap.h"
#include "kafka.h"
#include "log.h"
#include "mailbox.h"
#include "manager.h"
#include "metrics.h"
#include "xmalloc.h"

/*
 * Whether a task's Kafka topic exists (docs/architecture.md, "Task
 * topics"), asked with a metadata request for that topic alone on a
 * thread of its own, never on the loop. Answers are cached: a topic that
 * exists for KT_EXISTS_MS (then asked again in the background, the tasks
 * going ahead meanwhile), one that does not for KT_MISSING_MS, so that a
 * topic made by an operator is usable a moment later. Only a submission
 * to a topic without a fresh answer waits, for one round trip. Brokers
 * that do not answer refuse nothing: the task is accepted, and for
 * KT_DOWN_MS no submission waits for them.
 */

#define KT_EXISTS_MS 60000
#define KT_MISSING_MS 2000
#define KT_DOWN_MS 5000
#define KT_ASK_MS 2000
#define KT_CREATE_MS 10000
#define KT_MAX_TOPICS 10000
#define KT_WARN_MS 10000

enum kt_state { KT_NEW, KT_EXISTS, KT_MISSING, KT_UNVERIFIED };

struct kt_waiter {
	ktopics_fn cb;
	void *arg;
	struct kt_waiter *next;
};

struct kt_entry {
	char name[KAFKA_TOPIC_NAME_MAX + 1]; /* the Kafka topic, prefixed */
	enum kt_state state;
	int64_t answered_ms; /* monotonic */
	int asking;
	char why[200];		   /* KT_MISSING: why it was not created */
	struct kt_waiter *waiters; /* in the order they came */
	struct kt_waiter **waiters_tail;
};

/* One question for the thread, and its answer. */
struct kt_job {
	char name[KAFKA_TOPIC_NAME_MAX + 1];
	int create;
	int rc; /* kafka_admin_topic_exists(), 2: created */
	char err[200];
	struct kt_job *next;
};

struct ktopics {
	struct manager *mg;
	struct hmap *topics;
	struct kafka_admin *admin;
	struct mailbox *mb;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct kt_job *head, *tail; /* under mu */
	int stop;		    /* under mu */
	int64_t down_until_ms;
	struct log_every unverified_log;
};

static void *
kt_main(void *arg)
{
	struct ktopics *k = arg;
	struct kt_job *j;

	pthread_mutex_lock(&k->mu);
	for (;;) {
		while (k->head == NULL && !k->stop)
			pthread_cond_wait(&k->cv, &k->mu);
		if (k->stop)
			break;
		j = k->head;
		k->head = j->next;
		if (k->head == NULL)
			k->tail = NULL;
		pthread_mutex_unlock(&k->mu);
		j->rc = kafka_admin_topic_exists(k->admin, j->name, KT_ASK_MS,
						 j->err, sizeof(j->err));
		if (j->rc == 0 && j->create &&
		    kafka_admin_create_topic(k->admin, j->name, KT_CREATE_MS,
					     j->err, sizeof(j->err)) == 0)
			j->rc = 2;
		mailbox_post(k->mb, j);
		pthread_mutex_lock(&k->mu);
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

static void
ask(struct ktopics *k, struct kt_entry *e)
{
	struct kt_job *j;

	if (e->asking)
		return;
	e->asking = 1;
	j = xcalloc(1, sizeof(*j));
	memcpy(j->name, e->name, sizeof(j->name));
	j->create = (int)cfg_int(k->mg->cfg, CFG_KAFKA_CREATE_TASK_TOPICS);
	pthread_mutex_lock(&k->mu);
	if (k->tail != NULL)
		k->tail->next = j;
	else
		k->head = j;
	k->tail = j;
	pthread_cond_signal(&k->cv);
	pthread_mutex_unlock(&k->mu);
}

static void
refusal(const struct kt_entry *e, struct task_error *err)
{
	if (e->why[0] != '\0')
		task_error_set(err, 422, "topic_unknown", "topic",
			       "Kafka topic '%s' does not exist and could not "
			       "be created: %s",
			       e->name, e->why);
	else
		task_error_set(err, 422, "topic_unknown", "topic",
			       "Kafka topic '%s' does not exist: create it "
			       "first (or let the manager create it: "
			       "kafka.create_task_topics)",
			       e->name);
}

static void
unverified(struct ktopics *k, const struct kt_job *j)
{
	long skipped;

	metric_inc(k->mg->m.topic_unverified);
	if (log_every(&k->unverified_log, clock_mono_ms(), KT_WARN_MS,
		      &skipped))
		log_warn("task topic not verified: its tasks are accepted",
			 "topic=%s error=\"%s\" not_logged_since_last=%ld",
			 j->name, j->err, skipped);
}

static void
answer_cb(void *item, void *arg)
{
	struct ktopics *k = arg;
	struct kt_job *j = item;
	struct kt_entry *e = hmap_get(k->topics, j->name);
	struct kt_waiter *w, *next;
	struct task_error err;
	int ok = 1;

	if (e == NULL) {
		xfree(j);
		return;
	}
	e->asking = 0;
	e->answered_ms = clock_mono_ms();
	e->why[0] = '\0';
	switch (j->rc) {
	case 2:
		metric_inc(k->mg->m.topics_created);
		log_info("task topic created at first use", "topic=%s",
			 j->name);
		/* fallthrough */
	case 1: e->state = KT_EXISTS; break;
	case 0:
		e->state = KT_MISSING;
		if (j->create) {
			snprintf(e->why, sizeof(e->why), "%s", j->err);
			log_warn("task topic could not be created",
				 "topic=%s error=\"%s\"", j->name, j->err);
		}
		refusal(e, &err);
		ok = 0;
		break;
	default:
		e->state = KT_UNVERIFIED;
		if (j->rc == -1)
			k->down_until_ms = e->answered_ms + KT_DOWN_MS;
		unverified(k, j);
		break;
	}
	w = e->waiters;
	e->waiters = NULL;
	e->waiters_tail = &e->waiters;
	xfree(j);
	/* They go to the group commit together, in order. */
	ingest_plug(k->mg->ingest);
	for (; w != NULL; w = next) {
		next = w->next;
		w->cb(ok ? NULL : &err, w->arg);
		xfree(w);
	}
	ingest_unplug(k->mg->ingest);
}

static void
drop_cb(void *item, void *arg)
{
	(void)arg;
	xfree(item);
}

static void
collect(const char *key, void *value, void *arg)
{
	struct kt_entry *e = value, ***out = arg;

	(void)key;
	if (!e->asking && e->waiters == NULL)
		*(*out)++ = e;
}

/* Forgets every answer not awaited (a bound on the cache, not an LRU:
 * with more topics than this, they are asked about again). */
static void
forget_all(struct ktopics *k)
{
	struct kt_entry **all =
		xcalloc(hmap_count(k->topics) + 1, sizeof(*all));
	struct kt_entry **end = all;

	hmap_foreach(k->topics, collect, &end);
	for (struct kt_entry **e = all; e < end; e++) {
		hmap_del(k->topics, (*e)->name);
		xfree(*e);
	}
	xfree(all);
}

void
ktopics_check(struct manager *mg, const char *topic, ktopics_fn cb, void *arg)
{
	struct ktopics *k = mg->ktopics;
	const char *prefix = cfg_str(mg->cfg, CFG_KAFKA_TOPIC_PREFIX);
	char name[KAFKA_TOPIC_NAME_MAX + 1];
	struct kt_entry *e;
	struct kt_waiter *w;
	struct task_error err;
	int64_t now, age;
	size_t pl, tl;

	if (k == NULL) {
		cb(NULL, arg);
		return;
	}
	/* guard_submission bounds the length; cut as snprintf would */
	pl = strlen(prefix);
	tl = strlen(topic);
	if (pl > sizeof(name) - 1)
		pl = sizeof(name) - 1;
	if (tl > sizeof(name) - 1 - pl)
		tl = sizeof(name) - 1 - pl;
	memcpy(name, prefix, pl);
	memcpy(name + pl, topic, tl);
	name[pl + tl] = '\0';
	now = clock_mono_ms();
	if ((e = hmap_get(k->topics, name)) == NULL) {
		if (hmap_count(k->topics) >= KT_MAX_TOPICS)
			forget_all(k);
		e = xcalloc(1, sizeof(*e));
		memcpy(e->name, name, sizeof(e->name));
		e->waiters_tail = &e->waiters;
		hmap_put(k->topics, e->name, e);
	}
	age = now - e->answered_ms;
	switch (e->state) {
	case KT_EXISTS:
		if (age >= KT_EXISTS_MS)
			ask(k, e);
		cb(NULL, arg);
		return;
	case KT_UNVERIFIED:
		if (age >= KT_DOWN_MS)
			ask(k, e);
		cb(NULL, arg);
		return;
	case KT_MISSING:
		if (age < KT_MISSING_MS) {
			refusal(e, &err);
			cb(&err, arg);
			return;
		}
		break;
	case KT_NEW: break;
	}
	ask(k, e);
	if (now < k->down_until_ms) {
		cb(NULL, arg);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	w->cb = cb;
	w->arg = arg;
	*e->waiters_tail = w;
	e->waiters_tail = &w->next;
}

struct ktopics *
ktopics_create(struct manager *mg)
{
	struct ktopics *k;
	char err[512];

	if (!cfg_int(mg->cfg, CFG_KAFKA_CHECK_TASK_TOPICS))
		return NULL;
	k = xcalloc(1, sizeof(*k));
	k->mg = mg;
	k->admin = kafka_admin_create(mg->cfg, err, sizeof(err));
	if (k->admin == NULL)
		log_fatal("kafka", "error=\"%s\"", err);
	k->topics = hmap_create();
	k->mb = mailbox_create(mg->base, answer_cb, drop_cb, k);
	pthread_mutex_init(&k->mu, NULL);
	pthread_cond_init(&k->cv, NULL);
	if (pthread_create(&k->thread, NULL, kt_main, k) != 0)
		log_fatal("cannot start the task topic thread", "");
	return k;
}

static void
free_entry(const char *key, void *value, void *arg)
{
	struct kt_entry *e = value;
	struct kt_waiter *w, *next;

	(void)key;
	(void)arg;
	for (w = e->waiters; w != NULL; w = next) {
		next = w->next;
		xfree(w);
	}
	xfree(e);
}

/* At exit, with no submission waiting (the manager drained them). */
void
ktopics_destroy(struct ktopics *k)
{
	struct kt_job *j, *next;

	if (k == NULL)
		return;
	pthread_mutex_lock(&k->mu);
	k->stop = 1;
	pthread_cond_signal(&k->cv);
	pthread_mutex_unlock(&k->mu);
	pthread_join(k->thread, NULL);
	for (j = k->head; j != NULL; j = next) {
		next = j->next;
		xfree(j);
	}
	mailbox_destroy(k->mb);
	hmap_foreach(k->topics, free_entry, NULL);
	hmap_destroy(k->topics);
	kafka_admin_destroy(k->admin);
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->mu);
	xfree(k);
}
