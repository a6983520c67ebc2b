#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

/*
 * Exactly-once publishing (kafka.exactly_once; docs/architecture.md,
 * "Exactly-once publishing").
 *
 * Every slot this worker owns publishes through a transactional producer
 * of its own, transactional.id "<root>.slot.<N>": the next owner's
 * init_transactions fences the previous owner's producer (its open
 * transaction is aborted, its later commits refused), as the epoch fences
 * it in Redis and the DB. Each transaction carries the fired tasks'
 * records and, for each, a marker record (proto/marker.h) to partition N
 * of the marker topic. A slot's owner reads that partition
 * (read_committed) from the slot's checkpoint to its end before it claims
 * anything: every marker found is a task published and committed whose
 * delivery the DB may not show yet, and it is recorded delivered (the
 * usual, fenced and idempotent, DB update and Redis cleanup) instead of
 * being fired again. The checkpoint (slot_state.eos_offset) moves past a
 * transaction's markers once every task of it, and of every earlier one,
 * is recorded in the DB.
 *
 * Threads: librdkafka's transactional calls block, so each slot has a
 * thread of its own that runs one command at a time (open: make the
 * producer and read the markers; send: one transaction; close) on copies
 * of what it needs; results come back to the loop through a mailbox. The
 * thread never touches a wtask or the worker.
 */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cfg.h"
#include "daemon.h"
#include "db.h"
#include "hmap.h"
#include "kafka.h"
#include "log.h"
#include "mailbox.h"
#include "marker.h"
#include "metrics.h"
#include "schema.h"
#include "worker.h"
#include "xmalloc.h"

#define EOS_TXN_TIMEOUT_MS 10000
#define EOS_READ_TIMEOUT_MS 30000
#define EOS_RETRY_MS 1000
#define EOS_CKPT_MS 500

enum eos_state {
	ES_OFF,	     /* not owned */
	ES_WAIT,     /* owned; tasks of an earlier ownership still held */
	ES_CKPT,     /* reading the checkpoint from the DB */
	ES_OPENING,  /* the thread makes the producer, reads the markers */
	ES_APPLYING, /* markers found are being recorded delivered */
	ES_READY,    /* claims may go out */
};

enum cmd_kind { CMD_OPEN, CMD_SEND, CMD_CLOSE };

/* One fired task's records, owned by its command. */
struct eos_rec {
	char *topic;
	char *key;
	size_t keylen;
	char *value;
	size_t valuelen;
	rd_kafka_headers_t *hdrs;
	char marker[MARKER_VALUE_MAX];
	size_t markerlen;
	char id[TASK_ID_MAX + 1];
	struct wtask *t; /* the loop's: the thread never reads it */
};

struct eos_cmd {
	enum cmd_kind kind;
	int slot;
	unsigned gen;
	int64_t from; /* open: the next marker offset to read, -1: all */
	struct eos_rec *recs;
	size_t n;
	/* results */
	int status;
	int fatal;
	char err[512];
	struct marker *found; /* open */
	size_t nfound, capfound;
	size_t bad;	 /* open: undecodable markers */
	int64_t end;	 /* open: the partition's end; send: past the
			       last marker */
	int64_t took_ms; /* on the thread */
	struct eos_cmd *next;
};

/* Transactions committed, in order: the checkpoint passes one once its
 * tasks (left) are recorded in the DB, and every earlier one's. */
struct eos_batch {
	int64_t end;
	size_t left;
	struct eos_batch *next;
};

struct eos;

struct eos_slot {
	struct eos *e;
	int slot;
	/* thread */
	pthread_t th;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct eos_cmd *q, *qtail;
	int quit;
	struct kafka_txn *txn; /* the thread's only */
	char txn_id[320];
	/* loop */
	enum eos_state state;
	unsigned gen;
	int out; /* a command is out */
	struct eos_rec *pend;
	size_t npend, cappend;
	struct eos_batch *head, *tail;
	int64_t ckpt;	   /* in the DB as we know it, -1: none */
	int64_t ckpt_want; /* where the recorded transactions end */
	int ckpt_writing;
	size_t applying; /* markers being recorded */
	int64_t retry_at_ms;
	int64_t opened_ms; /* when it started opening (monotonic) */
};

