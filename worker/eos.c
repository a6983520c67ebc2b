#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

/*
 * Exactly-once publishing (kafka.exactly_once; docs/architecture.md,
 * "Exactly-once publishing").
 *
 * The worker publishes through one transactional producer of its own,
 * transactional.id "<root>.worker.<id>.<start>", unique to this process.
 * Each transaction carries fired tasks' records of any owned slots and,
 * for each, a marker record (proto/marker.h) to this worker's partition
 * of the marker topic (kafka.eos_partition, or by the worker id: one for
 * all its slots). The slot's record in the DB (slot_state) names the
 * producer that last published for it (eos_txid) and its checkpoint: a
 * partition (eos_part; NULL: partition N, the slot's own, as workers
 * before migration 11 wrote) and an offset in it. Opening a slot (on
 * gain, and again whenever this producer is made again):
 *
 *   1. read: raise the slot's DB fence to our epoch, read its checkpoint
 *      and its last producer (refused if a higher epoch owns it);
 *   2. fence: if that producer is not ours, init_transactions with its
 *      transactional id (its open transaction is aborted, its later
 *      commits refused, and one being committed completes first);
 *   3. claim: record our producer as the slot's (UPDATE ... WHERE
 *      epoch = ours), only while our producer is ready: any later making
 *      of it opens every slot again;
 *   4. read the slot's markers (read_committed) in the checkpoint's
 *      partition from its offset to the partition's end when the read
 *      began (waiting for a transaction open then), skipping other
 *      slots': every marker found is a task published and committed
 *      whose delivery the DB may not show yet, and it is recorded
 *      delivered (the usual, fenced and idempotent, DB update and Redis
 *      cleanup) instead of being fired again;
 *   5. switch: once they are recorded, move the checkpoint to our
 *      partition, at its end as step 4 saw it (UPDATE ... WHERE epoch =
 *      ours AND eos_txid = ours), unless it is there already.
 *
 * A slot handed over after a full drain clears its producer from the
 * record first (eos_release), so the next owner fences nobody; a dead or
 * stopped owner's producer is fenced. The checkpoint moves past a
 * transaction's markers once every task of the slot in it, and in every
 * earlier one, is recorded in the DB, and with nothing of the slot
 * unrecorded, to the end of our last commit.
 *
 * Threads: librdkafka's transactional calls block. The producer's thread
 * runs the producer (make it, one transaction at a time); a second thread
 * runs the opens' fences and marker reads, several slots per command.
 * Both work on copies and post results to the loop through a mailbox;
 * neither touches a wtask or the worker.
 */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cfg.h"
#include "crashpoint.h"
#include "daemon.h"
#include "db.h"
#include "hmap.h"
#include "kafka.h"
#include "log.h"
#include "mailbox.h"
#include "marker.h"
#include "metrics.h"
#include "schema.h"
#include "slot.h"
#include "worker.h"
#include "xmalloc.h"

#define EOS_TXN_TIMEOUT_MS 10000
#define EOS_READ_TIMEOUT_MS 30000
#define EOS_RETRY_MS 1000
#define EOS_CKPT_MS 500
#define EOS_TXID_MAX 512

enum eos_state {
	ES_OFF,	     /* not owned */
	ES_WAIT,     /* owned; tasks of an earlier ownership still held */
	ES_READ,     /* 1: raising the DB fence, reading the slot's record */
	ES_FENCE,    /* 2: fencing the slot's last producer */
	ES_CLAIM,    /* 3: recording ours as the slot's producer */
	ES_OPENING,  /* 4: reading the markers */
	ES_APPLYING, /* markers found are being recorded delivered */
	ES_SWITCH,   /* 5: the checkpoint moving to our partition */
	ES_READY,    /* claims may go out */
};

enum prod_state {
	PS_DOWN,   /* no producer (retry_at: make it) */
	PS_MAKING, /* init_transactions out */
	PS_READY,
};

enum cmd_kind { CMD_MAKE, CMD_SEND, CMD_FENCE, CMD_READ };

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
	int slot;
	unsigned gen;	 /* the slot's ownership when queued */
	int64_t moff;	 /* out: the marker's offset */
	struct wtask *t; /* the loop's: the threads never read it */
};

/* One slot's part of a fence or read command. */
struct eos_part {
	int slot;
	unsigned gen, oseq;
	char prev[EOS_TXID_MAX]; /* fence: the producer to fence */
	int part;		 /* read: the partition of the checkpoint */
	int64_t from;		 /* read: the next marker offset, -1: all */
	/* results */
	int status;
	char err[512];
	struct marker *found;
	size_t nfound, capfound;
	size_t bad;   /* undecodable markers */
	int64_t end;  /* the partition's end */
	int64_t mend; /* our partition's end */
};

struct eos_cmd {
	enum cmd_kind kind;
	unsigned pgen; /* make, send: the producer's making */
	struct eos_rec *recs;
	size_t n;
	struct eos_part *parts;
	size_t nparts;
	/* results */
	int status;
	int fatal;
	char err[512];
	int64_t took_ms; /* on the thread */
	struct eos_cmd *next;
};

/* A committed transaction's part of one slot: the checkpoint passes it
 * once its tasks (left) are recorded in the DB, and every earlier one's. */
struct eos_batch {
	int64_t end;
	size_t left;
	struct eos_batch *next;
};

struct eos;

/* A thread running one command at a time from its queue. */
struct eos_thread {
	struct eos *e;
	void (*run)(struct eos *e, struct eos_cmd *c);
	pthread_t th;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct eos_cmd *q, *qtail;
	int quit;
};

