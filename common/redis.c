#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#ifdef HAVE_HIREDIS_SSL
#include <hiredis/hiredis_ssl.h>
#endif

#include "cfg.h"
#include "crypto.h"
#include "log.h"
#include "num.h"
#include "redis.h"
#include "secret.h"
#include "url.h"
#include "xmalloc.h"

#define REDIS_RUN_ID_MAX 41 /* 40 hex digits */

struct redis {
	struct event_base *base;
	redisAsyncContext *ac;
	struct event *retry_ev;
	int up;
	int ready; /* AUTH/SELECT done */
	int backoff_ms;
	int timeout_ms;
	char *host;
	int port;
	char *user;	/* an ACL user, NULL: AUTH password alone */
	char *password; /* NULL: no AUTH */
	int db;
	int tls; /* rediss:// */
#ifdef HAVE_HIREDIS_SSL
	redisSSLContext *ssl;
#endif
	int auth_refused; /* said once until AUTH passes again */
	size_t pending;
	redis_state_fn state_cb;
	void *arg;
	int destroying;
	char *sub_channel;
	redis_reply_fn sub_cb;
	void *sub_arg;
	/* Send times of unanswered commands, oldest first (replies come in
	 * order): hiredis 0.14 has no command timeout, so a hung server is
	 * detected here and the connection dropped. */
	int64_t *sent;
	size_t sent_head, sent_cap;
	struct event *watch_ev;
	int policy_checked; /* maxmemory-policy read once */
	/* EVALSHA: conn counts connections; script i was sent a SCRIPT
	 * LOAD on connection loaded[i] (0: never). no_evalsha: the server
	 * refused SCRIPT LOAD (an ACL without it): plain EVAL from then. */
	unsigned long conn;
	unsigned long *loaded;
	size_t nloaded;
	int no_evalsha;
	/* Sentinel mode (redis.sentinels): host/port are the primary's,
	 * looked up before every connect; ROLE must say "master" before
	 * the connection is used. sac subscribes to +switch-master on one
	 * Sentinel (s_sub, rotating when it fails). last_host/last_port/
	 * last_run: the primary of the last usable connection; a different
	 * one, the same address served by a restarted process (another
	 * run_id: it came back empty or from an old snapshot before the
	 * Sentinels noticed), or a +switch-master since is a failover, told
	 * to failover_cb (without Sentinels too: a restart). run_id: the
	 * node's, read (INFO) before it is used; empty when INFO is refused,
	 * and then every reconnection counts as a restart. */
	int nsentinels;
	char **s_host;
	int *s_port;
	int s_pref; /* the sentinel that answered last */
	char *master_name;
	char *s_password; /* NULL: no AUTH to the Sentinels */
	redisAsyncContext *sac;
	int s_sub;
	struct event *s_retry_ev;
	int lookup_failing; /* said once until a lookup succeeds */
	char *last_host;
	int last_port;
	char last_run[REDIS_RUN_ID_MAX];
	char run_id[REDIS_RUN_ID_MAX];
	int switched;
	int role_refused; /* ROLE not allowed: Sentinel's word is taken */
	int info_refused; /* INFO not allowed: no run_id */
	unsigned long failovers;
	redis_state_fn failover_cb;
	void *failover_arg;
};

/*
 * The scripts this process evaluates, by the address of their text (the
 * string literals of proto/scripts.h) and, for a text seen at a second
 * address, by content: each with its SHA-1 as EVALSHA names it. Used by
 * the loop thread only, like every struct redis. Beyond SCRIPT_MAX
 * different scripts, the rest go as plain EVAL.
 */
#define SCRIPT_MAX 64
#define SCRIPT_ADDRS 256
static struct script {
	const char *text;
	size_t len;
	char sha[2 * CRYPTO_SHA1_LEN + 1];
} scripts[SCRIPT_MAX];
static size_t nscripts;
static struct {
	const char *addr;
	int i;
} script_addrs[SCRIPT_ADDRS];
static size_t nscript_addrs;

static int
script_find(const char *text, size_t len)
{
	unsigned char md[CRYPTO_SHA1_LEN];
	struct script *sc;
	int i = -1;

	for (size_t k = 0; k < nscript_addrs; k++)
		if (script_addrs[k].addr == text)
			return script_addrs[k].i;
	for (size_t k = 0; k < nscripts && i < 0; k++)
		if (scripts[k].len == len &&
		    memcmp(scripts[k].text, text, len) == 0)
			i = (int)k;
	if (i < 0) {
		if (nscripts == SCRIPT_MAX)
			return -1;
		sc = &scripts[nscripts];
		sc->text = text;
		sc->len = len;
		crypto_sha1(text, len, md);
		for (int b = 0; b < CRYPTO_SHA1_LEN; b++)
			snprintf(sc->sha + 2 * b, 3, "%02x", md[b]);
		i = (int)nscripts++;
	}
	if (nscript_addrs < SCRIPT_ADDRS) {
		script_addrs[nscript_addrs].addr = text;
		script_addrs[nscript_addrs].i = i;
		nscript_addrs++;
	}
	return i;
}

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sent_push(struct redis *r)
{
	if (r->pending >= r->sent_cap) {
		size_t cap = r->sent_cap ? r->sent_cap * 2 : 64;
		int64_t *n = xcalloc(cap, sizeof(*n));

		for (size_t i = 0; i < r->pending; i++)
			n[i] = r->sent[(r->sent_head + i) % r->sent_cap];
		xfree(r->sent);
		r->sent = n;
		r->sent_cap = cap;
		r->sent_head = 0;
	}
	r->sent[(r->sent_head + r->pending) % r->sent_cap] = mono_ms();
}

