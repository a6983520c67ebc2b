/*
 * The failover scenario: prophet-bench runs workers of its own, keeps a
 * paced stream of tasks firing, kills one worker with SIGKILL and measures
 * how long until the new owners of its slots publish, from the prophet-slot
 * and prophet-epoch headers of the output topic.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "xmalloc.h"

#define FO_MAX_WORKERS 16

struct fo_worker {
	char id[112];
	pid_t pid; /* 0: not running */
	int port;
	int starts;
};

struct fo_slot {
	/* From /v1/cluster (main thread only). */
	char owner[112];
	int requested;
	int64_t epoch;
	/* From the output topic (under failover.mu). */
	int64_t seen_epoch; /* highest prophet-epoch seen */
	int waiting;	    /* its owner was killed in this round */
	int64_t old_epoch;
	int64_t new_fired_ms; /* earliest fired-at with a higher epoch */
	/* Main thread: first poll showing a higher epoch (0: none yet). */
	int64_t reassigned_ms;
};

struct failover {
	const struct bench_opts *o;
	struct fo_worker w[FO_MAX_WORKERS];
	int nw;
	struct fo_slot *slot;
	int nslots;
	char master[112];
	struct httpc *api;
	pthread_mutex_t mu;
	char phase[160]; /* under mu */
	struct ledger *l;
	struct submitter *s;
	long sent_final;
};

/* ---------------------------------------------------------- processes --- */