struct eos_slot {
	int slot;
	enum eos_state state;
	unsigned gen; /* the ownership: gained, lost */
	unsigned
		oseq; /* the open: a step's result of an earlier one is stale */
	int posted;   /* this step's job or command is out */
	struct eos_rec *pend;
	size_t npend, cappend;
	struct eos_batch *head, *tail;
	char prev[EOS_TXID_MAX]; /* read: the slot's last producer, not ours */
	int rpart;		 /* read: the partition of the checkpoint */
	int rours;		 /* ... and it is recorded as ours */
	int64_t from;		 /* read: the checkpoint, -1: none */
	int64_t switch_to;	 /* our partition's end when the markers were
				  * read: the checkpoint once they are recorded */
	int fenced;		 /* this open fenced prev */
	int claimed;		 /* our producer is recorded as the slot's */
	int been_ready;		 /* ready since the gain */
	int clearing, cleared;	 /* handover: taking it out of the record */
	int64_t ckpt;		 /* in the DB as we know it, -1: none */
	int64_t ckpt_want;	 /* where the recorded transactions end */
	int ckpt_writing;
	size_t applying; /* markers being recorded */
	int64_t retry_at_ms;
	int64_t opened_ms; /* when it started opening (monotonic) */
};

struct eos {
	struct worker *w;
	const struct cfg *cfg;
	char topic[KAFKA_TOPIC_NAME_MAX + 1];
	char txn_id[EOS_TXID_MAX];
	int nparts;
	int mpart;	       /* our markers' partition */
	int64_t committed_end; /* past our last committed marker there */
	int interval_ms;
	size_t max_records;
	struct mailbox *mb;
	struct event *tick;
	struct eos_slot *slots;
	int n;
	int64_t last_ckpt_ms;
	size_t queued; /* records pending or out, every slot */
	/* the producer */
	enum prod_state ps;
	unsigned pgen;
	int sending;	      /* a transaction is out */
	int64_t last_send_ms; /* when the last one started (monotonic) */
	int64_t prod_retry_at_ms;
	unsigned rr;	       /* the slot a transaction starts gathering at */
	struct kafka_txn *txn; /* the producer thread's only */
	struct eos_thread prod, aux;
};

/* The threads --------------------------------------------------------- */

static void
run_make(struct eos *e, struct eos_cmd *c)
{
	kafka_txn_destroy(e->txn);
	/* Fences an earlier instance of ours (a producer made again after a
	 * fatal error): its open transaction is aborted. */
	e->txn = kafka_txn_create(e->cfg, e->txn_id, EOS_TXN_TIMEOUT_MS, c->err,
				  sizeof(c->err));
	c->status = e->txn != NULL ? 0 : -1;
}

static void
run_send(struct eos *e, struct eos_cmd *c)
{
	struct kafka_rec *kr;
	size_t n = c->n;

	if (e->txn == NULL) {
		snprintf(c->err, sizeof(c->err), "no producer");
		c->status = -1;
		c->fatal = 1;
		for (size_t i = 0; i < n; i++) {
			rd_kafka_headers_destroy(c->recs[i].hdrs);
			c->recs[i].hdrs = NULL;
		}
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
		kr[n + i].pin_partition = e->mpart;
		kr[n + i].key = r->id;
		kr[n + i].keylen = strlen(r->id);
		kr[n + i].value = r->marker;
		kr[n + i].valuelen = r->markerlen;
	}
	c->status =
		kafka_txn_send(e->txn, e->topic, kr, 2 * n, EOS_TXN_TIMEOUT_MS,
			       &c->fatal, c->err, sizeof(c->err));
	if (c->status == 0 && FAULTPOINT("eos_commit_unknown")) {
		/* Committed, as if its answer were lost: an outcome unknown
		 * to us (test builds only). */
		snprintf(c->err, sizeof(c->err),
			 "fault point eos_commit_unknown");
		c->status = -1;
		c->fatal = 1;
	}
	for (size_t i = 0; i < n; i++) {
		c->recs[i].hdrs = NULL; /* taken over */
		c->recs[i].moff = kr[n + i].offset;
	}
	if (c->fatal) {
		kafka_txn_destroy(e->txn);
		e->txn = NULL;
	}
	xfree(kr);
}

static void
run_prod(struct eos *e, struct eos_cmd *c)
{
	if (c->kind == CMD_MAKE)
		run_make(e, c);
	else
		run_send(e, c);
}

/* Making a producer with another's transactional id fences that one; the
 * handle is not kept. One fence per id serves every part of the command
 * (each part's record was read before the command was posted). */
static void
run_fence(struct eos *e, struct eos_cmd *c)
{
	for (size_t i = 0; i < c->nparts; i++) {
		struct eos_part *p = &c->parts[i];
		struct kafka_txn *t;
		size_t k;

		for (k = 0; k < i; k++)
			if (!strcmp(c->parts[k].prev, p->prev))
				break;
		if (k < i) {
			p->status = c->parts[k].status;
			memcpy(p->err, c->parts[k].err, sizeof(p->err));
			continue;
		}
		t = kafka_txn_create(e->cfg, p->prev, EOS_TXN_TIMEOUT_MS,
				     p->err, sizeof(p->err));
		p->status = t != NULL ? 0 : -1;
		kafka_txn_destroy(t);
	}
}

struct found_acc {
	struct eos_part **by_slot; /* [slot]: the part reading its markers */
	struct eos_part **by_part; /* [partition]: a part reading it */
	int nslots, nparts;
};

/* A marker of a slot being read, from its part's checkpoint on; markers
 * of other slots (a partition is shared by the workers that hash to it,
 * and a worker's holds every slot it owned) are skipped. */