static void
sent_pop(struct redis *r)
{
	if (r->sent_cap > 0)
		r->sent_head = (r->sent_head + 1) % r->sent_cap;
}

struct redis_call {
	struct redis *r;
	redis_reply_fn cb;
	void *arg;
	int script; /* an EVALSHA: a NOSCRIPT answer means a flushed cache */
};

static void redis_connect(struct redis *r);

static void
redis_set_state(struct redis *r, int up)
{
	if (r->up == up || r->destroying)
		return;
	r->up = up;
	if (up)
		log_info("redis connected", "host=%s port=%d db=%d", r->host,
			 r->port, r->db);
	else
		log_warn("redis disconnected", "host=%s port=%d", r->host,
			 r->port);
	if (r->state_cb != NULL && !r->destroying)
		r->state_cb(r, up, r->arg);
}

static void
schedule_retry(struct redis *r)
{
	struct timeval tv;

	if (r->destroying)
		return;
	tv.tv_sec = r->backoff_ms / 1000;
	tv.tv_usec = (r->backoff_ms % 1000) * 1000;
	evtimer_add(r->retry_ev, &tv);
	r->backoff_ms = r->backoff_ms * 2 > 1000 ? 1000 : r->backoff_ms * 2;
}

/* A command unanswered for timeout_ms: the server hangs (stopped, swapping,
 * a network black hole). Drop the connection; callbacks get NULL and the
 * usual reconnect takes over. */
static void
watch_cb(evutil_socket_t fd, short what, void *arg)
{
	struct redis *r = arg;
	redisAsyncContext *ac;

	if (r->ac == NULL || r->pending == 0 ||
	    mono_ms() - r->sent[r->sent_head] < r->timeout_ms)
		return;
	log_warn("redis command timed out: dropping the connection",
		 "pending=%zu timeout_ms=%d", r->pending, r->timeout_ms);
	/* Not redisAsyncDisconnect: that waits for the missing replies.
	 * Freeing fails every pending callback with NULL at once. */
	ac = r->ac;
	r->ac = NULL;
	r->ready = 0;
	redisAsyncFree(ac);
	if (r->up) { /* no disconnect callback came */
		redis_set_state(r, 0);
		schedule_retry(r);
	}
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	redis_connect(arg);
}

static void
call_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis_call *c = privdata;
	struct redis *r = c->r;

	sent_pop(r);
	r->pending--;
	if (c->script && reply != NULL &&
	    ((redisReply *)reply)->type == REDIS_REPLY_ERROR &&
	    strncmp(((redisReply *)reply)->str, "NOSCRIPT", 8) == 0) {
		/* The server's script cache was emptied under a live
		 * connection (SCRIPT FLUSH): this call fails like any
		 * Redis error; the next call of each script loads it
		 * again first. */
		log_warn("redis lost its scripts: loading them again",
			 "host=%s port=%d", r->host, r->port);
		r->conn++;
	}
	if (c->cb != NULL)
		c->cb(r, reply, c->arg);
	xfree(c);
}

/* SCRIPT LOAD's answer: an error means this server will not take
 * EVALSHA (an ACL user without SCRIPT, a proxy without it): plain EVAL
 * from then on. The EVALSHA sent behind it fails once (NOSCRIPT). */
static void
script_load_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;

	sent_pop(r);
	r->pending--;
	if (rep == NULL || rep->type != REDIS_REPLY_ERROR || r->no_evalsha)
		return;
	log_warn("redis refused SCRIPT LOAD: sending scripts with every call",
		 "host=%s port=%d error=\"%s\"", r->host, r->port, rep->str);
	r->no_evalsha = 1;
}

static void
sub_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;

	/* ["message", channel, payload]; subscribe confirmations ignored. */
	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY ||
	    rep->elements != 3 || rep->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(rep->element[0]->str, "message") != 0)
		return;
	r->sub_cb(r, rep->element[2], r->sub_arg);
}

/* An allkeys-* eviction policy lets Redis drop the slot index when it is
 * full: nothing is lost (the DB has every task), but evicted tasks fire
 * late, when a sweeper or rebuild finds them. Said once per connection
 * object; a server that refuses CONFIG (managed Redis) is not asked
 * again. */
static void
policy_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;

	if (rep == NULL)
		return;
	r->policy_checked = 1;
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[1]->type != REDIS_REPLY_STRING) {
		log_debug("redis maxmemory-policy unknown (CONFIG refused)",
			  "host=%s port=%d", r->host, r->port);
		return;
	}
	if (strncmp(rep->element[1]->str, "allkeys-", 8) == 0)
		log_warn(
			"redis may evict the task index when full: set "
			"maxmemory-policy to noeviction or a volatile-* policy",
			"host=%s port=%d policy=%s", r->host, r->port,
			rep->element[1]->str);
}

static void
auth_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;

	if (rep == NULL || rep->type != REDIS_REPLY_ERROR) {
		if (rep != NULL)
			r->auth_refused = 0;
		return;
	}
	if (!r->auth_refused)
		log_error("redis refused the credentials",
			  "host=%s port=%d user=%s error=\"%s\" hint=\"check "
			  "redis.url's user and redis.password_file\"",
			  r->host, r->port, r->user ? r->user : "default",
			  rep->str);
	r->auth_refused = 1;
}

static void redis_ready(struct redis *r);
static void role_cb(redisAsyncContext *ac, void *reply, void *privdata);
static void run_id_cb(redisAsyncContext *ac, void *reply, void *privdata);