static int
free_port(void)
{
	struct sockaddr_in a = {0};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/*
 * fork+exec of one worker with a fixed argv. The child gets a process
 * group of its own (a Ctrl-C on the terminal reaches only the bench, which
 * stops its workers itself) and dies with the bench (PR_SET_PDEATHSIG).
 * Only async-signal-safe calls between fork and exec: the bench has threads.
 */
static int
worker_spawn(struct failover *f, struct fo_worker *w)
{
	const struct bench_opts *o = f->o;
	char set_id[160], set_listen[64], set_zk[64], logpath[512];
	const char *argv[8 + 2 * 32 + 1];
	pid_t parent = getpid(), pid;
	int argc = 0, logfd, nullfd;

	w->port = free_port();
	if (w->port < 0) {
		note("failover: no free port: %s", strerror(errno));
		return -1;
	}
	snprintf(set_id, sizeof(set_id), "worker.id=%s", w->id);
	snprintf(set_listen, sizeof(set_listen),
		 "worker.http_listen=127.0.0.1:%d", w->port);
	snprintf(set_zk, sizeof(set_zk), "zookeeper.session_timeout_ms=%ld",
		 o->session_timeout_ms);
	argv[argc++] = o->worker_bin;
	argv[argc++] = "-c";
	argv[argc++] = o->worker_conf;
	for (int i = 0; i < o->nworker_sets; i++) {
		argv[argc++] = "--set";
		argv[argc++] = o->worker_sets[i];
	}
	/* Last: they win over any --worker-set. */
	argv[argc++] = "--set";
	argv[argc++] = set_id;
	argv[argc++] = "--set";
	argv[argc++] = set_listen;
	argv[argc++] = "--set";
	argv[argc++] = set_zk;
	argv[argc] = NULL;

	if (o->worker_log_dir != NULL)
		snprintf(logpath, sizeof(logpath), "%s/%s.log",
			 o->worker_log_dir, w->id);
	else
		snprintf(logpath, sizeof(logpath), "/dev/null");
	logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (logfd < 0 || nullfd < 0) {
		note("failover: %s: %s", logpath, strerror(errno));
		if (logfd >= 0)
			close(logfd);
		if (nullfd >= 0)
			close(nullfd);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		dup2(nullfd, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(logfd);
	close(nullfd);
	if (pid < 0) {
		note("failover: fork: %s", strerror(errno));
		return -1;
	}
	w->pid = pid;
	w->starts++;
	return 0;
}

/* Notes a worker that exited on its own; -1 if any did. */
static int
workers_reap(struct failover *f)
{
	int rc = 0, status;

	for (int i = 0; i < f->nw; i++) {
		struct fo_worker *w = &f->w[i];

		if (w->pid <= 0 || waitpid(w->pid, &status, WNOHANG) != w->pid)
			continue;
		note("failover: worker %s (pid %d) exited on its own (%s "
		     "%d)%s%s",
		     w->id, (int)w->pid,
		     WIFSIGNALED(status) ? "signal" : "status",
		     WIFSIGNALED(status) ? WTERMSIG(status)
					 : WEXITSTATUS(status),
		     f->o->worker_log_dir ? "; log in " : "",
		     f->o->worker_log_dir ? f->o->worker_log_dir : "");
		w->pid = 0;
		rc = -1;
	}
	return rc;
}

static void
worker_kill9(struct fo_worker *w)
{
	kill(w->pid, SIGKILL);
	while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
		;
	w->pid = 0;
}

/* SIGTERM (a worker hands its slots back), SIGKILL after 15 s. */
static void
workers_stop(struct failover *f)
{
	int64_t deadline = clock_mono_us() + 15000000;
	int left;

	for (int i = 0; i < f->nw; i++)
		if (f->w[i].pid > 0)
			kill(f->w[i].pid, SIGTERM);
	do {
		left = 0;
		for (int i = 0; i < f->nw; i++) {
			struct fo_worker *w = &f->w[i];

			if (w->pid <= 0)
				continue;
			if (waitpid(w->pid, NULL, WNOHANG) == w->pid)
				w->pid = 0;
			else
				left++;
		}
		if (left)
			usleep(50000);
	} while (left && clock_mono_us() < deadline);
	for (int i = 0; i < f->nw; i++)
		if (f->w[i].pid > 0)
			worker_kill9(&f->w[i]);
}

static struct fo_worker *
worker_by_id(struct failover *f, const char *id)
{
	for (int i = 0; i < f->nw; i++)
		if (!strcmp(f->w[i].id, id))
			return &f->w[i];
	return NULL;
}

/* ------------------------------------------------------------ cluster --- */

static void
copy_str(char *dst, size_t len, json_t *v)
{
	snprintf(dst, len, "%s", json_is_string(v) ? json_string_value(v) : "");
}

/* GET /v1/cluster into f->slot[] and f->master. */
static int
cluster_fetch(struct failover *f)
{
	char err[256];
	const char *resp;
	size_t rlen, i;
	json_t *j, *slots, *s;
	int status;

	status = httpc_request(f->api, "GET", "/v1/cluster", NULL, 0, &resp,
			       &rlen, err, sizeof(err));
	if (status != 200)
		return -1;
	j = json_loadb(resp, rlen, 0, NULL);
	slots = json_object_get(j, "slots");
	if (!json_is_array(slots) ||
	    json_array_size(slots) != (size_t)f->nslots) {
		note("failover: /v1/cluster has %zu slots, --slots is %d",
		     json_array_size(slots), f->nslots);
		json_decref(j);
		return -1;
	}
	copy_str(f->master, sizeof(f->master),
		 json_object_get(json_object_get(j, "master"), "id"));
	json_array_foreach (slots, i, s) {
		struct fo_slot *sl = &f->slot[i];

		copy_str(sl->owner, sizeof(sl->owner),
			 json_object_get(s, "owner"));
		sl->requested = json_is_string(json_object_get(s, "requested"));
		sl->epoch = json_integer_value(json_object_get(s, "epoch"));
	}
	json_decref(j);
	return 0;
}

/*
 * Every slot owned by a running worker of ours with no handover pending,
 * and each of them holding at least its share. With fired: the stream also
 * shows every slot's current epoch, so its owner is firing.
 */
static int
cluster_settled(struct failover *f, int fired)
{
	int owned[FO_MAX_WORKERS] = {0}, running = 0, ok = 1;

	for (int i = 0; i < f->nslots; i++) {
		struct fo_worker *w = worker_by_id(f, f->slot[i].owner);

		if (w == NULL || w->pid <= 0 || f->slot[i].requested)
			return 0;
		owned[w - f->w]++;
	}
	for (int i = 0; i < f->nw; i++)
		running += f->w[i].pid > 0;
	for (int i = 0; i < f->nw; i++)
		if (f->w[i].pid > 0 && owned[i] < f->nslots / running)
			return 0;
	if (!fired)
		return 1;
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < f->nslots; i++)
		if (f->slot[i].seen_epoch < f->slot[i].epoch)
			ok = 0;
	pthread_mutex_unlock(&f->mu);
	return ok;
}

static void set_phase(struct failover *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
set_phase(struct failover *f, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&f->mu);
	va_start(ap, fmt);
	vsnprintf(f->phase, sizeof(f->phase), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&f->mu);
}

/* Polls /v1/cluster until settled; -1 on timeout, stop or a dead worker. */
static int
wait_settled(struct failover *f, int fired, double timeout_s)
{
	int64_t deadline = clock_mono_us() + (int64_t)(timeout_s * 1e6);

	while (!bench_stop) {
		if (workers_reap(f) < 0)
			return -1;
		if (cluster_fetch(f) == 0 && cluster_settled(f, fired))
			return 0;
		if (clock_mono_us() > deadline) {
			note("failover: cluster not settled after %.0f s",
			     timeout_s);
			return -1;
		}
		usleep(200000);
	}
	return -1;
}

static int
sleep_s(double s)
{
	int64_t end = clock_mono_us() + (int64_t)(s * 1e6);

	while (!bench_stop && clock_mono_us() < end)
		usleep(50000);
	return bench_stop ? -1 : 0;
}

/* ------------------------------------------------------------ stream --- */

static void
msg_cb(void *arg, size_t seq, int64_t slot, int64_t epoch, int64_t fired_ms)
{
	struct failover *f = arg;
	struct fo_slot *s;

	(void)seq;
	if (slot < 0 || slot >= f->nslots || epoch < 0)
		return;
	s = &f->slot[slot];
	pthread_mutex_lock(&f->mu);
	if (epoch > s->seen_epoch)
		s->seen_epoch = epoch;
	if (s->waiting && epoch > s->old_epoch && fired_ms >= 0 &&
	    (s->new_fired_ms == 0 || fired_ms < s->new_fired_ms))
		s->new_fired_ms = fired_ms;
	pthread_mutex_unlock(&f->mu);
}

static void
progress_cb(void *arg, char *buf, size_t len)
{
	struct failover *f = arg;
	struct ledger *l = f->l;
	char phase[160];

	pthread_mutex_lock(&f->mu);
	memcpy(phase, f->phase, sizeof(phase));
	pthread_mutex_unlock(&f->mu);
	snprintf(buf, len,
		 "failover: %s | sent %ld accepted %ld received %ld "
		 "dups %ld",
		 phase, f->s ? submitter_sent(f->s) : f->sent_final,
		 atomic_load(&l->accepted), atomic_load(&l->received),
		 atomic_load(&l->dups));
}

/* ------------------------------------------------------------- rounds --- */

struct fo_result {
	double *failover_ms; /* kill -> first fire by the new owner */
	double *reassign_ms; /* kill -> new owner seen on /v1/cluster */
	size_t n, nre, cap;
	long timeouts;
	int rounds, master_kills;
	char per_kill[512]; /* max of each round, ms */
};

static void
result_add(struct fo_result *r, double fo, double re)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 64;
		r->failover_ms =
			xrealloc(r->failover_ms, r->cap * sizeof(double));
		r->reassign_ms =
			xrealloc(r->reassign_ms, r->cap * sizeof(double));
	}
	r->failover_ms[r->n++] = fo;
	if (re >= 0)
		r->reassign_ms[r->nre++] = re;
}