static void
found_cb(const rd_kafka_message_t *m, void *arg)
{
	struct found_acc *fa = arg;
	struct eos_part *p;
	struct marker mk;

	if (m->partition < 0 || m->partition >= fa->nparts ||
	    fa->by_part[m->partition] == NULL)
		return;
	if (marker_decode(m->key, m->key_len, m->payload, m->len, &mk) < 0) {
		fa->by_part[m->partition]->bad++;
		return;
	}
	p = fa->by_slot[slot_of(mk.id, strlen(mk.id), fa->nslots)];
	if (p == NULL || p->part != m->partition || m->offset < p->from)
		return;
	if (p->nfound == p->capfound) {
		p->capfound = p->capfound ? p->capfound * 2 : 64;
		p->found = xrealloc(p->found, p->capfound * sizeof(*p->found));
	}
	p->found[p->nfound++] = mk;
}

/* The markers of every part's slot, in one read; our partition's end
 * comes with it (read_committed, each partition to its end when the read
 * starts: a transaction open then is waited for). */
static void
run_read(struct eos *e, struct eos_cmd *c)
{
	struct found_acc fa = {NULL, NULL, e->n, e->nparts};
	int64_t *from, *ends = NULL;
	int nends = 0, rc;

	from = xcalloc((size_t)e->nparts, sizeof(*from));
	fa.by_slot = xcalloc((size_t)e->n, sizeof(*fa.by_slot));
	fa.by_part = xcalloc((size_t)e->nparts, sizeof(*fa.by_part));
	for (int i = 0; i < e->nparts; i++)
		from[i] = -1;
	for (size_t i = 0; i < c->nparts; i++) {
		struct eos_part *p = &c->parts[i];
		int64_t f = p->from < 0 ? 0 : p->from;

		if (from[p->part] < 0 || f < from[p->part])
			from[p->part] = f;
		fa.by_slot[p->slot] = p;
		fa.by_part[p->part] = p;
	}
	rc = kafka_read_committed(e->cfg, e->topic, from, e->nparts, found_cb,
				  &fa, &ends, &nends, EOS_READ_TIMEOUT_MS,
				  c->err, sizeof(c->err));
	for (size_t i = 0; i < c->nparts; i++) {
		struct eos_part *p = &c->parts[i];

		p->status = rc;
		if (rc < 0) {
			snprintf(p->err, sizeof(p->err), "%s", c->err);
		} else {
			p->end = p->part < nends ? ends[p->part] : -1;
			p->mend = e->mpart < nends ? ends[e->mpart] : -1;
			if (p->mend < 0) {
				p->status = -1;
				snprintf(p->err, sizeof(p->err),
					 "no end of partition %d", e->mpart);
			}
		}
	}
	xfree(ends);
	xfree(fa.by_part);
	xfree(fa.by_slot);
	xfree(from);
}

static void
run_aux(struct eos *e, struct eos_cmd *c)
{
	if (c->kind == CMD_FENCE)
		run_fence(e, c);
	else
		run_read(e, c);
}

static void *
thread_main(void *arg)
{
	struct eos_thread *th = arg;

	for (;;) {
		struct eos_cmd *c;
		int64_t t0;

		pthread_mutex_lock(&th->mu);
		while (th->q == NULL && !th->quit)
			pthread_cond_wait(&th->cv, &th->mu);
		c = th->q;
		if (c != NULL) {
			th->q = c->next;
			if (th->q == NULL)
				th->qtail = NULL;
		}
		pthread_mutex_unlock(&th->mu);
		if (c == NULL)
			break;
		t0 = clock_mono_ms();
		th->run(th->e, c);
		c->took_ms = clock_mono_ms() - t0;
		mailbox_post(th->e->mb, c);
	}
	return NULL;
}

static void
thread_start(struct eos *e, struct eos_thread *th,
	     void (*run)(struct eos *, struct eos_cmd *), const char *what)
{
	th->e = e;
	th->run = run;
	pthread_mutex_init(&th->mu, NULL);
	pthread_cond_init(&th->cv, NULL);
	if (pthread_create(&th->th, NULL, thread_main, th) != 0)
		log_fatal("exactly-once: no thread", "thread=%s", what);
	th->started = 1;
}

static void
thread_stop(struct eos_thread *th)
{
	pthread_mutex_lock(&th->mu);
	th->quit = 1;
	pthread_cond_signal(&th->cv);
	pthread_mutex_unlock(&th->mu);
	if (th->started)
		pthread_join(th->th, NULL);
	pthread_mutex_destroy(&th->mu);
	pthread_cond_destroy(&th->cv);
}

static void
post_cmd(struct eos_thread *th, struct eos_cmd *c)
{
	pthread_mutex_lock(&th->mu);
	c->next = NULL;
	if (th->qtail != NULL)
		th->qtail->next = c;
	else
		th->q = c;
	th->qtail = c;
	pthread_cond_signal(&th->cv);
	pthread_mutex_unlock(&th->mu);
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
	for (size_t i = 0; i < c->nparts; i++)
		xfree(c->parts[i].found);
	xfree(c->parts);
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
		firing_publishing_done(w, 1);
		wtask_release(w, t);
	}
	e->queued -= s->npend;
	s->npend = 0;
}

/* One transaction out at a time, with what the ready slots gathered,
 * started at least interval_ms after the one before (tasks gather
 * meanwhile) unless max_records are waiting. */