static void
setup_done_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;

	if (rep == NULL)
		return;
	if (rep->type == REDIS_REPLY_ERROR && r->auth_refused) {
		redisAsyncDisconnect(ac);
		return;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		log_error("redis setup failed", "error=\"%s\"", rep->str);
		redisAsyncDisconnect(ac);
		return;
	}
	if (ac != r->ac)
		return;
	if (r->nsentinels > 0 && !r->role_refused) {
		/* Sentinel's answer may be stale (a failover under way):
		 * the node must say it is the primary itself. */
		redisAsyncCommand(ac, role_cb, r, "ROLE");
		return;
	}
	if (!r->info_refused) {
		/* Without Sentinels too: a Redis restarted at once (a
		 * crash, systemd's Restart=) is told by its run_id. */
		redisAsyncCommand(ac, run_id_cb, r, "INFO server");
		return;
	}
	redis_ready(r);
}

/* The connection is usable: AUTH, SELECT (and ROLE, INFO) passed.
 * Another primary than the last usable connection's (an address, a
 * +switch-master) is a failover; the same address served by another
 * process (its run_id; any reconnection when INFO is refused, since a
 * restart cannot be told then) is a restart: either may have lost the
 * last writes, or come back with an old snapshot's index and markers. */
static void
redis_ready(struct redis *r)
{
	int moved = 0, restarted = 0;

	r->ready = 1;
	r->backoff_ms = 50;
	if (r->last_host != NULL) {
		moved = r->switched || strcmp(r->last_host, r->host) != 0 ||
			r->last_port != r->port;
		restarted = !moved &&
			    (r->info_refused ||
			     (r->last_run[0] != '\0' && r->run_id[0] != '\0' &&
			      strcmp(r->last_run, r->run_id) != 0));
	}
	if (r->last_host == NULL || strcmp(r->last_host, r->host) != 0) {
		xfree(r->last_host);
		r->last_host = xstrdup(r->host);
	}
	r->last_port = r->port;
	memcpy(r->last_run, r->run_id, sizeof(r->last_run));
	r->switched = 0;
	if (r->sub_channel != NULL)
		redisAsyncCommand(r->ac, sub_cb, r, "SUBSCRIBE %s",
				  r->sub_channel);
	else if (!r->policy_checked)
		redisAsyncCommand(r->ac, policy_cb, r,
				  "CONFIG GET maxmemory-policy");
	if (moved || restarted) {
		r->failovers++;
		if (r->nsentinels > 0)
			log_warn("redis failover: a new primary; the index may "
				 "lack the last writes",
				 "master=%s primary=%s:%d restart=%s "
				 "failovers=%lu",
				 r->master_name, r->host, r->port,
				 restarted ? "yes" : "no", r->failovers);
		else
			log_warn("redis restarted: the index may lack the last "
				 "writes",
				 "host=%s port=%d seen=%s failovers=%lu",
				 r->host, r->port,
				 moved		   ? "another address"
				 : r->info_refused ? "a reconnection (INFO "
						     "refused)"
						   : "another run_id",
				 r->failovers);
		/* Before the state change: the owner marks its slots for
		 * a rebuild before anything claims from the new primary. */
		if (r->failover_cb != NULL)
			r->failover_cb(r, 1, r->failover_arg);
	}
	redis_set_state(r, 1);
}

/* The primary's run_id: a restart at the same address changes it. */
static void
run_id_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;
	const char *p;

	if (rep == NULL || ac != r->ac)
		return;
	r->run_id[0] = '\0';
	if (rep->type != REDIS_REPLY_STRING) {
		r->info_refused = 1;
		log_warn("redis refused INFO: a restart cannot be told, so "
			 "every reconnection rebuilds the index; grant the "
			 "user +info",
			 "host=%s port=%d error=\"%s\"", r->host, r->port,
			 rep->type == REDIS_REPLY_ERROR ? rep->str
							: "unexpected");
	} else if ((p = strstr(rep->str, "run_id:")) != NULL)
		sscanf(p + 7, "%40[0-9a-f]", r->run_id);
	redis_ready(r);
}

static void
role_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;

	if (rep == NULL || ac != r->ac)
		return;
	if (rep->type == REDIS_REPLY_ERROR) {
		/* An ACL user without ROLE: Sentinel's word is taken (a
		 * demoted node still refuses writes: READONLY). */
		log_warn("redis refused ROLE: trusting the sentinels",
			 "host=%s port=%d error=\"%s\"", r->host, r->port,
			 rep->str);
		r->role_refused = 1;
		redis_ready(r);
		return;
	}
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(rep->element[0]->str, "master") == 0) {
		if (r->info_refused)
			redis_ready(r);
		else
			redisAsyncCommand(ac, run_id_cb, r, "INFO server");
		return;
	}
	log_warn("redis node is not the primary: looking it up again",
		 "host=%s port=%d role=%s", r->host, r->port,
		 rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
				 rep->element[0]->type == REDIS_REPLY_STRING
			 ? rep->element[0]->str
			 : "unknown");
	redisAsyncDisconnect(ac);
}

static void
connect_cb(const redisAsyncContext *ac, int status)
{
	struct redis *r = ac->data;

	if (status != REDIS_OK) {
		log_debug("redis connect failed", "error=\"%s\"", ac->errstr);
		r->ac = NULL;
		schedule_retry(r);
		return;
	}
	r->conn++; /* every script is loaded again on this connection */
	if (r->password != NULL && r->user != NULL)
		redisAsyncCommand(r->ac, auth_cb, r, "AUTH %s %s", r->user,
				  r->password);
	else if (r->password != NULL)
		redisAsyncCommand(r->ac, auth_cb, r, "AUTH %s", r->password);
	/* The reply to SELECT (or PING) marks the connection usable. */
	redisAsyncCommand(r->ac, setup_done_cb, r, "SELECT %d", r->db);
}