/*
 * One round: kill the victim, wait for a higher epoch of each of its slots
 * on the stream, restart it. Returns -1 if the scenario cannot go on.
 */
static int
round_run(struct failover *f, int k, struct fo_worker *v, struct fo_result *res)
{
	const struct bench_opts *o = f->o;
	double timeout_s = 30 + 3.0 * (double)o->session_timeout_ms / 1000;
	int64_t kill_ms, deadline;
	int nslots = 0, done = 0, was_master;
	double worst = 0;
	size_t len;

	if (cluster_fetch(f) < 0) {
		note("failover: GET /v1/cluster failed");
		return -1;
	}
	was_master = !strcmp(f->master, v->id);
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < f->nslots; i++) {
		struct fo_slot *s = &f->slot[i];

		s->waiting = !strcmp(s->owner, v->id);
		s->old_epoch = s->epoch;
		s->new_fired_ms = 0;
		s->reassigned_ms = 0;
		nslots += s->waiting;
	}
	kill_ms = now_us() / 1000;
	kill(v->pid, SIGKILL);
	pthread_mutex_unlock(&f->mu);
	while (waitpid(v->pid, NULL, 0) < 0 && errno == EINTR)
		;
	v->pid = 0;
	res->master_kills += was_master;
	note("failover: round %d/%d: killed %s%s, owner of %d slot(s)", k + 1,
	     o->kills, v->id, was_master ? " (the master)" : "", nslots);

	/* Until every slot of the victim fired under a new owner; polling
	 * /v1/cluster meanwhile to see when ZooKeeper had the new owner. */
	deadline = clock_mono_us() + (int64_t)(timeout_s * 1e6);
	while (!bench_stop && clock_mono_us() < deadline) {
		int fired = 0;

		if (cluster_fetch(f) == 0) {
			int64_t now = now_us() / 1000;

			for (int i = 0; i < f->nslots; i++) {
				struct fo_slot *s = &f->slot[i];

				if (s->waiting && !s->reassigned_ms &&
				    s->epoch > s->old_epoch)
					s->reassigned_ms = now;
			}
		}
		pthread_mutex_lock(&f->mu);
		for (int i = 0; i < f->nslots; i++)
			fired += f->slot[i].waiting &&
				 f->slot[i].new_fired_ms > 0;
		pthread_mutex_unlock(&f->mu);
		set_phase(f,
			  "round %d/%d: %s killed %.1f s ago, %d/%d slots "
			  "fired by a new owner",
			  k + 1, o->kills, v->id,
			  (double)(now_us() / 1000 - kill_ms) / 1e3, fired,
			  nslots);
		if (fired == nslots) {
			if (done++ == 5)
				break; /* 0.5 s more for earlier fires still
					  on the way in other partitions */
		}
		usleep(100000);
	}

	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < f->nslots; i++) {
		struct fo_slot *s = &f->slot[i];

		if (!s->waiting)
			continue;
		s->waiting = 0;
		if (s->new_fired_ms == 0) {
			res->timeouts++;
			continue;
		}
		result_add(res, (double)(s->new_fired_ms - kill_ms),
			   s->reassigned_ms
				   ? (double)(s->reassigned_ms - kill_ms)
				   : -1);
		if ((double)(s->new_fired_ms - kill_ms) > worst)
			worst = (double)(s->new_fired_ms - kill_ms);
	}
	pthread_mutex_unlock(&f->mu);
	res->rounds++;
	len = strlen(res->per_kill);
	snprintf(res->per_kill + len, sizeof(res->per_kill) - len, "%s%.0f",
		 len ? "," : "", worst);
	note("failover: round %d/%d: slowest slot fired by its new owner "
	     "%.0f ms after the kill%s",
	     k + 1, o->kills, worst, res->timeouts ? " (some never did)" : "");
	if (bench_stop)
		return -1;

	set_phase(f, "round %d/%d: restarting %s", k + 1, o->kills, v->id);
	return worker_spawn(f, v);
}

