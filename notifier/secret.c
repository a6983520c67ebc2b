#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "db.h"
#include "log.h"
#include "notifier.h"
#include "schema.h"
#include "xmalloc.h"

/*
 * The key retry tasks are signed with, a row the manager creates at its
 * start (manager/guard.c). The notifier only reads it: until it is there
 * (the DB is down, or no manager ran yet) nothing is consumed, since no
 * retry could be submitted nor one checked.
 */

#define SECRET_RETRY_MS 1000

struct secret_job {
	struct db_job job;
	struct notifier *n;
	unsigned char key[CALLBACK_KEY_LEN];
	int found;
};

static int
secret_run(struct db_conn *c, struct db_job *job)
{
	struct secret_job *j = (struct secret_job *)job;
	struct db_params p;
	struct db_rows rows;
	unsigned long len = 0;
	const char *v;
	int rc;

	db_params_init(&p, 1);
	db_params_str(&p, CALLBACK_KEY_NAME);
	rc = db_query(c, SQL_SECRET_GET, &p, &rows);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	v = rows.nrows ? db_rows_get(&rows, 0, 0, &len) : NULL;
	if (v != NULL && len == sizeof(j->key)) {
		memcpy(j->key, v, sizeof(j->key));
		j->found = 1;
	}
	db_rows_free(&rows);
	return 0;
}

static void
secret_done_cb(struct db_job *job, int status, const char *err)
{
	struct secret_job *j = (struct secret_job *)job;
	struct notifier *n = j->n;
	struct timeval tv = {SECRET_RETRY_MS / 1000, 0};
	char cerr[512];

	if (status == 0 && j->found) {
		memcpy(n->retry_key, j->key, sizeof(n->retry_key));
		n->have_key = 1;
		xfree(j);
		log_info("cluster secret read", "tries=%d", n->secret_tries);
		if (n->stopping)
			return;
		if (consume_start(n, cerr, sizeof(cerr)) < 0)
			log_fatal("kafka consumer", "error=\"%s\"", cerr);
		return;
	}
	if (n->secret_tries == 1 || n->secret_tries % 30 == 0)
		log_warn("waiting for the cluster secret (a manager creates it "
			 "at start); not consuming yet",
			 "tries=%d error=\"%s\"", n->secret_tries,
			 status < 0 ? err : "no row in cluster_secret");
	xfree(j);
	if (!n->stopping)
		evtimer_add(n->secret_ev, &tv);
}

static void
secret_try_cb(evutil_socket_t fd, short what, void *arg)
{
	struct notifier *n = arg;
	struct secret_job *j = xcalloc(1, sizeof(*j));

	n->secret_tries++;
	j->n = n;
	j->job.run = secret_run;
	j->job.done_cb = secret_done_cb;
	db_pool_submit(n->db, &j->job);
}

void
secret_start(struct notifier *n)
{
	n->secret_ev = evtimer_new(n->base, secret_try_cb, n);
	secret_try_cb(-1, 0, n);
}

void
secret_stop(struct notifier *n)
{
	if (n->secret_ev != NULL)
		event_free(n->secret_ev);
	n->secret_ev = NULL;
}