static void
send_pending(struct eos *e)
{
	struct eos_cmd *c;
	size_t total = 0, n = 0;
	int64_t now;

	if (e->sending || e->ps != PS_READY)
		return;
	for (int i = 0; i < e->n; i++)
		if (e->slots[i].state == ES_READY)
			total += e->slots[i].npend;
	if (total == 0)
		return;
	now = clock_mono_ms();
	if (total < e->max_records && now - e->last_send_ms < e->interval_ms)
		return;
	e->last_send_ms = now;
	if (total > e->max_records)
		total = e->max_records;
	c = xcalloc(1, sizeof(*c));
	c->kind = CMD_SEND;
	c->pgen = e->pgen;
	c->recs = xcalloc(total, sizeof(*c->recs));
	for (int k = 0; k < e->n && n < total; k++) {
		struct eos_slot *s =
			&e->slots[(e->rr + (unsigned)k) % (unsigned)e->n];
		size_t take;

		if (s->state != ES_READY || s->npend == 0)
			continue;
		take = s->npend < total - n ? s->npend : total - n;
		memcpy(c->recs + n, s->pend, take * sizeof(*s->pend));
		memmove(s->pend, s->pend + take,
			(s->npend - take) * sizeof(*s->pend));
		s->npend -= take;
		n += take;
	}
	e->rr++;
	c->n = n;
	e->sending = 1;
	post_cmd(&e->prod, c);
}

static void
make_producer(struct eos *e)
{
	struct eos_cmd *c = xcalloc(1, sizeof(*c));

	c->kind = CMD_MAKE;
	c->pgen = ++e->pgen;
	e->ps = PS_MAKING;
	post_cmd(&e->prod, c);
}

/* DB steps -------------------------------------------------------------- */

enum slot_job_kind { SJ_READ, SJ_CLAIM, SJ_CLEAR, SJ_CKPT, SJ_SWITCH };

struct slot_job {
	struct db_job job;
	struct eos *e;
	enum slot_job_kind kind;
	int slot;
	unsigned gen, oseq;
	int64_t epoch;
	char txid[EOS_TXID_MAX]; /* claim, clear: ours; read: the slot's */
	int64_t offset;	  /* ckpt, switch: to write; read: the checkpoint */
	int part;	  /* ckpt, switch: ours; read: the checkpoint's */
	int legacy;	  /* read: no partition recorded (the slot's own) */
	int64_t db_epoch; /* read */
	unsigned long long affected;
};

static int
read_run(struct db_conn *c, struct slot_job *j)
{
	struct db_params p;
	struct db_rows r = {0};
	const char *tx;
	int rc;

	if (coord_db_fence(c, j->slot, j->epoch) < 0)
		return -1;
	db_params_init(&p, 1);
	db_params_int(&p, j->slot);
	rc = db_query(c, SQL_EOS_SLOT_GET, &p, &r);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	j->db_epoch = 0;
	j->offset = -1;
	j->txid[0] = '\0';
	/* No partition recorded: the slot's own, where workers before
	 * migration 11 wrote its markers. */
	j->part = j->slot;
	j->legacy = 1;
	if (r.nrows == 1) {
		j->db_epoch = db_rows_int(&r, 0, 0);
		j->offset = db_rows_get(&r, 0, 1, NULL) != NULL
				    ? db_rows_int(&r, 0, 1)
				    : -1;
		tx = db_rows_get(&r, 0, 2, NULL);
		if (tx != NULL)
			snprintf(j->txid, sizeof(j->txid), "%s", tx);
		if (db_rows_get(&r, 0, 3, NULL) != NULL) {
			j->part = (int)db_rows_int(&r, 0, 3);
			j->legacy = 0;
		}
	}
	db_rows_free(&r);
	return 0;
}

static int
slot_job_run(struct db_conn *c, struct db_job *job)
{
	struct slot_job *j = (struct slot_job *)job;
	struct db_params p;
	int rc;

	if (j->kind == SJ_READ)
		return read_run(c, j);
	db_params_init(&p, 6);
	switch (j->kind) {
	case SJ_CLAIM:
		db_params_str(&p, j->txid);
		db_params_int(&p, clock_now_ms());
		db_params_int(&p, j->slot);
		db_params_int(&p, j->epoch);
		rc = db_exec(c, SQL_EOS_CLAIM, &p, &j->affected);
		break;
	case SJ_CLEAR:
		db_params_int(&p, clock_now_ms());
		db_params_int(&p, j->slot);
		db_params_int(&p, j->epoch);
		db_params_str(&p, j->txid);
		rc = db_exec(c, SQL_EOS_CLEAR, &p, &j->affected);
		break;
	case SJ_SWITCH:
		db_params_int(&p, j->part);
		db_params_int(&p, j->offset);
		db_params_int(&p, clock_now_ms());
		db_params_int(&p, j->slot);
		db_params_int(&p, j->epoch);
		db_params_str(&p, j->txid);
		rc = db_exec(c, SQL_EOS_SWITCH, &p, &j->affected);
		break;
	default:
		db_params_int(&p, j->offset);
		db_params_int(&p, clock_now_ms());
		db_params_int(&p, j->slot);
		db_params_int(&p, j->epoch);
		db_params_int(&p, j->part);
		db_params_int(&p, j->offset);
		rc = db_exec(c, SQL_EOS_CKPT_SET, &p, &j->affected);
		break;
	}
	db_params_free(&p);
	return rc;
}

static void slot_job_done_cb(struct db_job *job, int status, const char *err);