static int
rounds_run(struct failover *f, struct fo_result *res, int64_t stream_end_ms)
{
	const struct bench_opts *o = f->o;
	int next = 0;

	for (int k = 0; k < o->kills && !bench_stop; k++) {
		struct fo_worker *v = NULL;

		set_phase(f, "round %d/%d: waiting for a settled cluster",
			  k + 1, o->kills);
		if (wait_settled(f, 1, 120) < 0)
			return -1;
		set_phase(f, "round %d/%d: settled, pausing %.1f s", k + 1,
			  o->kills, o->pause);
		if (sleep_s(o->pause) < 0)
			return -1;
		if (stream_end_ms - now_us() / 1000 <
		    40000 + 3 * o->session_timeout_ms) {
			note("failover: the stream ends soon; stopping after "
			     "%d round(s) (raise --duration)",
			     k);
			return 0;
		}
		if (cluster_fetch(f) < 0)
			return -1;
		/* Round robin among the workers that own slots. */
		for (int t = 0; t < f->nw && v == NULL; t++) {
			struct fo_worker *w = &f->w[(next + t) % f->nw];

			for (int i = 0; i < f->nslots && v == NULL; i++)
				if (w->pid > 0 &&
				    !strcmp(f->slot[i].owner, w->id))
					v = w;
		}
		if (v == NULL)
			return -1;
		next = (int)(v - f->w) + 1;
		if (round_run(f, k, v, res) < 0)
			return -1;
	}
	/* The last victim back and holding its share again. */
	set_phase(f, "waiting for a settled cluster after the last round");
	return wait_settled(f, 1, 120);
}