static void
disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct redis *r = ac->data;

	if (r->ac == ac)
		r->ac = NULL;
	r->ready = 0;
	redis_set_state(r, 0);
	schedule_retry(r);
}

/* Sentinel ------------------------------------------------------------ */

/* AUTH on a blocking connection to a Sentinel, when configured. */
static int
sentinel_auth(struct redis *r, redisContext *c, int i)
{
	redisReply *rep;
	int ok;

	if (r->s_password == NULL)
		return 0;
	rep = redisCommand(c, "AUTH %s", r->s_password);
	ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
	if (!ok && !r->lookup_failing)
		log_warn("redis sentinel refused AUTH",
			 "sentinel=%s:%d error=\"%s\" hint=\"check "
			 "redis.sentinel_password_file\"",
			 r->s_host[i], r->s_port[i],
			 rep && rep->str ? rep->str : c->errstr);
	freeReplyObject(rep);
	return ok ? 0 : -1;
}

/*
 * SENTINEL get-master-addr-by-name, asking each Sentinel in turn (the
 * one that answered last first) on a short blocking connection: they run
 * on the LAN, answer in well under a millisecond, and a refused port
 * fails at once; a black-holed one costs at most 500 ms. Sets host/port.
 */
static int
sentinel_lookup(struct redis *r)
{
	int tmo = r->timeout_ms < 500 ? r->timeout_ms : 500;
	struct timeval tv = {tmo / 1000, (tmo % 1000) * 1000};

	for (int k = 0; k < r->nsentinels; k++) {
		int i = (r->s_pref + k) % r->nsentinels;
		redisContext *c =
			redisConnectWithTimeout(r->s_host[i], r->s_port[i], tv);
		redisReply *rep = NULL;

		if (c == NULL || c->err) {
			log_debug("redis sentinel unreachable",
				  "sentinel=%s:%d error=\"%s\"", r->s_host[i],
				  r->s_port[i], c ? c->errstr : "no memory");
			redisFree(c);
			continue;
		}
		redisSetTimeout(c, tv);
		if (sentinel_auth(r, c, i) < 0) { /* said why */
			redisFree(c);
			continue;
		}
		rep = redisCommand(c, "SENTINEL get-master-addr-by-name %s",
				   r->master_name);
		if (rep != NULL && rep->type == REDIS_REPLY_ARRAY &&
		    rep->elements == 2 &&
		    rep->element[0]->type == REDIS_REPLY_STRING &&
		    rep->element[1]->type == REDIS_REPLY_STRING) {
			int port = atoi(rep->element[1]->str);

			if (strcmp(r->host, rep->element[0]->str) != 0 ||
			    r->port != port)
				log_info("redis sentinel names the primary",
					 "sentinel=%s:%d master=%s "
					 "primary=%s:%d",
					 r->s_host[i], r->s_port[i],
					 r->master_name, rep->element[0]->str,
					 port);
			xfree(r->host);
			r->host = xstrdup(rep->element[0]->str);
			r->port = port;
			r->s_pref = i;
			r->lookup_failing = 0;
			freeReplyObject(rep);
			redisFree(c);
			return 0;
		}
		if (!r->lookup_failing)
			log_warn("redis sentinel does not know the primary",
				 "sentinel=%s:%d master=%s error=\"%s\"",
				 r->s_host[i], r->s_port[i], r->master_name,
				 rep == NULL ? c->errstr
				 : rep->type == REDIS_REPLY_ERROR
					 ? rep->str
					 : "no address");
		freeReplyObject(rep);
		redisFree(c);
	}
	if (!r->lookup_failing)
		log_warn("redis primary not found: no sentinel answered",
			 "master=%s sentinels=%d", r->master_name,
			 r->nsentinels);
	r->lookup_failing = 1;
	return -1;
}

/* Drops the connection to the primary now (callbacks get NULL) and
 * reconnects at once, looking the primary up again. */
static void
redis_drop(struct redis *r, const char *why)
{
	redisAsyncContext *ac = r->ac;

	if (ac == NULL)
		return;
	log_warn("redis connection dropped", "host=%s port=%d reason=%s",
		 r->host, r->port, why);
	r->ac = NULL;
	r->ready = 0;
	redisAsyncFree(ac);
	if (!r->destroying) {
		redis_set_state(r, 0);
		r->backoff_ms = 20;
		evtimer_del(r->retry_ev);
		schedule_retry(r);
	}
}

static void sentinel_sub_connect(struct redis *r);

static void
sentinel_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	sentinel_sub_connect(arg);
}

static void
sentinel_sub_later(struct redis *r)
{
	struct timeval tv = {1, 0};

	if (r->destroying)
		return;
	r->s_sub = (r->s_sub + 1) % r->nsentinels;
	evtimer_add(r->s_retry_ev, &tv);
}