static void
submit_job(struct eos *e, struct eos_slot *s, enum slot_job_kind kind,
	   int64_t offset)
{
	struct slot_job *j = xcalloc(1, sizeof(*j));

	j->e = e;
	j->kind = kind;
	j->slot = s->slot;
	j->gen = s->gen;
	j->oseq = s->oseq;
	j->epoch = e->w->slots[s->slot].epoch;
	j->offset = offset;
	j->part = e->mpart;
	if (kind == SJ_CLAIM || kind == SJ_CLEAR || kind == SJ_SWITCH)
		snprintf(j->txid, sizeof(j->txid), "%s", e->txn_id);
	j->job.run = slot_job_run;
	j->job.done_cb = slot_job_done_cb;
	if (kind == SJ_CKPT)
		s->ckpt_writing = 1;
	else if (kind == SJ_CLEAR)
		s->clearing = 1;
	else
		s->posted = 1;
	db_pool_submit(e->w->db, &j->job);
}

/* Opening ------------------------------------------------------------- */

static void
start_open(struct eos *e, struct eos_slot *s)
{
	s->oseq++;
	s->state = ES_READ;
	s->posted = 0;
	s->retry_at_ms = 0;
	s->fenced = 0;
	s->prev[0] = '\0';
	submit_job(e, s, SJ_READ, 0);
}

static void
retry_later(struct eos_slot *s)
{
	s->posted = 0;
	s->retry_at_ms = clock_mono_ms() + EOS_RETRY_MS;
}

static void
ready(struct eos *e, struct eos_slot *s)
{
	s->state = ES_READY;
	s->been_ready = 1;
	log_info("exactly-once slot ready", "slot=%d epoch=%lld took_ms=%lld",
		 s->slot, (long long)e->w->slots[s->slot].epoch,
		 (long long)(clock_mono_ms() - s->opened_ms));
	scanner_wake(e->w, s->slot);
}

/* Every marker the open read is recorded: the slot is ready, once its
 * checkpoint is in our partition (step 5). */
static void
opened(struct eos *e, struct eos_slot *s)
{
	if (s->rours) {
		ready(e, s);
		return;
	}
	s->state = ES_SWITCH;
	submit_job(e, s, SJ_SWITCH, s->switch_to);
}

static void
read_done(struct eos *e, struct eos_slot *s, struct slot_job *j)
{
	if (j->part < 0 || j->part >= e->nparts) {
		log_warn("exactly-once slot record names a partition the "
			 "marker topic does not have, will retry",
			 "slot=%d partition=%d partitions=%d", s->slot, j->part,
			 e->nparts);
		retry_later(s);
		return;
	}
	if (j->db_epoch > j->epoch) {
		/* A newer owner: the slot is lost soon (ZooKeeper says so). */
		log_warn("exactly-once slot fenced in the database",
			 "slot=%d epoch=%lld db_epoch=%lld", s->slot,
			 (long long)j->epoch, (long long)j->db_epoch);
		retry_later(s);
		return;
	}
	s->from = j->offset;
	s->rpart = j->part;
	s->rours = j->part == e->mpart && !j->legacy;
	s->ckpt = s->rours ? j->offset : -1;
	if (j->txid[0] != '\0' && strcmp(j->txid, e->txn_id) != 0) {
		snprintf(s->prev, sizeof(s->prev), "%s", j->txid);
		s->state = ES_FENCE;
	} else {
		s->state = ES_CLAIM;
	}
}