struct eos {
	struct worker *w;
	const struct cfg *cfg;
	char topic[KAFKA_TOPIC_NAME_MAX + 1];
	int nparts;
	int interval_ms;
	size_t max_records;
	struct mailbox *mb;
	struct event *tick;
	struct eos_slot *slots;
	int n;
	int64_t last_ckpt_ms;
	size_t queued; /* records pending or out, every slot */
};

/* The thread ---------------------------------------------------------- */

struct found_acc {
	struct eos_cmd *cmd;
	int slot;
};

static void
found_cb(const rd_kafka_message_t *m, void *arg)
{
	struct found_acc *fa = arg;
	struct eos_cmd *c = fa->cmd;
	struct marker mk;

	if (m->partition != fa->slot)
		return;
	if (marker_decode(m->key, m->key_len, m->payload, m->len, &mk) < 0) {
		c->bad++;
		return;
	}
	if (c->nfound == c->capfound) {
		c->capfound = c->capfound ? c->capfound * 2 : 64;
		c->found = xrealloc(c->found, c->capfound * sizeof(*c->found));
	}
	c->found[c->nfound++] = mk;
}

static void
run_open(struct eos_slot *s, struct eos_cmd *c)
{
	struct eos *e = s->e;
	struct found_acc fa = {c, s->slot};
	int64_t *from, *ends = NULL;
	int nends = 0;

	kafka_txn_destroy(s->txn);
	s->txn = kafka_txn_create(e->cfg, s->txn_id, EOS_TXN_TIMEOUT_MS, c->err,
				  sizeof(c->err));
	if (s->txn == NULL) {
		c->status = -1;
		return;
	}
	/* Fenced: whatever an earlier producer of the slot committed is in
	 * the partition now, and nothing of it is still open. */
	from = xcalloc((size_t)e->nparts, sizeof(*from));
	for (int i = 0; i < e->nparts; i++)
		from[i] = -1;
	from[s->slot] = c->from < 0 ? 0 : c->from;
	c->status = kafka_read_committed(
		e->cfg, e->topic, from, e->nparts, found_cb, &fa, &ends, &nends,
		EOS_READ_TIMEOUT_MS, c->err, sizeof(c->err));
	if (c->status == 0)
		c->end = s->slot < nends ? ends[s->slot] : -1;
	xfree(ends);
	xfree(from);
}

static void
run_send(struct eos_slot *s, struct eos_cmd *c)
{
	struct kafka_rec *kr;
	size_t n = c->n;

	if (s->txn == NULL) {
		snprintf(c->err, sizeof(c->err), "no producer");
		c->status = -1;
		c->fatal = 1;
		for (size_t i = 0; i < n; i++)
			rd_kafka_headers_destroy(c->recs[i].hdrs);
		return;
	}
	kr = xcalloc(2 * n, sizeof(*kr));
	for (size_t i = 0; i < n; i++) {
		struct eos_rec *r = &c->recs[i];

		kr[i].topic = r->topic;
		kr[i].key = r->key;
		kr[i].keylen = r->keylen;
		kr[i].value = r->value;
		kr[i].valuelen = r->valuelen;
		kr[i].hdrs = r->hdrs;
		kr[n + i].pinned = 1;
		kr[n + i].pin_partition = s->slot;
		kr[n + i].key = r->id;
		kr[n + i].keylen = strlen(r->id);
		kr[n + i].value = r->marker;
		kr[n + i].valuelen = r->markerlen;
	}
	c->status = kafka_txn_send(s->txn, s->e->topic, kr, 2 * n,
				   EOS_TXN_TIMEOUT_MS, &c->fatal, c->err,
				   sizeof(c->err));
	for (size_t i = 0; i < n; i++)
		c->recs[i].hdrs = NULL; /* taken over */
	if (c->status == 0)
		c->end = kr[2 * n - 1].offset + 1;
	if (c->fatal) {
		kafka_txn_destroy(s->txn);
		s->txn = NULL;
	}
	xfree(kr);
}