/* "+switch-master <name> <old ip> <old port> <new ip> <new port>" */
static void
switch_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis *r = privdata;
	redisReply *rep = reply;
	char name[256], oip[256], nip[256];
	int oport, nport;

	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY ||
	    rep->elements != 3 || rep->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(rep->element[0]->str, "message") != 0 ||
	    rep->element[2]->type != REDIS_REPLY_STRING)
		return;
	if (sscanf(rep->element[2]->str, "%255s %255s %d %255s %d", name, oip,
		   &oport, nip, &nport) != 5 ||
	    strcmp(name, r->master_name) != 0)
		return;
	log_warn("redis sentinel: the primary moved (+switch-master)",
		 "master=%s from=%s:%d to=%s:%d", name, oip, oport, nip, nport);
	if (r->ready && r->ac != NULL && !strcmp(r->host, nip) &&
	    r->port == nport && r->last_host != NULL &&
	    !strcmp(r->last_host, nip) && r->last_port == nport)
		return; /* already there, the failover noted on arrival */
	r->switched = 1;
	if (r->ac != NULL)
		redis_drop(r, "primary_moved");
}

static void
sentinel_auth_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *rep = reply;

	if (rep != NULL && rep->type == REDIS_REPLY_ERROR)
		log_warn("redis sentinel refused AUTH", "error=\"%s\"",
			 rep->str);
}

static void
sentinel_connect_cb(const redisAsyncContext *ac, int status)
{
	struct redis *r = ac->data;

	if (status != REDIS_OK) {
		r->sac = NULL;
		sentinel_sub_later(r);
		return;
	}
	if (r->s_password != NULL)
		redisAsyncCommand(r->sac, sentinel_auth_cb, r, "AUTH %s",
				  r->s_password);
	redisAsyncCommand(r->sac, switch_cb, r, "SUBSCRIBE +switch-master");
	log_debug("redis sentinel subscribed", "sentinel=%s:%d",
		  r->s_host[r->s_sub], r->s_port[r->s_sub]);
}

static void
sentinel_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct redis *r = ac->data;

	if (r->sac == ac)
		r->sac = NULL;
	sentinel_sub_later(r);
}

/* The subscription that hears of failovers at once (without it, a
 * demoted primary is noticed only when it drops the connection or when
 * ROLE is asked after a reconnect). */
static void
sentinel_sub_connect(struct redis *r)
{
	redisAsyncContext *ac;

	if (r->destroying)
		return;
	ac = redisAsyncConnect(r->s_host[r->s_sub], r->s_port[r->s_sub]);
	if (ac == NULL || ac->err) {
		if (ac != NULL)
			redisAsyncFree(ac);
		sentinel_sub_later(r);
		return;
	}
	ac->data = r;
	r->sac = ac;
	redisLibeventAttach(ac, r->base);
	redisAsyncSetConnectCallback(ac, sentinel_connect_cb);
	redisAsyncSetDisconnectCallback(ac, sentinel_disconnect_cb);
}

/*
 * Reply objects in one allocation each: a string's bytes and an array's
 * element vector follow the redisReply they belong to, where hiredis'
 * own functions make two (a fired task's claim, scan and cleanup replies
 * are a dozen objects). Installed on the main connection's reader only;
 * hiredis frees what its reader made through the same table, and no
 * reply of that connection is kept past its callback or given to
 * freeReplyObject(). The RESP3 types (hiredis 1.x) are never asked for
 * (no HELLO 3) but are made correctly all the same.
 */

/* A reply object of type with extra bytes after it, zeroed; NULL when
 * out of memory. */
static redisReply *
reply_new(int type, size_t extra)
{
	redisReply *r = zalloc(1, sizeof(*r) + extra);

	if (r != NULL)
		r->type = type;
	return r;
}

/* Puts r in its place in the array being read (if any); r may be NULL
 * (out of memory: the reader fails). */
static void *
reply_attach(const redisReadTask *task, redisReply *r)
{
	if (r != NULL && task->parent != NULL) {
		redisReply *parent = task->parent->obj;

		parent->element[task->idx] = r;
	}
	return r;
}

static void *
reply_string(const redisReadTask *task, char *str, size_t len)
{
	/* Not reply_new(): the bytes are copied over, no need to zero them. */
	redisReply *r = malloc(sizeof(*r) + len + 1);

	if (r == NULL)
		return NULL;
	memset(r, 0, sizeof(*r));
	r->type = task->type;
	r->str = (char *)(r + 1);
#if HIREDIS_MAJOR >= 1
	if (task->type == REDIS_REPLY_VERB && len >= 4) {
		memcpy(r->vtype, str, 3);
		r->vtype[3] = '\0';
		str += 4;
		len -= 4;
	}
#endif
	memcpy(r->str, str, len);
	r->str[len] = '\0';
	r->len = len;
	return reply_attach(task, r);
}

#if HIREDIS_MAJOR >= 1
static void *
reply_array(const redisReadTask *task, size_t n)
#else
static void *
reply_array(const redisReadTask *task, int n)
#endif
{
	size_t count = n > 0 ? (size_t)n : 0;
	redisReply *r = reply_new(task->type, count * sizeof(redisReply *));

	if (r != NULL && count > 0) {
		r->elements = count;
		r->element = (redisReply **)(r + 1);
	}
	return reply_attach(task, r);
}

static void *
reply_integer(const redisReadTask *task, long long v)
{
	redisReply *r = reply_new(REDIS_REPLY_INTEGER, 0);

	if (r != NULL)
		r->integer = v;
	return reply_attach(task, r);
}

static void *
reply_nil(const redisReadTask *task)
{
	return reply_attach(task, reply_new(REDIS_REPLY_NIL, 0));
}

#if HIREDIS_MAJOR >= 1
static void *
reply_double(const redisReadTask *task, double v, char *str, size_t len)
{
	redisReply *r = reply_string(task, str, len);

	if (r != NULL) {
		r->type = REDIS_REPLY_DOUBLE;
		r->dval = v;
	}
	return r;
}