static void
slot_job_done_cb(struct db_job *job, int status, const char *err)
{
	struct slot_job *j = (struct slot_job *)job;
	struct eos *e = j->e;
	struct eos_slot *s = &e->slots[j->slot];
	int current = j->gen == s->gen && j->oseq == s->oseq;

	switch (j->kind) {
	case SJ_CKPT:
		s->ckpt_writing = 0;
		if (status == 0 && j->affected > 0 && j->gen == s->gen)
			s->ckpt = j->offset;
		else if (status < 0)
			log_warn(
				"exactly-once checkpoint not saved, will retry",
				"slot=%d offset=%lld error=\"%s\"", j->slot,
				(long long)j->offset, err);
		break;
	case SJ_CLEAR:
		s->clearing = 0;
		s->cleared = 1;
		if (status == 0 && j->affected > 0)
			s->claimed = 0;
		else
			log_warn("exactly-once producer not cleared from the "
				 "slot: the next owner fences it",
				 "slot=%d error=\"%s\"", j->slot,
				 status < 0 ? err : "not the slot's producer");
		coord_slot_idle(e->w, j->slot);
		break;
	case SJ_READ:
		if (!current)
			break;
		s->posted = 0;
		if (status < 0) {
			log_warn(
				"exactly-once slot record not read, will retry",
				"slot=%d error=\"%s\"", j->slot, err);
			retry_later(s);
			break;
		}
		read_done(e, s, j);
		break;
	case SJ_SWITCH:
		if (!current)
			break;
		s->posted = 0;
		if (status < 0) {
			log_warn("exactly-once checkpoint not moved to our "
				 "partition, will retry",
				 "slot=%d error=\"%s\"", j->slot, err);
			retry_later(s);
		} else if (j->affected == 0) {
			/* The DB fence moved on, or the record names another
			 * producer: read again. */
			start_open(e, s);
		} else {
			log_info("exactly-once checkpoint moved",
				 "slot=%d from_partition=%d partition=%d "
				 "offset=%lld",
				 j->slot, s->rpart, j->part,
				 (long long)j->offset);
			s->rpart = j->part;
			s->rours = 1;
			s->ckpt = j->offset;
			if (s->ckpt_want < j->offset)
				s->ckpt_want = j->offset;
			ready(e, s);
		}
		break;
	case SJ_CLAIM:
		if (status == 0 && j->affected > 0 && j->gen == s->gen)
			s->claimed = 1;
		if (!current)
			break;
		s->posted = 0;
		if (status < 0) {
			log_warn("exactly-once slot not claimed, will retry",
				 "slot=%d error=\"%s\"", j->slot, err);
			retry_later(s);
		} else if (j->affected == 0) {
			/* The DB fence moved on: read again (a newer owner's
			 * refuses us there). */
			start_open(e, s);
		} else if (slot_owned(e->w, j->slot)) {
			s->state = ES_OPENING;
		}
		/* A release began meanwhile: it clears the record. */
		if (!slot_owned(e->w, j->slot))
			coord_slot_idle(e->w, j->slot);
		break;
	}
	xfree(j);
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
apply_found(struct eos *e, struct eos_slot *s, struct eos_part *p,
	    int64_t took_ms)
{
	struct worker *w = e->w;
	struct wslot *ws = &w->slots[s->slot];
	struct eos_batch *b;
	size_t held = 0;

	scanner_drop_slot(w, s->slot);
	/* The checkpoint moves past what was read only in our partition;
	 * in another, it moves to ours once all is recorded (opened). */
	s->switch_to = p->mend;
	b = batch_add(s, s->rours ? p->end : -1, 1);
	for (size_t i = 0; i < p->nfound; i++) {
		const struct marker *m = &p->found[i];
		struct wtask *t = hmap_get(w->tasks, m->id);

		if (t != NULL) {
			/* Held by us: ours, published and on its way to the
			 * DB (its batch is earlier in the list), or waiting
			 * for a claim (dropped above): its own path decides. */
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
		 "slot=%d epoch=%lld txn_id=%s fenced=%s partition=%d "
		 "from=%lld end=%lld markers=%zu recording=%zu held=%zu "
		 "undecodable=%zu took_ms=%lld",
		 s->slot, (long long)ws->epoch, e->txn_id,
		 s->fenced ? s->prev : "-", p->part, (long long)p->from,
		 (long long)p->end, p->nfound, s->applying, held, p->bad,
		 (long long)took_ms);
	if (s->applying == 0)
		opened(e, s);
	else
		s->state = ES_APPLYING;
}

/* The fences or marker reads of a command, each for its slot's open if
 * that is still the one waiting for it. */
static void
parts_done(struct eos *e, struct eos_cmd *c)
{
	enum eos_state want = c->kind == CMD_FENCE ? ES_FENCE : ES_OPENING;

	for (size_t i = 0; i < c->nparts; i++) {
		struct eos_part *p = &c->parts[i];
		struct eos_slot *s = &e->slots[p->slot];

		if (p->gen != s->gen || p->oseq != s->oseq || s->state != want)
			continue;
		s->posted = 0;
		if (p->status < 0) {
			log_warn(want == ES_FENCE
					 ? "exactly-once: the slot's last "
					   "producer not fenced, will retry"
					 : "exactly-once slot not opened, will "
					   "retry",
				 "slot=%d txn_id=%s error=\"%s\"", p->slot,
				 want == ES_FENCE ? p->prev : e->txn_id,
				 p->err);
			retry_later(s);
		} else if (want == ES_FENCE) {
			log_info("exactly-once: the slot's last producer "
				 "fenced",
				 "slot=%d txn_id=%s took_ms=%lld", p->slot,
				 p->prev, (long long)c->took_ms);
			s->fenced = 1;
			s->state = ES_CLAIM;
		} else {
			apply_found(e, s, p, c->took_ms);
		}
	}
}

static void
clear_apply(const char *key, void *value, void *arg)
{
	struct wtask *t = value;

	(void)key;
	(void)arg;
	t->eos_apply = 0;
}

/*
 * The producer is gone (a transaction's outcome unknown, or it failed
 * for good): it is made again, which fences what it left, and every slot
 * opens again before it publishes with the new one. What was gathered
 * goes back (a lease brings it back); what is already committed is
 * found by its marker. Batches stay: tasks committed earlier are still
 * on their way to the DB, and the checkpoint must wait for them.
 */
static void
producer_lost(struct eos *e)
{
	e->ps = PS_DOWN;
	e->prod_retry_at_ms = 0;
	hmap_foreach(e->w->tasks, clear_apply, NULL);
	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];

		drop_pending(e, s);
		s->applying = 0;
		if (s->state == ES_OFF || s->state == ES_WAIT)
			continue;
		s->opened_ms = clock_mono_ms();
		if (slot_owned(e->w, i))
			start_open(e, s);
		else
			s->state = ES_WAIT;
	}
	make_producer(e);
}

static void
sent(struct eos *e, struct eos_cmd *c)
{
	struct worker *w = e->w;
	struct eos_batch **nb;

	e->sending = 0;
	firing_publishing_done(w, c->n);
	e->queued -= c->n;
	if (c->status == 0) {
		metric_inc(w->m.eos_txns);
		metric_add(w->m.eos_records, (double)c->n);
		metric_observe(w->m.eos_txn_seconds,
			       (double)c->took_ms / 1000.0);
		/* Each slot's part of it, after the slot's earlier ones. */
		nb = xcalloc((size_t)e->n, sizeof(*nb));
		for (size_t i = 0; i < c->n; i++) {
			struct eos_rec *r = &c->recs[i];
			struct eos_slot *s = &e->slots[r->slot];
			struct wtask *t = r->t;

			t->eb = NULL;
			if (r->gen == s->gen && s->state != ES_OFF) {
				if (nb[r->slot] == NULL)
					nb[r->slot] = batch_add(s, -1, 0);
				nb[r->slot]->left++;
				if (r->moff + 1 > nb[r->slot]->end)
					nb[r->slot]->end = r->moff + 1;
				t->eb = nb[r->slot];
			}
			if (r->moff + 1 > e->committed_end)
				e->committed_end = r->moff + 1;
			firing_published(w, t);
		}
		xfree(nb);
		return;
	}
	/* Not committed (aborted), or not known: nothing of it is published
	 * as far as we can tell; each task stays in flight for a lease. An
	 * unknown outcome opens every slot again, which finds the markers of
	 * a commit that did go in. */
	metric_inc(w->m.eos_txn_failures);
	log_warn("exactly-once transaction failed",
		 "txn_id=%s tasks=%zu outcome=%s error=\"%s\"", e->txn_id, c->n,
		 c->fatal ? "unknown" : "aborted", c->err);
	for (size_t i = 0; i < c->n; i++) {
		metric_inc(w->m.publish_errors);
		wtask_release(w, c->recs[i].t);
	}
	if (c->fatal && c->pgen == e->pgen && e->ps == PS_READY)
		producer_lost(e);
}