static void *
slot_thread(void *arg)
{
	struct eos_slot *s = arg;

	for (;;) {
		struct eos_cmd *c;
		int64_t t0;

		pthread_mutex_lock(&s->mu);
		while (s->q == NULL && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		c = s->q;
		if (c != NULL) {
			s->q = c->next;
			if (s->q == NULL)
				s->qtail = NULL;
		}
		pthread_mutex_unlock(&s->mu);
		if (c == NULL)
			break;
		t0 = clock_mono_ms();
		switch (c->kind) {
		case CMD_OPEN: run_open(s, c); break;
		case CMD_SEND: run_send(s, c); break;
		case CMD_CLOSE:
			kafka_txn_destroy(s->txn);
			s->txn = NULL;
			break;
		}
		c->took_ms = clock_mono_ms() - t0;
		mailbox_post(s->e->mb, c);
	}
	kafka_txn_destroy(s->txn);
	s->txn = NULL;
	return NULL;
}

static void
post_cmd(struct eos_slot *s, struct eos_cmd *c)
{
	c->slot = s->slot;
	c->gen = s->gen;
	if (c->kind != CMD_CLOSE)
		s->out = 1;
	pthread_mutex_lock(&s->mu);
	c->next = NULL;
	if (s->qtail != NULL)
		s->qtail->next = c;
	else
		s->q = c;
	s->qtail = c;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* The loop ------------------------------------------------------------ */

static void
rec_free(struct eos_rec *r)
{
	xfree(r->topic);
	xfree(r->key);
	xfree(r->value);
	if (r->hdrs != NULL)
		rd_kafka_headers_destroy(r->hdrs);
}

static void
cmd_free(struct eos_cmd *c)
{
	for (size_t i = 0; i < c->n; i++)
		rec_free(&c->recs[i]);
	xfree(c->recs);
	xfree(c->found);
	xfree(c);
}

static void
batches_free(struct eos_slot *s)
{
	while (s->head != NULL) {
		struct eos_batch *b = s->head;

		s->head = b->next;
		xfree(b);
	}
	s->tail = NULL;
}

static struct eos_batch *
batch_add(struct eos_slot *s, int64_t end, size_t left)
{
	struct eos_batch *b = xcalloc(1, sizeof(*b));

	b->end = end;
	b->left = left;
	if (s->tail != NULL)
		s->tail->next = b;
	else
		s->head = b;
	s->tail = b;
	return b;
}

/* Tasks not sent yet go back: they stay in flight (Redis) or firing
 * (DB), and a lease brings them back. */
static void
drop_pending(struct eos *e, struct eos_slot *s)
{
	struct worker *w = e->w;

	for (size_t i = 0; i < s->npend; i++) {
		struct wtask *t = s->pend[i].t;

		rec_free(&s->pend[i]);
		w->publishing--;
		wtask_release(w, t);
	}
	e->queued -= s->npend;
	s->npend = 0;
}

static void
send_pending(struct eos *e, struct eos_slot *s)
{
	struct eos_cmd *c;
	size_t n;

	if (s->out || s->state != ES_READY || s->npend == 0)
		return;
	n = s->npend < e->max_records ? s->npend : e->max_records;
	c = xcalloc(1, sizeof(*c));
	c->kind = CMD_SEND;
	c->recs = xmemdup(s->pend, n * sizeof(*s->pend));
	c->n = n;
	memmove(s->pend, s->pend + n, (s->npend - n) * sizeof(*s->pend));
	s->npend -= n;
	post_cmd(s, c);
}

struct ckpt_job {
	struct db_job job;
	struct eos *e;
	int slot;
	unsigned gen;
	int64_t epoch;
	int64_t offset; /* set: to write; get: read */
	int set;
	unsigned long long affected;
};

static int
ckpt_run(struct db_conn *c, struct db_job *job)
{
	struct ckpt_job *j = (struct ckpt_job *)job;
	struct db_params p;
	long long v = -1;
	int rc;

	db_params_init(&p, 5);
	if (!j->set) {
		db_params_int(&p, j->slot);
		rc = db_query_int(c, SQL_EOS_CKPT_GET, &p, -1, &v);
		j->offset = v;
	} else {
		db_params_int(&p, j->offset);
		db_params_int(&p, clock_now_ms());
		db_params_int(&p, j->slot);
		db_params_int(&p, j->epoch);
		db_params_int(&p, j->offset);
		rc = db_exec(c, SQL_EOS_CKPT_SET, &p, &j->affected);
	}
	db_params_free(&p);
	return rc;
}

static void open_slot(struct eos *e, struct eos_slot *s);

static void
ckpt_done_cb(struct db_job *job, int status, const char *err)
{
	struct ckpt_job *j = (struct ckpt_job *)job;
	struct eos_slot *s = &j->e->slots[j->slot];

	if (j->set) {
		s->ckpt_writing = 0;
		if (status == 0 && j->affected > 0 && j->gen == s->gen)
			s->ckpt = j->offset;
		else if (status < 0)
			log_warn(
				"exactly-once checkpoint not saved, will retry",
				"slot=%d offset=%lld error=\"%s\"", j->slot,
				(long long)j->offset, err);
	} else if (j->gen == s->gen && s->state == ES_CKPT) {
		if (status < 0) {
			log_warn("exactly-once checkpoint not read, will retry",
				 "slot=%d error=\"%s\"", j->slot, err);
			s->retry_at_ms = clock_mono_ms() + EOS_RETRY_MS;
		} else {
			s->ckpt = j->offset;
			s->state = ES_OPENING;
			open_slot(j->e, s);
		}
	}
	xfree(j);
}

static void
submit_ckpt(struct eos *e, struct eos_slot *s, int set, int64_t offset)
{
	struct ckpt_job *j = xcalloc(1, sizeof(*j));

	j->e = e;
	j->slot = s->slot;
	j->gen = s->gen;
	j->epoch = e->w->slots[s->slot].epoch;
	j->set = set;
	j->offset = offset;
	j->job.run = ckpt_run;
	j->job.done_cb = ckpt_done_cb;
	if (set)
		s->ckpt_writing = 1;
	db_pool_submit(e->w->db, &j->job);
}

static void
open_slot(struct eos *e, struct eos_slot *s)
{
	struct eos_cmd *c = xcalloc(1, sizeof(*c));

	c->kind = CMD_OPEN;
	c->from = s->ckpt;
	post_cmd(s, c);
}

static void
ready(struct eos *e, struct eos_slot *s)
{
	s->state = ES_READY;
	log_info("exactly-once slot ready", "slot=%d epoch=%lld took_ms=%lld",
		 s->slot, (long long)e->w->slots[s->slot].epoch,
		 (long long)(clock_mono_ms() - s->opened_ms));
	scanner_wake(e->w, s->slot);
}

/*
 * The markers read at open: each is a task published (committed) whose
 * delivery the DB may not show. Each is recorded through the usual
 * delivered update (fenced by our epoch, a no-op for rows already
 * final) and Redis cleanup, held meanwhile so that no scan or claim
 * takes it. Tasks of the slot waiting in the wheel go back first (they
 * stay due in Redis; nothing of the slot is claimed before this is done).
 */
static void
apply_found(struct eos *e, struct eos_slot *s, struct eos_cmd *c)
{
	struct worker *w = e->w;
	struct wslot *ws = &w->slots[s->slot];
	struct eos_batch *b;
	size_t held = 0;

	scanner_drop_slot(w, s->slot);
	b = batch_add(s, c->end, 1);
	for (size_t i = 0; i < c->nfound; i++) {
		const struct marker *m = &c->found[i];
		struct wtask *t = hmap_get(w->tasks, m->id);

		if (t != NULL) {
			/* Nothing of the slot is held when it opens (ES_WAIT)
			 * but what waits for a claim, dropped above: not
			 * expected; its own path decides. */
			held++;
			continue;
		}
		t = xcalloc(1, sizeof(*t));
		snprintf(t->id, sizeof(t->id), "%s", m->id);
		t->w = w;
		t->slot = s->slot;
		t->epoch = ws->epoch;
		t->due_at = m->due_at;
		t->fired_at = m->fired_at;
		t->attempt = m->attempt;
		t->recurring = m->recurring;
		t->misfired = m->misfired;
		t->counted = 1;
		t->state = WT_MARKING;
		t->eb = b;
		t->eos_apply = 1;
		b->left++;
		s->applying++;
		ws->busy++;
		hmap_put(w->tasks, t->id, t);
		firing_mark(w, t);
	}
	b->left--;
	metric_add(w->m.eos_recorded, (double)s->applying);
	log_info("exactly-once slot opened",
		 "slot=%d epoch=%lld txn_id=%s from=%lld end=%lld markers=%zu "
		 "recording=%zu held=%zu undecodable=%zu took_ms=%lld",
		 s->slot, (long long)ws->epoch, s->txn_id, (long long)c->from,
		 (long long)c->end, c->nfound, s->applying, held, c->bad,
		 (long long)c->took_ms);
	if (s->applying == 0)
		ready(e, s);
	else
		s->state = ES_APPLYING;
}

static void
sent(struct eos *e, struct eos_slot *s, struct eos_cmd *c)
{
	struct worker *w = e->w;
	int current = c->gen == s->gen;

	w->publishing -= c->n;
	e->queued -= c->n;
	if (c->status == 0) {
		struct eos_batch *b =
			current ? batch_add(s, c->end, c->n) : NULL;

		metric_inc(w->m.eos_txns);
		metric_add(w->m.eos_records, (double)c->n);
		metric_observe(w->m.eos_txn_seconds,
			       (double)c->took_ms / 1000.0);
		for (size_t i = 0; i < c->n; i++) {
			struct wtask *t = c->recs[i].t;

			t->eb = b;
			firing_published(w, t);
		}
		return;
	}
	/* Not committed (aborted), or not known: nothing of it is published
	 * as far as we can tell; each task stays in flight for a lease. An
	 * unknown outcome opens the slot again, which finds the markers of
	 * a commit that did go in. */
	metric_inc(w->m.eos_txn_failures);
	log_warn("exactly-once transaction failed",
		 "slot=%d tasks=%zu "
		 "outcome=%s error=\"%s\"",
		 c->slot, c->n, c->fatal ? "unknown" : "aborted", c->err);
	for (size_t i = 0; i < c->n; i++) {
		metric_inc(w->m.publish_errors);
		wtask_release(w, c->recs[i].t);
	}
	if (c->fatal && current && s->state == ES_READY) {
		drop_pending(e, s);
		s->state = ES_OPENING;
		s->opened_ms = clock_mono_ms();
		open_slot(e, s);
	}
}

static void
result_cb(void *item, void *arg)
{
	struct eos *e = arg;
	struct eos_cmd *c = item;
	struct eos_slot *s = &e->slots[c->slot];

	if (c->kind != CMD_CLOSE && c->gen == s->gen)
		s->out = 0;
	switch (c->kind) {
	case CMD_OPEN:
		if (c->gen != s->gen || s->state != ES_OPENING)
			break;
		if (c->status < 0) {
			log_warn("exactly-once slot not opened, will retry",
				 "slot=%d txn_id=%s error=\"%s\"", c->slot,
				 s->txn_id, c->err);
			s->retry_at_ms = clock_mono_ms() + EOS_RETRY_MS;
			break;
		}
		apply_found(e, s, c);
		break;
	case CMD_SEND: sent(e, s, c); break;
	case CMD_CLOSE: break;
	}
	/* The records by then gathered go at once. */
	send_pending(e, s);
	cmd_free(c);
}

static void
drop_cb(void *item, void *arg)
{
	cmd_free(item);
}

/* Moves the checkpoint past the transactions whose tasks are recorded
 * (a write refused, for a DB fence not raised yet, is retried). */
static void
advance(struct eos *e, struct eos_slot *s)
{
	while (s->head != NULL && s->head->left == 0) {
		struct eos_batch *b = s->head;

		if (b->end > s->ckpt_want)
			s->ckpt_want = b->end;
		s->head = b->next;
		if (s->head == NULL)
			s->tail = NULL;
		xfree(b);
	}
	if (s->ckpt_want > s->ckpt && !s->ckpt_writing)
		submit_ckpt(e, s, 1, s->ckpt_want);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eos *e = arg;
	int64_t now = clock_mono_ms();
	int ckpt = now - e->last_ckpt_ms >= EOS_CKPT_MS;

	if (ckpt)
		e->last_ckpt_ms = now;
	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];

		if (s->state == ES_OFF)
			continue;
		if (s->state == ES_WAIT && e->w->slots[i].busy == 0) {
			s->state = ES_CKPT;
			submit_ckpt(e, s, 0, 0);
		}
		if (s->retry_at_ms != 0 && now >= s->retry_at_ms && !s->out) {
			s->retry_at_ms = 0;
			if (s->state == ES_CKPT)
				submit_ckpt(e, s, 0, 0);
			else if (s->state == ES_OPENING)
				open_slot(e, s);
		}
		send_pending(e, s);
		if (ckpt && (s->state == ES_READY || s->state == ES_APPLYING))
			advance(e, s);
	}
}