static void *
reply_bool(const redisReadTask *task, int v)
{
	redisReply *r = reply_new(REDIS_REPLY_BOOL, 0);

	if (r != NULL)
		r->integer = v != 0;
	return reply_attach(task, r);
}
#endif

static void
reply_free(void *p)
{
	redisReply *r = p;

	if (r == NULL)
		return;
	/* Only containers have elements; their vector is part of r. */
	for (size_t i = 0; r->element != NULL && i < r->elements; i++)
		reply_free(r->element[i]);
	free(r);
}

static redisReplyObjectFunctions reply_fns = {
	.createString = reply_string,
	.createArray = reply_array,
	.createInteger = reply_integer,
#if HIREDIS_MAJOR >= 1
	.createDouble = reply_double,
	.createBool = reply_bool,
#endif
	.createNil = reply_nil,
	.freeObject = reply_free,
};

const redisReplyObjectFunctions *
redis_reply_functions(void)
{
	return &reply_fns;
}

static void
redis_connect(struct redis *r)
{
	redisAsyncContext *ac;

	if (r->nsentinels > 0 && sentinel_lookup(r) < 0) {
		schedule_retry(r);
		return;
	}
	ac = redisAsyncConnect(r->host, r->port);

	if (ac == NULL || ac->err) {
		if (ac != NULL) {
			log_debug("redis connect failed", "error=\"%s\"",
				  ac->errstr);
			redisAsyncFree(ac);
		}
		schedule_retry(r);
		return;
	}
	ac->c.reader->fn = &reply_fns;
#ifdef HAVE_HIREDIS_SSL
	if (r->ssl != NULL &&
	    redisInitiateSSLWithContext(&ac->c, r->ssl) != REDIS_OK) {
		log_warn("redis TLS failed", "host=%s port=%d error=\"%s\"",
			 r->host, r->port, ac->c.errstr);
		redisAsyncFree(ac);
		schedule_retry(r);
		return;
	}
#endif
	ac->data = r;
	r->ac = ac;
	redisLibeventAttach(ac, r->base);
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
}

/* An AUTH error: the credentials, not the server's health. */
static int
auth_refusal(const char *msg)
{
	return !strncmp(msg, "WRONGPASS", 9) || !strncmp(msg, "NOAUTH", 6) ||
	       !strncmp(msg, "NOPERM", 6) || strstr(msg, "password") != NULL;
}

/*
 * Once at start, blocking: AUTH on a connection of its own, so that a
 * refused password stops the daemon with a clear message instead of a
 * reconnect loop. A server that does not answer is not an error here.
 */
static void
redis_probe(struct redis *r)
{
	struct timeval tv = {r->timeout_ms / 1000,
			     (r->timeout_ms % 1000) * 1000};
	redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
	redisReply *rep = NULL;

	if (c == NULL || c->err) {
		log_debug("redis not reachable at start", "error=\"%s\"",
			  c ? c->errstr : "out of memory");
		redisFree(c);
		return;
	}
	redisSetTimeout(c, tv);
#ifdef HAVE_HIREDIS_SSL
	if (r->ssl != NULL &&
	    redisInitiateSSLWithContext(c, r->ssl) != REDIS_OK)
		log_fatal("redis TLS failed",
			  "host=%s port=%d error=\"%s\" hint=\"check "
			  "redis.tls_ca and the server's certificate\"",
			  r->host, r->port, c->errstr);
#endif
	if (r->password != NULL && r->user != NULL)
		rep = redisCommand(c, "AUTH %s %s", r->user, r->password);
	else if (r->password != NULL)
		rep = redisCommand(c, "AUTH %s", r->password);
	else
		rep = redisCommand(c, "PING");
	if (rep != NULL && rep->type == REDIS_REPLY_ERROR &&
	    auth_refusal(rep->str))
		log_fatal("redis refused the credentials",
			  "host=%s port=%d user=%s error=\"%s\" hint=\"check "
			  "redis.url's user and redis.password_file\"",
			  r->host, r->port, r->user ? r->user : "default",
			  rep->str);
	freeReplyObject(rep);
	redisFree(c);
}

#ifdef HAVE_HIREDIS_SSL
static void
redis_tls_init(struct redis *r, const struct cfg *cfg)
{
	static int inited;
	redisSSLContextError e = REDIS_SSL_CTX_NONE;
	const char *ca = cfg_str(cfg, CFG_REDIS_TLS_CA);
	const char *cert = cfg_str(cfg, CFG_REDIS_TLS_CERT);
	const char *key = cfg_str(cfg, CFG_REDIS_TLS_KEY);

	if (!inited++)
		redisInitOpenSSL();
	r->ssl = redisCreateSSLContext(ca[0] ? ca : NULL, NULL,
				       cert[0] ? cert : NULL,
				       key[0] ? key : NULL, r->host, &e);
	if (r->ssl == NULL)
		log_fatal("redis TLS setup failed",
			  "error=\"%s\" hint=\"check redis.tls_ca, "
			  "redis.tls_cert and redis.tls_key\"",
			  redisSSLContextGetError(e));
}
#endif