static void
made(struct eos *e, struct eos_cmd *c)
{
	if (c->pgen != e->pgen || e->ps != PS_MAKING)
		return;
	if (c->status < 0) {
		log_warn("exactly-once producer not made, will retry",
			 "txn_id=%s error=\"%s\"", e->txn_id, c->err);
		e->ps = PS_DOWN;
		e->prod_retry_at_ms = clock_mono_ms() + EOS_RETRY_MS;
		return;
	}
	e->ps = PS_READY;
	log_info("exactly-once producer ready", "txn_id=%s took_ms=%lld",
		 e->txn_id, (long long)c->took_ms);
}

static void
result_cb(void *item, void *arg)
{
	struct eos *e = arg;
	struct eos_cmd *c = item;

	switch (c->kind) {
	case CMD_MAKE: made(e, c); break;
	case CMD_SEND: sent(e, c); break;
	case CMD_FENCE:
	case CMD_READ: parts_done(e, c); break;
	}
	/* The records by then gathered go at once. */
	send_pending(e);
	cmd_free(c);
}

static void
drop_cb(void *item, void *arg)
{
	(void)arg;
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
	/* Every marker of the slot up to our last commit is recorded, and
	 * the slot's later ones come after it: the checkpoint follows our
	 * partition's end even while the slot is idle (the partition holds
	 * every slot's markers, which a next owner would read through). */
	if (s->head == NULL && s->state == ES_READY && s->rours &&
	    e->committed_end > s->ckpt_want)
		s->ckpt_want = e->committed_end;
	if (s->ckpt_want > s->ckpt && !s->ckpt_writing)
		submit_job(e, s, SJ_CKPT, s->ckpt_want);
}

/* The slots in state whose step is not out, as parts of one command. */
static void
post_parts(struct eos *e, enum eos_state state, enum cmd_kind kind)
{
	struct eos_cmd *c = NULL;

	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];
		struct eos_part *p;

		if (s->state != state || s->posted || s->retry_at_ms != 0 ||
		    !slot_owned(e->w, i))
			continue;
		if (c == NULL) {
			c = xcalloc(1, sizeof(*c));
			c->kind = kind;
			c->parts = xcalloc((size_t)e->n, sizeof(*c->parts));
		}
		p = &c->parts[c->nparts++];
		p->slot = i;
		p->gen = s->gen;
		p->oseq = s->oseq;
		snprintf(p->prev, sizeof(p->prev), "%s", s->prev);
		p->part = s->rpart;
		p->from = s->from;
		s->posted = 1;
	}
	if (c != NULL)
		post_cmd(&e->aux, c);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eos *e = arg;
	int64_t now = clock_mono_ms();
	int ckpt = now - e->last_ckpt_ms >= EOS_CKPT_MS;

	(void)fd;
	(void)what;
	if (ckpt)
		e->last_ckpt_ms = now;
	if (e->ps == PS_DOWN && now >= e->prod_retry_at_ms)
		make_producer(e);
	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];
		int owned = slot_owned(e->w, i);

		if (s->state == ES_OFF)
			continue;
		if (ckpt && (s->state == ES_READY || s->state == ES_APPLYING))
			advance(e, s);
		/* A slot being handed over makes no step (eos_release). */
		if (!owned || s->posted)
			continue;
		if (s->retry_at_ms != 0) {
			if (now < s->retry_at_ms)
				continue;
			s->retry_at_ms = 0;
			if (s->state == ES_READ)
				start_open(e, s);
		}
		if (s->state == ES_WAIT && e->w->slots[i].busy == 0)
			start_open(e, s);
		else if (s->state == ES_CLAIM && e->ps == PS_READY)
			/* Our producer was made before this: a later making
			 * opens the slot again. */
			submit_job(e, s, SJ_CLAIM, 0);
		else if (s->state == ES_SWITCH)
			submit_job(e, s, SJ_SWITCH, s->switch_to);
	}
	post_parts(e, ES_FENCE, CMD_FENCE);
	post_parts(e, ES_OPENING, CMD_READ);
	send_pending(e);
}

/* The API ------------------------------------------------------------- */

int
eos_enabled(const struct worker *w)
{
	return w->eos != NULL;
}