/* The API ------------------------------------------------------------- */

int
eos_enabled(const struct worker *w)
{
	return w->eos != NULL;
}

/* "<root without its leading '/', '/' as '.'>", in the characters Kafka
 * allows in names (others become '_'). */
static void
root_name(char *buf, size_t len, const char *root)
{
	size_t j = 0;

	while (*root == '/')
		root++;
	for (; *root != '\0' && j + 1 < len; root++) {
		char ch = *root;

		if (ch == '/')
			ch = '.';
		else if (!((ch >= 'a' && ch <= 'z') ||
			   (ch >= 'A' && ch <= 'Z') ||
			   (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
			   ch == '-'))
			ch = '_';
		buf[j++] = ch;
	}
	buf[j] = '\0';
	if (j == 0)
		snprintf(buf, len, "prophet");
}

void
eos_start(struct worker *w)
{
	struct eos *e;
	char root[256], err[512];
	struct timeval tv;

	if (!cfg_int(w->cfg, CFG_KAFKA_EXACTLY_ONCE))
		return;
	e = xcalloc(1, sizeof(*e));
	e->w = w;
	e->cfg = w->cfg;
	root_name(root, sizeof(root), cfg_str(w->cfg, CFG_CLUSTER_ROOT));
	if (cfg_str(w->cfg, CFG_KAFKA_EOS_TOPIC)[0] != '\0')
		snprintf(e->topic, sizeof(e->topic), "%s",
			 cfg_str(w->cfg, CFG_KAFKA_EOS_TOPIC));
	else
		snprintf(e->topic, sizeof(e->topic), "%s%s.fired",
			 w->topic_prefix, root);
	e->interval_ms = (int)cfg_int(w->cfg, CFG_KAFKA_EOS_INTERVAL_MS);
	e->max_records = (size_t)cfg_int(w->cfg, CFG_KAFKA_EOS_MAX_RECORDS);
	/* Before anything is fired: a marker topic without a partition per
	 * slot cannot hold the slots' markers apart. */
	for (int tries = 0;; tries++) {
		e->nparts = kafka_topic_ensure_parts(w->kafka, w->cfg, e->topic,
						     w->nslots, 10000, err,
						     sizeof(err));
		if (e->nparts >= 0 || tries >= 5)
			break;
		log_warn("exactly-once marker topic not known yet, retrying",
			 "topic=%s error=\"%s\"", e->topic, err);
	}
	if (e->nparts < 0)
		log_fatal("exactly-once: the marker topic cannot be made or "
			  "described",
			  "topic=%s error=\"%s\"", e->topic, err);
	if (e->nparts < w->nslots)
		log_fatal("exactly-once: the marker topic has fewer partitions "
			  "than cluster.slots (add partitions, or name another "
			  "kafka.eos_topic)",
			  "topic=%s partitions=%d slots=%d", e->topic,
			  e->nparts, w->nslots);
	e->mb = mailbox_create(w->base, result_cb, drop_cb, e);
	e->n = w->nslots;
	e->slots = xcalloc((size_t)e->n, sizeof(*e->slots));
	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];

		s->e = e;
		s->slot = i;
		s->ckpt = -1;
		snprintf(s->txn_id, sizeof(s->txn_id), "%s.slot.%d", root, i);
		pthread_mutex_init(&s->mu, NULL);
		pthread_cond_init(&s->cv, NULL);
		if (pthread_create(&s->th, NULL, slot_thread, s) != 0)
			log_fatal("exactly-once: no thread", "slot=%d", i);
		s->started = 1;
	}
	e->tick = event_new(w->base, -1, EV_PERSIST, tick_cb, e);
	tv.tv_sec = 0;
	tv.tv_usec = (e->interval_ms > 0 ? e->interval_ms : 1) * 1000;
	event_add(e->tick, &tv);
	w->eos = e;
	log_info("exactly-once publishing",
		 "topic=%s partitions=%d "
		 "txn_ids=%s.slot.<N> interval_ms=%d max_records=%zu",
		 e->topic, e->nparts, root, e->interval_ms, e->max_records);
}