/* redis.sentinels, redis.master_name, redis.sentinel_password_file. */
static void
sentinel_config(struct redis *r, const struct cfg *cfg)
{
	const char *p = cfg_str(cfg, CFG_REDIS_SENTINELS), *e;
	char item[300], host[256], err[512];
	int port;

	while (*p != '\0') {
		e = strchr(p, ',');
		if (e == NULL)
			e = p + strlen(p);
		snprintf(item, sizeof(item), "%.*s", (int)(e - p), p);
		if (hostport_parse(item, host, sizeof(host), &port) < 0)
			log_fatal("bad config",
				  "error=\"redis.sentinels: '%s' is not "
				  "host:port\"",
				  item);
		r->s_host = xrealloc(r->s_host, (size_t)(r->nsentinels + 1) *
							sizeof(*r->s_host));
		r->s_port = xrealloc(r->s_port, (size_t)(r->nsentinels + 1) *
							sizeof(*r->s_port));
		r->s_host[r->nsentinels] = xstrdup(host);
		r->s_port[r->nsentinels] = port;
		r->nsentinels++;
		p = *e ? e + 1 : e;
	}
	if (r->nsentinels == 0)
		return;
	r->master_name = xstrdup(cfg_str(cfg, CFG_REDIS_MASTER_NAME));
	if ((r->s_password = cfg_secret(cfg, CFG_REDIS_SENTINEL_PASSWORD_FILE,
					err, sizeof(err))) == NULL &&
	    err[0] != '\0')
		log_fatal("bad config", "error=\"%s\"", err);
	log_info("redis through sentinel", "master=%s sentinels=%d",
		 r->master_name, r->nsentinels);
}

struct redis *
redis_create(struct event_base *base, const struct cfg *cfg,
	     redis_state_fn state_cb, void *arg)
{
	struct redis *r = xcalloc(1, sizeof(*r));
	char err[512];
	struct url u;

	if (url_parse(cfg_str(cfg, CFG_REDIS_URL), &u, err, sizeof(err)) < 0)
		log_fatal("bad redis url", "error=\"%s\"", err);
	r->base = base;
	r->host = xstrdup(u.host);
	r->port = u.port ? u.port : 6379;
	r->tls = !strcmp(u.scheme, "rediss");
	/* "redis://:pw@h": no user, as before ACLs */
	r->user = u.user && u.user[0] ? xstrdup(u.user) : NULL;
	r->password = u.password ? xstrdup(u.password) : NULL;
	r->db = u.path ? atoi(u.path) : 0;
	url_clear(&u);
	if (r->password == NULL &&
	    (r->password = cfg_secret(cfg, CFG_REDIS_PASSWORD_FILE, err,
				      sizeof(err))) == NULL &&
	    err[0] != '\0')
		log_fatal("bad config", "error=\"%s\"", err);
	if (r->user != NULL && r->password == NULL)
		log_fatal("bad config",
			  "error=\"redis.url names user %s but no password: "
			  "set redis.password_file\"",
			  r->user);
#ifdef HAVE_HIREDIS_SSL
	if (r->tls)
		redis_tls_init(r, cfg);
#endif
	r->timeout_ms = (int)cfg_int(cfg, CFG_REDIS_TIMEOUT_MS);
	sentinel_config(r, cfg);
	if (r->nsentinels == 0 || sentinel_lookup(r) == 0)
		redis_probe(r);
	r->backoff_ms = 50;
	r->state_cb = state_cb;
	r->arg = arg;
	r->retry_ev = evtimer_new(base, retry_cb, r);
	r->watch_ev = event_new(base, -1, EV_PERSIST, watch_cb, r);
	{
		struct timeval tv = {0, 100000};

		event_add(r->watch_ev, &tv);
	}
	if (r->nsentinels > 0) {
		r->s_retry_ev = evtimer_new(base, sentinel_retry_cb, r);
		r->s_sub = r->s_pref;
		sentinel_sub_connect(r);
	}
	redis_connect(r);
	return r;
}

void
redis_on_failover(struct redis *r, redis_state_fn cb, void *arg)
{
	r->failover_cb = cb;
	r->failover_arg = arg;
}

unsigned long
redis_failovers(const struct redis *r)
{
	return r->failovers;
}

void
redis_destroy(struct redis *r)
{
	if (r == NULL)
		return;
	r->destroying = 1;
	if (r->ac != NULL) {
		redisAsyncContext *ac = r->ac;

		r->ac = NULL;
		redisAsyncFree(ac);
	}
	if (r->sac != NULL) {
		redisAsyncContext *ac = r->sac;

		r->sac = NULL;
		redisAsyncFree(ac);
	}
	if (r->s_retry_ev != NULL)
		event_free(r->s_retry_ev);
	for (int i = 0; i < r->nsentinels; i++)
		xfree(r->s_host[i]);
	xfree(r->s_host);
	xfree(r->s_port);
	xfree(r->master_name);
	xfree(r->last_host);
	secret_free(r->s_password);
	event_free(r->retry_ev);
	event_free(r->watch_ev);
	xfree(r->sent);
	xfree(r->loaded);
	xfree(r->sub_channel);
	xfree(r->host);
	xfree(r->user);
	secret_free(r->password);
#ifdef HAVE_HIREDIS_SSL
	redisFreeSSLContext(r->ssl);
#endif
	xfree(r);
}

int
redis_up(const struct redis *r)
{
	return r->ac != NULL && r->ready;
}

size_t
redis_pending(const struct redis *r)
{
	return r->ac != NULL ? r->pending : 0;
}

void
redis_subscribe(struct redis *r, const char *channel, redis_reply_fn cb,
		void *arg)
{
	xfree(r->sub_channel);
	r->sub_channel = xstrdup(channel);
	r->sub_cb = cb;
	r->sub_arg = arg;
	if (redis_up(r))
		redisAsyncCommand(r->ac, sub_cb, r, "SUBSCRIBE %s", channel);
}