void
eos_start(struct worker *w)
{
	struct eos *e;
	char root[200], id[160], err[512];
	struct timeval tv;

	if (!cfg_int(w->cfg, CFG_KAFKA_EXACTLY_ONCE))
		return;
	e = xcalloc(1, sizeof(*e));
	e->w = w;
	e->cfg = w->cfg;
	marker_kafka_name(root, sizeof(root),
			  cfg_str(w->cfg, CFG_CLUSTER_ROOT));
	if (root[0] == '\0')
		snprintf(root, sizeof(root), "prophet");
	marker_kafka_name(id, sizeof(id), w->id);
	/* Unique to this process: a restarted worker of the same id is not
	 * fenced by the next owner of a slot its predecessor held. */
	snprintf(e->txn_id, sizeof(e->txn_id), "%s.worker.%s.%llx", root, id,
		 (unsigned long long)clock_now_ms());
	if (marker_topic(e->topic, sizeof(e->topic),
			 cfg_str(w->cfg, CFG_KAFKA_EOS_TOPIC), w->topic_prefix,
			 cfg_str(w->cfg, CFG_CLUSTER_ROOT)) < 0)
		log_fatal("exactly-once: the marker topic's name is too long "
			  "(name kafka.eos_topic)",
			  "prefix=%s root=%s", w->topic_prefix, root);
	e->interval_ms = (int)cfg_int(w->cfg, CFG_KAFKA_EOS_INTERVAL_MS);
	e->max_records = (size_t)cfg_int(w->cfg, CFG_KAFKA_EOS_MAX_RECORDS);
	/* Before anything is fired: the marker topic has a partition per
	 * slot (where workers before migration 11 wrote each slot's
	 * markers, and a slot's record without a partition still points). */
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
	/* Ours: configured, or by the worker id (the same after a restart;
	 * workers of other ids mostly elsewhere). Sharing one is correct:
	 * a read waits for what is open when it starts and skips the
	 * markers of other slots. */
	e->mpart = (int)cfg_int(w->cfg, CFG_KAFKA_EOS_PARTITION);
	if (e->mpart < 0)
		e->mpart = slot_of(w->id, strlen(w->id), e->nparts);
	else if (e->mpart >= e->nparts)
		log_fatal("exactly-once: kafka.eos_partition is not a "
			  "partition of the marker topic",
			  "topic=%s partitions=%d eos_partition=%d", e->topic,
			  e->nparts, e->mpart);
	e->mb = mailbox_create(w->base, result_cb, drop_cb, e);
	e->n = w->nslots;
	e->slots = xcalloc((size_t)e->n, sizeof(*e->slots));
	for (int i = 0; i < e->n; i++) {
		e->slots[i].slot = i;
		e->slots[i].ckpt = -1;
		e->slots[i].rpart = -1;
	}
	thread_start(e, &e->prod, run_prod, "producer");
	thread_start(e, &e->aux, run_aux, "open");
	make_producer(e);
	e->tick = event_new(w->base, -1, EV_PERSIST, tick_cb, e);
	tv.tv_sec = 0;
	/* Often enough for the interval's next start and the opens' steps. */
	tv.tv_usec = (e->interval_ms > 0 && e->interval_ms < 5 ? e->interval_ms
							       : 5) *
		     1000;
	event_add(e->tick, &tv);
	w->eos = e;
	log_info("exactly-once publishing",
		 "topic=%s partitions=%d partition=%d txn_id=%s "
		 "interval_ms=%d max_records=%zu",
		 e->topic, e->nparts, e->mpart, e->txn_id, e->interval_ms,
		 e->max_records);
}

void
eos_stop(struct worker *w)
{
	struct eos *e = w->eos;

	if (e == NULL)
		return;
	thread_stop(&e->prod);
	thread_stop(&e->aux);
	kafka_txn_destroy(e->txn);
	for (int i = 0; i < e->n; i++) {
		struct eos_slot *s = &e->slots[i];

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
	s->posted = 0;
	s->ckpt_want = -1;
	s->claimed = 0;
	s->been_ready = 0;
	s->clearing = 0;
	s->cleared = 0;
	s->opened_ms = clock_mono_ms();
	batches_free(s);
	/* Tasks this worker still holds from an earlier ownership of the
	 * slot (on their way to the DB, or claims of then, which are not
	 * published now) finish first: the markers are then read with
	 * nothing of the slot held, and each is recorded. */
	s->state = ES_WAIT;
	if (w->slots[slot].busy == 0)
		start_open(e, s);
}

static void
forget_batch(const char *key, void *value, void *arg)
{
	struct wtask *t = value;
	int *slot = arg;

	(void)key;
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

	if (e == NULL)
		return;
	s = &e->slots[slot];
	if (s->state == ES_OFF)
		return;
	s->gen++;
	s->state = ES_OFF;
	s->posted = 0; /* a result still out is stale now */
	s->applying = 0;
	drop_pending(e, s);
	hmap_foreach(w->tasks, forget_batch, &slot);
	batches_free(s);
}

int
eos_release(struct worker *w, int slot, int drained)
{
	struct eos *e = w->eos;
	struct eos_slot *s;

	if (e == NULL)
		return 1;
	s = &e->slots[slot];
	if (s->state == ES_OFF || !drained)
		return 1; /* the next owner fences our producer */
	/* A claim still out may record us after a clear: it comes first. */
	if (s->posted && s->state == ES_CLAIM)
		return 0;
	if (!s->claimed || s->cleared)
		return 1;
	if (!s->clearing)
		submit_job(e, s, SJ_CLEAR, 0);
	return 0;
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

	if (s->state == ES_OFF || !s->been_ready || !slot_holds(w, t)) {
		/* Lost while it waited (claimed early, or a claim reply that
		 * came back after the slot was lost, maybe gained again
		 * since, at the same epoch after a lost session too: nothing
		 * of this ownership is claimed before it is first ready): the
		 * slot's owner has it in flight. A task of this ownership
		 * waits while the slot opens again. */
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
	r->slot = t->slot;
	r->gen = s->gen;
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
	send_pending(e);
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
			opened(e, s);
	}
}