void
eos_stop(struct worker *w)
{
	struct eos *e = w->eos;

	if (e == NULL)
		return;
	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];

		pthread_mutex_lock(&s->mu);
		s->quit = 1;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];

		if (s->started)
			pthread_join(s->th, NULL);
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		for (size_t k = 0; k < s->npend; k++)
			rec_free(&s->pend[k]);
		xfree(s->pend);
		batches_free(s);
	}
	mailbox_destroy(e->mb);
	event_free(e->tick);
	xfree(e->slots);
	xfree(e);
	w->eos = NULL;
}

void
eos_slot_gained(struct worker *w, int slot)
{
	struct eos *e = w->eos;
	struct eos_slot *s;

	if (e == NULL)
		return;
	s = &e->slots[slot];
	s->gen++;
	s->applying = 0;
	s->retry_at_ms = 0;
	s->ckpt_want = -1;
	s->opened_ms = clock_mono_ms();
	batches_free(s);
	/* Tasks this worker still holds from an earlier ownership of the
	 * slot (on their way to the DB, or claims of then, which are not
	 * published now) finish first: the markers are then read with
	 * nothing of the slot held, and each is recorded. */
	if (w->slots[slot].busy > 0) {
		s->state = ES_WAIT;
		return;
	}
	s->state = ES_CKPT;
	submit_ckpt(e, s, 0, 0);
}