/*
 * Not through hiredis's format strings: its parser appends a format's
 * literal characters one call at a time (17,000 instructions for a scan's
 * ZRANGEBYSCORE, the worker's most frequent command).
 */
int
redis_commandl(struct redis *r, redis_reply_fn cb, void *arg, ...)
{
	const char *argv[REDIS_COMMANDL_MAX];
	size_t len[REDIS_COMMANDL_MAX];
	const char *s;
	int argc = 0;
	va_list ap;

	va_start(ap, arg);
	while ((s = va_arg(ap, const char *)) != NULL) {
		if (argc == REDIS_COMMANDL_MAX)
			log_fatal("redis command with too many arguments",
				  "command=%s", argv[0]);
		argv[argc] = s;
		len[argc] = strlen(s);
		argc++;
	}
	va_end(ap);
	return redis_command_argv(r, cb, arg, argc, argv, len);
}

int
redis_probe_write(struct redis *r, const char *key, redis_reply_fn cb,
		  void *arg)
{
	return redis_commandl(r, cb, arg, "SET", key, "1", "PX", "10000", NULL);
}

/*
 * Queues a command in RESP, formatted here: hiredis's own formatter
 * (redisFormatSdsCommandArgv) spends about a thousand instructions an
 * argument on sdscatfmt, a fifth of the fire path's Redis work.
 */
static int
send_argv(redisAsyncContext *ac, redisCallbackFn *fn, void *privdata, int argc,
	  const char **argv, const size_t *len)
{
	char stack[4096], *buf = stack;
	size_t need = 1 + NUM_LL_MAX + 2, off;
	int rc;

	for (int i = 0; i < argc; i++)
		need += 1 + NUM_LL_MAX + 2 + len[i] + 2;
	if (need > sizeof(stack))
		buf = xmalloc(need);
	buf[0] = '*';
	off = 1 + num_format_ll(buf + 1, argc);
	memcpy(buf + off, "\r\n", 2);
	off += 2;
	for (int i = 0; i < argc; i++) {
		buf[off++] = '$';
		off += num_format_ll(buf + off, (long long)len[i]);
		memcpy(buf + off, "\r\n", 2);
		off += 2;
		memcpy(buf + off, argv[i], len[i]);
		off += len[i];
		memcpy(buf + off, "\r\n", 2);
		off += 2;
	}
	rc = redisAsyncFormattedCommand(ac, fn, privdata, buf, off);
	if (buf != stack)
		xfree(buf);
	return rc;
}

int
redis_command_argv(struct redis *r, redis_reply_fn cb, void *arg, int argc,
		   const char **argv, const size_t *argvlen)
{
	struct redis_call *c;

	if (!redis_up(r))
		return -1;
	c = xmalloc(sizeof(*c));
	c->r = r;
	c->cb = cb;
	c->arg = arg;
	c->script = 0;
	if (send_argv(r->ac, call_cb, c, argc, argv, argvlen) != REDIS_OK) {
		xfree(c);
		return -1;
	}
	sent_push(r);
	r->pending++;
	return 0;
}

int
redis_eval_argv(struct redis *r, redis_reply_fn cb, void *arg, int argc,
		const char **argv, const size_t *argvlen)
{
	struct redis_call *c;
	const char *sa[32], **av = sa;
	size_t sl[32], *al = sl;
	int i, rc;

	if (!redis_up(r))
		return -1;
	if (argc < 3 || r->no_evalsha ||
	    (i = script_find(argv[1], argvlen[1])) < 0)
		return redis_command_argv(r, cb, arg, argc, argv, argvlen);
	if ((size_t)i >= r->nloaded) {
		r->loaded =
			xrealloc(r->loaded, SCRIPT_MAX * sizeof(*r->loaded));
		memset(r->loaded + r->nloaded, 0,
		       (SCRIPT_MAX - r->nloaded) * sizeof(*r->loaded));
		r->nloaded = SCRIPT_MAX;
	}
	if (r->loaded[i] != r->conn) {
		/* Ahead of the EVALSHA on the same connection: Redis runs
		 * them in order, so the script is there when it is named. */
		const char *la[3] = {"SCRIPT", "LOAD", argv[1]};
		size_t ll[3] = {6, 4, argvlen[1]};

		if (redisAsyncCommandArgv(r->ac, script_load_cb, r, 3, la,
					  ll) != REDIS_OK)
			return -1;
		sent_push(r);
		r->pending++;
		r->loaded[i] = r->conn;
	}
	/* The caller's arguments, with EVALSHA <sha> for EVAL <text>. */
	if (argc > 32) {
		av = xmalloc((size_t)argc * sizeof(*av));
		al = xmalloc((size_t)argc * sizeof(*al));
	}
	memcpy(av, argv, (size_t)argc * sizeof(*av));
	memcpy(al, argvlen, (size_t)argc * sizeof(*al));
	av[0] = "EVALSHA";
	al[0] = 7;
	av[1] = scripts[i].sha;
	al[1] = 2 * CRYPTO_SHA1_LEN;
	c = xmalloc(sizeof(*c));
	c->r = r;
	c->cb = cb;
	c->arg = arg;
	c->script = 1;
	rc = send_argv(r->ac, call_cb, c, argc, av, al);
	if (av != sa) {
		xfree(av);
		xfree(al);
	}
	if (rc != REDIS_OK) {
		xfree(c);
		return -1;
	}
	sent_push(r);
	r->pending++;
	return 0;
}

int
redis_eval_args(struct redis *r, redis_reply_fn cb, void *arg,
		const struct redis_args *a)
{
	return redis_eval_argv(r, cb, arg, a->argc, a->argv, a->len);
}