/* ----------------------------------------------------------- scenario --- */

int
scen_failover(struct bench_opts *o)
{
	struct failover f;
	struct fo_result res = {0};
	struct names nm;
	struct consumer *c = NULL;
	struct submit_stats st = {0};
	struct fire_stats fs;
	struct progress *prog = NULL;
	struct report *r;
	char err[256];
	int64_t t0_ms, mono0, real0, last_due = 0, *send = NULL;
	double dur, waited = -1;
	long count, very_late = 0;
	size_t nb;
	int batch, rc = -1, ok;

	if (o->worker_bin == NULL || o->worker_conf == NULL) {
		note("failover: --worker-bin and --worker-conf are required");
		return -1;
	}
	if (o->workers < 2 || o->workers > FO_MAX_WORKERS) {
		note("failover: --workers must be 2..%d", FO_MAX_WORKERS);
		return -1;
	}
	if (!o->rate_set)
		o->rate = 2000;
	if (o->lead_ms < 0)
		o->lead_ms = 2000;
	if (o->conns == 0)
		o->conns = 4;
	dur = o->duration > 0 ? o->duration : 30 + 30.0 * o->kills;
	count = (long)llround(o->rate * dur);
	batch = (int)ceil(o->rate / 100);
	if (o->batch && batch > o->batch)
		batch = o->batch;
	if (batch > 1000)
		batch = 1000;

	memset(&f, 0, sizeof(f));
	f.o = o;
	f.nw = o->workers;
	f.nslots = o->slots;
	f.slot = xcalloc((size_t)f.nslots, sizeof(*f.slot));
	pthread_mutex_init(&f.mu, NULL);
	snprintf(f.phase, sizeof(f.phase), "starting %d workers", f.nw);
	names_init(o, &nm);
	f.l = ledger_create(nm.id_prefix, (size_t)count);
	f.l->msg_cb = msg_cb;
	f.l->msg_arg = &f;
	f.api = httpc_create(o->api, err, sizeof(err));
	if (f.api == NULL) {
		note("failover: %s", err);
		goto out;
	}

	for (int i = 0; i < f.nw; i++) {
		snprintf(f.w[i].id, sizeof(f.w[i].id), "%s-fo%d", o->tag,
			 i + 1);
		if (worker_spawn(&f, &f.w[i]) < 0)
			goto out;
	}
	note("failover: %d workers (%s-fo1..%d, session timeout %ld ms), "
	     "waiting until they own every slot",
	     f.nw, o->tag, f.nw, o->session_timeout_ms);
	if (wait_settled(&f, 0, 120) < 0)
		goto out;
	if (start_consumer(o, &nm, f.l, &c) < 0)
		goto out;

	/* Task i is due at t0 + i/rate; its batch is sent lead ms earlier. */
	real0 = now_us();
	mono0 = clock_mono_us();
	t0_ms = real0 / 1000 + o->lead_ms + 500;
	for (long i = 0; i < count; i++)
		f.l->due_ms[i] =
			t0_ms + (int64_t)floor((double)i * 1000.0 / o->rate);
	nb = ((size_t)count + (size_t)batch - 1) / (size_t)batch;
	send = xcalloc(nb ? nb : 1, sizeof(*send));
	for (size_t b = 0; b < nb; b++)
		send[b] = mono0 +
			  (f.l->due_ms[b * (size_t)batch] - o->lead_ms) * 1000 -
			  real0;
	note("failover: %.0f tasks due/s for up to %.0f s, submitted %ld ms "
	     "ahead in batches of %d; %d kill(s), topic %s",
	     o->rate, dur, o->lead_ms, batch, o->kills, nm.kafka_topic);
	f.s = submitter_start(o, f.l, nm.topic, batch, send, 0);
	prog = progress_start(o, progress_cb, &f);

	ok = rounds_run(&f, &res, count ? f.l->due_ms[count - 1] : t0_ms) == 0;

	set_phase(&f, "stream stopped, waiting for the last tasks");
	submitter_halt(f.s);
	submitter_join(f.s, &st);
	f.sent_final = st.tasks_sent;
	f.s = NULL;
	for (long i = count - 1; i >= 0; i--)
		if (f.l->accept_us[i]) {
			last_due = f.l->due_ms[i];
			break;
		}
	wait_received(o, f.l, c, last_due);
	/* The victims' claims that were never published come back only when
	 * their lease runs out: read on until Redis holds nothing in flight,
	 * so that they count as late, not as lost. */
	if (!bench_stop) {
		set_phase(&f, "waiting until Redis holds nothing in flight");
		waited = quiesce(o);
		wait_received(o, f.l, c, last_due);
	}
	progress_stop(prog);
	prog = NULL;
	consumer_stop(c);
	c = NULL;
	for (size_t i = 0; i < f.l->n; i++)
		if (f.l->copies[i] && f.l->fired_ms[i] - f.l->due_ms[i] >
					      3 * o->session_timeout_ms)
			very_late++;

	r = report_create(o->label);
	report_int(r, "workers", "workers (run by the bench)", f.nw);
	report_int(r, "session_timeout_ms", "ZooKeeper session timeout (ms)",
		   o->session_timeout_ms);
	report_int(r, "kills", "kills (SIGKILL) done", res.rounds);
	report_int(r, "master_kills", "  of which the master",
		   res.master_kills);
	report_int(r, "samples", "samples (slots of the victims)",
		   (long long)res.n);
	report_int(r, "timeouts", "slots never fired by a new owner",
		   res.timeouts);
	report_latency(r, "failover", "kill -> first fire by the new owner",
		       res.failover_ms, res.n);
	report_latency(r, "reassign",
		       "kill -> new owner on /v1/cluster (polled 10/s)",
		       res.reassign_ms, res.nre);
	report_str(r, "per_kill_max_ms", "slowest slot of each kill (ms)",
		   res.per_kill);
	report_num(r, "rate", "due rate (tasks/s)", o->rate, "%.0f");
	report_int(r, "lead_ms", "submitted ahead of due (ms)", o->lead_ms);
	submit_report(r, &st);
	fire_analyse(r, f.l, &fs);
	report_int(r, "lease_refired",
		   "first fired > 3 session timeouts late (victim's claims, "
		   "re-fired after their lease)",
		   very_late);
	report_quiesce(r, waited);
	report_print(r);
	report_destroy(r);
	rc = ok && res.n > 0 && res.timeouts == 0 && fs.lost == 0 &&
			     fs.early == 0
		     ? 0
		     : -1;

out:
	progress_stop(prog);
	if (f.s != NULL) {
		submitter_halt(f.s);
		submitter_join(f.s, &st);
	}
	consumer_stop(c);
	workers_stop(&f);
	httpc_destroy(f.api);
	ledger_destroy(f.l);
	pthread_mutex_destroy(&f.mu);
	xfree(f.slot);
	xfree(send);
	xfree(st.req_ms);
	xfree(res.failover_ms);
	xfree(res.reassign_ms);
	return rc;
}