static void
forget_batch(const char *key, void *value, void *arg)
{
	struct wtask *t = value;
	int *slot = arg;

	if (t->slot == *slot) {
		t->eb = NULL;
		t->eos_apply = 0;
	}
}

void
eos_slot_lost(struct worker *w, int slot)
{
	struct eos *e = w->eos;
	struct eos_slot *s;
	struct eos_cmd *c;

	if (e == NULL)
		return;
	s = &e->slots[slot];
	if (s->state == ES_OFF)
		return;
	s->gen++;
	s->state = ES_OFF;
	s->out = 0; /* a result still out is stale now */
	s->applying = 0;
	drop_pending(e, s);
	hmap_foreach(w->tasks, forget_batch, &slot);
	batches_free(s);
	c = xcalloc(1, sizeof(*c));
	c->kind = CMD_CLOSE;
	post_cmd(s, c);
}

int
eos_slot_ready(const struct worker *w, int slot)
{
	return w->eos == NULL || w->eos->slots[slot].state == ES_READY;
}

size_t
eos_queued(const struct worker *w)
{
	return w->eos != NULL ? w->eos->queued : 0;
}

int
eos_publish(struct worker *w, struct wtask *t, const char *topic,
	    const char *key, size_t keylen, const void *value, size_t valuelen,
	    rd_kafka_headers_t *hdrs)
{
	struct eos *e = w->eos;
	struct eos_slot *s = &e->slots[t->slot];
	struct eos_rec *r;
	struct marker mk;

	if (s->state == ES_OFF || !w->slots[t->slot].owned ||
	    t->epoch != w->slots[t->slot].epoch) {
		/* Lost while it waited (claimed early, or a claim reply that
		 * came back after the slot was lost, maybe gained again
		 * since): the slot's owner has it in flight. */
		rd_kafka_headers_destroy(hdrs);
		wtask_release(w, t);
		return -1;
	}
	if (s->npend == s->cappend) {
		s->cappend = s->cappend ? s->cappend * 2 : 256;
		s->pend = xrealloc(s->pend, s->cappend * sizeof(*s->pend));
	}
	r = &s->pend[s->npend++];
	memset(r, 0, sizeof(*r));
	r->topic = xstrdup(topic);
	r->key = xmemdup(key, keylen);
	r->keylen = keylen;
	r->value = valuelen > 0 ? xmemdup(value, valuelen) : NULL;
	r->valuelen = valuelen;
	r->hdrs = hdrs;
	r->t = t;
	memset(&mk, 0, sizeof(mk));
	snprintf(r->id, sizeof(r->id), "%s", t->id);
	mk.due_at = t->due_at;
	mk.fired_at = t->fired_at;
	mk.attempt = t->attempt;
	mk.epoch = t->epoch;
	mk.recurring = t->recurring;
	mk.misfired = t->misfired;
	r->markerlen = marker_encode(&mk, r->marker);
	e->queued++;
	if (s->npend >= e->max_records || e->interval_ms == 0)
		send_pending(e, s);
	return 0;
}

void
eos_task_recorded(struct worker *w, struct wtask *t)
{
	struct eos *e = w->eos;
	struct eos_slot *s;

	if (e == NULL)
		return;
	s = &e->slots[t->slot];
	if (t->eb != NULL) {
		t->eb->left--;
		t->eb = NULL;
	}
	if (t->eos_apply) {
		t->eos_apply = 0;
		if (s->applying > 0 && --s->applying == 0 &&
		    s->state == ES_APPLYING)
			ready(e, s);
	}
}
